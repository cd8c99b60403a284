"""How a public trace job, which names no model, becomes a Muri job with a model's profile.

Public logs give only GPUs and run time; interleaving needs per-stage times, so each job is
given a model from the catalogue (traces/models.py) by a seeded rule, and its iterations are
its run time divided by that model's iteration time. The choice depends only on the seed, the
job's own id and its size, never on the rows around it, so a window or a limit of the same
log gives every job the model it has in the full import.

Rules (`--models`):
  gputime       (default) by GPU-hours (run time x GPUs), as Pollux sizes its jobs: under 1
                GPU-hour a2c/dqn/shufflenet_v2_x1_0, 1-10 resnet18/vgg16, 10-100 vgg19/bert,
                100 and more gpt2/bert; uniform within a bucket
  mix:A=W,B=W   each job draws a model with these weights (any positive numbers)
  workload      PAI's workload label when it names a catalogue family (bert, gpt, resnet,
                vgg, ...), else as gputime
  log           the model the log names, by family (gavel: its job type; the summary
                states the mapping), else as gputime; gavel's default
  NAME          every job runs this catalogue model
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from typing import Mapping

from traces.generate import NET_SCALE
from traces.models import MODELS, ModelProfile
from traces.record import JobRecord

GPU_HOUR_BUCKETS = (1.0, 10.0, 100.0)  # upper bounds (GPU-hours) of all but the last bucket
BUCKET_MODELS = (
    ("a2c", "dqn", "shufflenet_v2_x1_0"),
    ("resnet18", "vgg16"),
    ("vgg19", "bert"),
    ("gpt2", "bert"),
)
# substrings of a workload label -> catalogue model (first match wins)
WORKLOAD_FAMILIES = (
    ("bert", "bert"), ("gpt", "gpt2"), ("xlnet", "bert"), ("nmt", "bert"),
    ("resnet", "resnet18"), ("shufflenet", "shufflenet_v2_x1_0"), ("vgg", "vgg16"),
    ("inception", "resnet18"), ("ctr", "dqn"), ("rl", "a2c"),
)


class ModelRuleError(ValueError):
    """A --models text that names no rule, or an unknown model."""


@dataclass(frozen=True)
class ModelRule:
    kind: str  # "gputime" | "mix" | "workload" | "log" | "single"
    names: tuple[str, ...] = ()
    cumulative: tuple[float, ...] = ()  # for mix: running sums of the normalised weights

    def describe(self) -> str:
        if self.kind == "mix":
            shares = [b - a for a, b in zip((0.0, *self.cumulative), self.cumulative)]
            return "mix:" + ",".join(f"{n}={w:.3g}" for n, w in zip(self.names, shares))
        return self.names[0] if self.kind == "single" else self.kind


def parse_model_rule(text: str, catalogue: Mapping[str, ModelProfile] = MODELS) -> ModelRule:
    text = text.strip()
    known = ", ".join(catalogue)
    if text in ("gputime", "workload", "log"):
        return ModelRule(text)
    if text.startswith("mix:"):
        names, weights = [], []
        for part in text[4:].split(","):
            name, eq, weight = part.partition("=")
            name = name.strip()
            if name not in catalogue:
                raise ModelRuleError(f"--models: unknown model {name!r} (known: {known})")
            try:
                value = float(weight) if eq else -1.0
            except ValueError:
                value = -1.0
            if not 0 < value < float("inf"):
                raise ModelRuleError(f"--models: {part.strip()!r} needs a positive weight")
            names.append(name)
            weights.append(value)
        total, running, cumulative = sum(weights), 0.0, []
        for w in weights:
            running += w / total
            cumulative.append(running)
        cumulative[-1] = 1.0
        return ModelRule("mix", tuple(names), tuple(cumulative))
    if text in catalogue:
        return ModelRule("single", (text,))
    raise ModelRuleError(
        f"--models: expected gputime, workload, log, mix:NAME=W,... or a model ({known}); "
        f"got {text!r}"
    )


def uniform(seed: int, key: str) -> float:
    """A number in [0, 1) fixed by the seed and the job's id alone."""
    digest = hashlib.blake2b(f"{seed}\0{key}".encode("utf-8", "surrogatepass"),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def choose_model(rule: ModelRule, seed: int, key: str, gpus: int, duration: float,
                 workload: str = "", named: str = "") -> str:
    """`named`: the catalogue model the log's own model maps to ("": the log names none)."""
    if rule.kind == "log" and named:
        return named
    u = uniform(seed, key)
    if rule.kind == "single":
        return rule.names[0]
    if rule.kind == "mix":
        return rule.names[min(bisect.bisect_right(rule.cumulative, u), len(rule.names) - 1)]
    if rule.kind == "workload":
        label = workload.lower()
        for family, model in WORKLOAD_FAMILIES:
            if family in label:
                return model
    bucket = BUCKET_MODELS[bisect.bisect_right(GPU_HOUR_BUCKETS, duration * gpus / 3600.0)]
    return bucket[int(u * len(bucket))]


def net_scale(gpus: int) -> float:
    """All-reduce time relative to the catalogue's 8-GPU value, for any GPU count: the
    generator's table at the next listed size up (its largest beyond it)."""
    for size in sorted(NET_SCALE):
        if gpus <= size:
            return NET_SCALE[size]
    return NET_SCALE[max(NET_SCALE)]


def make_record(job_id: int, gpus: int, submit: float, interval: float, duration: float,
                model: str, priority: int = 0,
                catalogue: Mapping[str, ModelProfile] = MODELS, *,
                gpu_types: tuple[str, ...] = (), gpu_mem_gb: float = 0.0) -> JobRecord:
    """The Muri job: the model's stages (net scaled to the GPU count), at least one
    iteration, and the run time those iterations take (within half an iteration of the log's)."""
    profile = catalogue[model]
    data, gpu, net = profile.stage_times[:3]
    stages = (round(data, 4), round(gpu, 4), round(net * net_scale(gpus), 4))
    ratio = profile.iteration_time / sum(profile.stage_times)
    iteration_ms = max(1, round(sum(stages) * 1000 * ratio))
    iterations = max(1, round(duration * 1000 / iteration_ms))
    return JobRecord(
        job_id=job_id,
        num_gpu=gpus,
        submit_time=submit,
        iterations=iterations,
        model_name=model,
        batch_size=profile.batch_size,
        duration=iterations * iteration_ms / 1000,
        interval=interval,
        iteration_time=iteration_ms / 1000,
        stage_times=stages,
        priority=priority,
        gpu_mem_gb=gpu_mem_gb,
        gpu_types=gpu_types,
    )
