"""What trainers measured of the live jobs, kept apart from their fate (lifecycle.py):
progress as telemetry reports it, stage-time estimates on their way to a profile, the
launch each job last reported its pace under, and GPU stage times by type. Advice: a job
that stops keeps its estimates (it runs again, the same model), one that ends drops them."""
from __future__ import annotations

from scheduler.core.profiles import ProfileEstimator
from scheduler.live.type_speeds import TypePaces


class Measured:
    def __init__(self, profile_threshold: float):
        self.progress: dict[int, float] = {}  # iterations done, per telemetry
        self.profiles = ProfileEstimator(threshold=profile_threshold)
        # the launch (ledger key) under which each live job last reported its pace
        self.paced: dict[int, tuple] = {}
        self.type_paces = TypePaces()  # jobs' GPU stage times by type (type_speeds.py)

    def note_progress(self, job_id: int, done: float) -> None:
        if done > self.progress.get(job_id, -1.0):
            self.progress[job_id] = done

    def stopped(self, job_id: int) -> None:
        """The job's trainers are gone: its next run reports its progress afresh."""
        self.progress.pop(job_id, None)

    def ended(self, job_id: int) -> None:
        """The job finished or was cancelled: nothing of it is measured again."""
        self.progress.pop(job_id, None)
        self.profiles.forget(job_id)
        self.paced.pop(job_id, None)
        self.type_paces.forget(job_id)
