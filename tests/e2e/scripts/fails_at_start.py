"""A user's program that fails at start, as one whose import is missing does: its first
FAILS runs (every run with `always`) die of a ModuleNotFoundError before any work; a later run
trains (here: says so) and exits 0. It counts its runs in its INTERLACE_CHECKPOINT_DIR, kept
across relaunches. Used by tests/e2e/test_failed_jobs_live.py."""
import os
import sys
from pathlib import Path

fails = sys.argv[1] if len(sys.argv) > 1 else "always"
counter = Path(os.environ["INTERLACE_CHECKPOINT_DIR"]) / "runs"
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
print(f"run {runs} of job {os.environ['INTERLACE_JOB_ID']}", flush=True)
if fails == "always" or runs <= int(fails):
    import a_module_that_is_not_installed  # noqa: F401  (the failure at start)
print("trained", flush=True)
