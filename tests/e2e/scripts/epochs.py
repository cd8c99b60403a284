"""An epoch-based plain script, as users write them: no trainer/api.py, its own checkpoint.

    python epochs.py --epochs E --batches B [--sleep S] [--progress PATH | --no-progress]

Submitted with `--iterations E*B`: one iteration is one batch. Each batch "trains" (sleeps S
seconds), then rank 0 saves (epoch, batch) to state.json in its working directory (written
and renamed, so a kill never leaves half a file) and appends the batches done to PATH (the
file `interlace-submit --progress-file PATH` names; default $INTERLACE_PROGRESS_FILE; none
with --no-progress). A start that finds state.json resumes
mid-epoch from it and says so. SIGTERM kills it (the default), as it would most scripts.
Used by tests/e2e/test_logs_live.py.
"""
import argparse
import json
import os
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, required=True)
p.add_argument("--batches", type=int, required=True)
p.add_argument("--sleep", type=float, default=0.05)
p.add_argument("--progress", default=os.environ.get("INTERLACE_PROGRESS_FILE"))
p.add_argument("--no-progress", action="store_true")
args = p.parse_args()

rank = int(os.environ.get("INTERLACE_RANK", "0"))
state = Path("state.json")
progress = args.progress if not args.no_progress else None
epoch, batch = 0, 0
if state.exists():
    saved = json.loads(state.read_text())
    epoch, batch = saved["epoch"], saved["batch"]
    print(f"rank {rank}: resumed at epoch {epoch} batch {batch} "
          f"(iteration {epoch * args.batches + batch})", flush=True)
else:
    print(f"rank {rank}: starting", flush=True)

while epoch < args.epochs:
    time.sleep(args.sleep)  # one batch's work
    batch += 1
    if batch == args.batches:
        epoch, batch = epoch + 1, 0
        print(f"rank {rank}: epoch {epoch} done", flush=True)
    if rank == 0:
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"epoch": epoch, "batch": batch}))
        os.replace(tmp, state)
        if progress:
            with open(progress, "a") as fh:
                fh.write(f"{epoch * args.batches + batch}\n")
print(f"rank {rank}: done", flush=True)
