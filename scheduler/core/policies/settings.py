"""The built-in policies' own settings, each policy's given to it where it is made.

Defaults are the physically sensible ones (the `default` preset); the `paper` preset gives
the ones that reproduce the published artifact (scheduler/presets.py). Kept apart from the
policies' modules so that a preset can name them without importing numpy and scipy, which
Muri and Themis pull in.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TiresiasSettings:
    limits: tuple[float, ...] = (3250.0, 7200.0)  # GPU-seconds that end each queue
    promote: float = 0.0  # starvation promotion factor; 0 = off (as the artifact)
    # A job is demoted when its attained GPU-seconds reach a queue limit minus this slack
    # (float sums of wall times must not miss a limit by a hair); the artifact has none.
    demotion_slack: float = 1e-6
    # The artifact's quirk, which only the simulator's artifact mode turns on: a job is
    # admitted when enough GPUs are free in total, and one no node can place then "runs"
    # with no GPUs (it progresses and is charged service). Off: a job runs only on GPUs it
    # is placed on.
    admit_by_gpu_count: bool = False


@dataclass(frozen=True)
class MuriSettings:
    max_group: int = 4  # the most jobs one group holds (one per stage kind)
    auto_unpack: bool = True  # split a group slower than its members one after another
    # Which merges the matching may take while demand exceeds the cluster: "gain", those
    # whose group does at least `merge_gain` more work per second than its two packings
    # alone; "completion", those that shorten the expected completions of the jobs they
    # touch and of the queue behind; "efficiency", any (the paper's rule). muri_outlook.py.
    merge_rule: str = "gain"
    merge_gain: float = 0.1
    fresh_estimate_duration: bool = False  # Muri-S ranks a never-run job by the trace duration
    # A group that runs now counts this much more efficient when matching, so near-ties do
    # not regroup jobs (each regroup costs checkpoints and restarts) round after round.
    regroup_hysteresis: float = 0.1
    # Which maximum-weight matching: any exact one will do, but among equal-weight matchings
    # the artifact's own blossom implementation picks particular ones ("blossom" replays it).
    matching_backend: str = "auto"
    # A matching proven within this fraction of the best weight is accepted (the weights come
    # from profiles known to a few percent, and proving the last 0.5% can cost a dense
    # search of a second); 0 asks for a proven optimum every round.
    matching_rel_gap: float = 5e-3
    # Candidates of one class are matched in windows of about this many, consecutive in
    # priority order, a running group's candidates all in the window of its first (0: one
    # matching over all). Matching cost grows with the cube of the candidates; windows of 128
    # keep a round with 5,000 queued jobs well within a second, and a class rarely has more
    # than 128 candidates short of thousands of queued jobs.
    matching_window: int = 128


@dataclass(frozen=True)
class ThemisSettings:
    # How Themis solves its fairness program, which often has many optima: "bisection" (fast,
    # gives full shares where it can) or "ecos" (the artifact's program and interior-point
    # solver, built directly in ECOS's form: the artifact's optimum, bit for bit).
    solver: str = "bisection"


@dataclass(frozen=True)
class PolicySettings:
    """The settings of every built-in policy that has some; each is handed its own part."""

    tiresias: TiresiasSettings = field(default_factory=TiresiasSettings)
    muri: MuriSettings = field(default_factory=MuriSettings)
    themis: ThemisSettings = field(default_factory=ThemisSettings)
