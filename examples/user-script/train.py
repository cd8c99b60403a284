"""Train a small MLP on scikit-learn's digits on the CPU: a plain PyTorch script, adapted in a
few lines (marked `# interlace`) to run as an Interlace job:

    interlace-submit --gpus 1 --iterations 3000 -- python examples/user-script/train.py --lr 0.1

It takes turns at its group's stage gate, reports its stage times to the planner, checkpoints
every --checkpoint-every iterations, stops with a checkpoint when preempted, and resumes from
it. Run by hand (no INTERLACE_* environment) it trains as before, checkpointing in ./checkpoints.
"""
import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from sklearn.datasets import load_digits
from torch import nn

from trainer import api  # interlace


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--checkpoint-every", type=int, default=200)  # interlace
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    gen = torch.Generator().manual_seed(1)
    job = api.job()  # interlace
    total = job.iterations or args.iterations  # interlace
    start, saved = job.resume()  # interlace
    if saved:  # interlace
        model.load_state_dict(saved["model"]), opt.load_state_dict(saved["opt"])  # interlace
        gen.set_state(saved["gen"])  # interlace

    def state():  # interlace
        return {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state()}

    for step in range(start, total):
        with job.stage("io"):  # interlace
            idx = torch.randint(0, len(x), (args.batch_size,), generator=gen)
            xb, yb = x[idx], y[idx]
        with job.stage("gpu"):  # interlace
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        job.step()  # interlace
        if (step + 1) % 500 == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        if job.should_stop():  # interlace
            sys.exit(job.stop(step + 1, state()))  # interlace
        if (step + 1) % args.checkpoint_every == 0:  # interlace
            job.save(step + 1, state())  # interlace
    acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"done: accuracy {acc:.3f}", flush=True)
    sys.exit(job.finish(total, state()))  # interlace


if __name__ == "__main__":
    main()
