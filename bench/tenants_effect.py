"""What quotas change for each team: the same jobs with and without a tenants file.

Run from the repository root:
    python bench/tenants_effect.py [--trace CSV --tenants FILE.toml] [--gpus N]
        [--policies srsf,muri-s] [--plot FILE.png] [--json]

Without --trace, a built-in case on 32 GPUs (nodes of 8): `research` submits a backlog of
long jobs at time 0 (generated, seed 11); `prod` submits shorter jobs over the next days
(generated, seed 12, Poisson arrivals). The tenants file owes each 16 GPUs; research may
borrow 16 and prod none. With --trace, any trace with a tenant column (an imported Philly or
Helios log) and its tenants file.

For each policy, each tenant's jobs' average JCT and waiting (to first start), run once
with one queue for all and once with the tenants file; and, with the tenants file, the GPUs
each tenant held over time against its quota. --plot draws both.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs.spec import ClusterSpec  # noqa: E402
from specs.tenants import Tenancy, Tenant, load_tenants  # noqa: E402
from traces import read_trace  # noqa: E402
from traces.generate import generate  # noqa: E402

BUILT_IN = Tenancy({"research": Tenant("research", 16, 16), "prod": Tenant("prod", 16, 0)})


def built_in_case() -> list:
    """research's backlog at 0 and prod's arrivals, numbered in submit order."""
    backlog = [replace(r, tenant="research")
               for r in generate(60, seed=11, max_gpus=8, backlog=True,
                                 median_duration=8 * 3600.0, min_duration=3600.0)]
    arrivals = [replace(r, tenant="prod")
                for r in generate(80, seed=12, max_gpus=8, mean_interarrival=1800.0,
                                  median_duration=1800.0, max_duration=6 * 3600.0)]
    jobs = sorted(backlog + arrivals, key=lambda r: r.submit_time)
    return [replace(r, job_id=i) for i, r in enumerate(jobs)]


def per_tenant(result, records) -> dict[str, dict]:
    """Each tenant's jobs' average JCT and waiting, hours, from the run's outcomes."""
    tenant = {r.job_id: r.tenant for r in records}
    out: dict[str, dict] = {}
    for o in result.outcomes:
        row = out.setdefault(tenant[o.job_id], {"jobs": 0, "jct": 0.0, "wait": 0.0})
        row["jobs"] += 1
        row["jct"] += o.jct / 3600
        row["wait"] += o.queueing / 3600
    return {name: {"jobs": r["jobs"], "avg_jct_h": r["jct"] / r["jobs"],
                   "avg_wait_h": r["wait"] / r["jobs"]} for name, r in sorted(out.items())}


def run(records, tenancy, gpus: int, policies: list[str]) -> dict:
    spec = ClusterSpec(1, gpus // 8, 8, 92, 520)
    preset = get_preset("default")
    out = {}
    for policy in policies:
        alone = simulate(records, spec, policy, preset)
        shared = simulate(records, spec, policy, preset, tenancy=tenancy)
        out[policy] = {"one_queue": per_tenant(alone, records),
                       "tenants": per_tenant(shared, records),
                       "held": shared.tenant_rows,
                       "fairness": shared.tenants["fairness"]}
    return out


def plot(found: dict, tenancy, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(found)
    names = sorted(tenancy.tenants)
    fig, axes = plt.subplots(1, 1 + len(policies), figsize=(4.5 * (1 + len(policies)), 3.8))
    ax = axes[0]
    width = 0.8 / (2 * len(policies))
    for k, policy in enumerate(policies):
        for m, mode in enumerate(("one_queue", "tenants")):
            xs = [i + (2 * k + m) * width for i in range(len(names))]
            ys = [found[policy][mode].get(n, {}).get("avg_jct_h", 0.0) for n in names]
            ax.bar(xs, ys, width, label=f"{policy}, {'one queue' if m == 0 else 'quotas'}",
                   hatch="" if m == 0 else "//")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
    ax.set_ylabel("average JCT (hours)")
    ax.legend(fontsize=7)
    for ax, policy in zip(axes[1:], policies):
        series: dict[str, list] = {n: [] for n in names}
        for t, name, gpus in found[policy]["held"]:
            series[name].append((t / 3600, gpus))
        for name in names:
            if series[name]:
                xs, ys = zip(*series[name])
                ax.step(xs, ys, where="post", label=f"{name} held")
                ax.axhline(tenancy.tenants[name].quota, linestyle=":", linewidth=1,
                           color=ax.lines[-1].get_color())
        ax.set_title(f"{policy} with quotas (dotted)", fontsize=9)
        ax.set_xlabel("hours")
        ax.set_ylabel("GPUs held")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", help="a trace with a tenant column (else the built-in case)")
    p.add_argument("--tenants", help="its tenants file (with --trace)")
    p.add_argument("--gpus", type=int, default=32, help="GPUs, as nodes of 8 (default 32)")
    p.add_argument("--policies", default="srsf,muri-s")
    p.add_argument("--plot", type=Path)
    p.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = p.parse_args()
    if (args.trace is None) != (args.tenants is None):
        p.error("--trace and --tenants go together")
    if args.trace:
        records, tenancy = read_trace(args.trace), load_tenants(args.tenants)
        title = f"{Path(args.trace).name} with {Path(args.tenants).name}, {args.gpus} GPUs"
    else:
        records, tenancy = built_in_case(), BUILT_IN
        title = (f"research's backlog and prod's arrivals, {args.gpus} GPUs; quotas 16 each, "
                 f"research may borrow 16")
    found = run(records, tenancy, args.gpus, args.policies.split(","))
    if args.json:
        print(json.dumps({p: {k: v for k, v in r.items() if k != "held"}
                          for p, r in found.items()}, indent=1))
    else:
        for policy, r in found.items():
            for name in sorted(r["tenants"]):
                a, b = r["one_queue"][name], r["tenants"][name]
                print(f"{policy:8} {name:10} jobs {a['jobs']:4}  JCT {a['avg_jct_h']:7.2f} h "
                      f"-> {b['avg_jct_h']:7.2f} h   waiting {a['avg_wait_h']:7.2f} h -> "
                      f"{b['avg_wait_h']:7.2f} h")
            print(f"{policy:8} fairness with quotas {r['fairness']:.3f}")
    if args.plot:
        plot(found, tenancy, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
