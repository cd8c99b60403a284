"""The trainer's exit statuses: its contract with the node agent, in one place that the
trainers, the agent and the ledger read without importing a trainer."""
from __future__ import annotations

EXIT_FINISHED = 0  # all iterations done, final checkpoint written (done=true)
EXIT_STOPPED = 3  # stopped on request (or orphaned), checkpoint written, work remains
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_OOM = 4  # ran out of GPU memory: the scheduler runs the job alone from then on
