"""The sweep's report: PNGs drawn from runs.csv and the per-run detail files, never from new
runs. One figure set per (trace, preset): the JCT CDF per policy, GPU utilisation and jobs
waiting over time, and for each policy that forms groups (Muri) the group sizes and their
efficiency; one figure per preset: the average JCT of each policy with its spread over seeds.
A sweep over tenants files draws each of those per tenants file too, and per (trace, preset)
each tenant's average JCT and waiting under each file, policy by policy.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from statistics import mean

from scheduler.tools.sweep_runs import NONE, TENANTS
from scheduler.tools.sweep_store import Store

BINS = 200  # time bins of the over-time panels (a time-weighted mean per bin)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(parts))


def _label(trace: str) -> str:
    return Path(trace).stem if trace.endswith(".csv") else trace


def _tenancy(name: str | None) -> tuple[tuple[str, ...], str]:
    """A tenants file's part of a figure's file name, and of its title."""
    if name is None:
        return (), ""
    return (Path(name).stem,), (", one queue" if name == NONE else
                                f", tenants {Path(name).name}")


def write_report(store: Store) -> list[Path]:
    """Draw every figure for the rows in the store; the paths written."""
    rows = store.rows()
    if not rows:
        return []
    out = store.folder / "report"
    out.mkdir(exist_ok=True)
    plt = _plt()
    made = []
    by_case = defaultdict(list)  # (trace, preset, tenants file or None) -> rows
    for row in rows:
        by_case[(row["trace"], row["preset"], row.get(TENANTS))].append(row)
    spec = rows[0]["spec"]
    for (trace, preset, tenants), case in by_case.items():
        details = {}
        for row in case:
            detail = store.detail(tuple(row[k] for k in store.key))
            if detail is not None:
                details[(row["policy"], int(row["seed"]))] = detail
        slug, said = _tenancy(tenants)
        name = _slug(_label(trace), preset, *slug)
        where = f"trace {_label(trace)}, preset {preset}, spec {spec}{said}"
        made.append(_jct_cdf(plt, details, where, out / f"jct_cdf_{name}.png"))
        made.append(_timeline(plt, details, where, out / f"over_time_{name}.png"))
        for policy in dict.fromkeys(p for p, _ in details):
            runs = [d for (p, _), d in details.items() if p == policy]
            if any(g[0] > 1 for d in runs for g in d["groups"]):
                made.append(_groups(
                    plt, runs, f"{policy}, {where}",
                    out / f"groups_{_slug(_label(trace), preset, policy, *slug)}.png"))
    for preset, tenants in dict.fromkeys((r["preset"], r.get(TENANTS)) for r in rows):
        slug, said = _tenancy(tenants)
        made.append(_avg_jct(plt, [r for r in rows
                                   if r["preset"] == preset and r.get(TENANTS) == tenants],
                             f"preset {preset}, spec {spec}{said}",
                             out / f"avg_jct_{_slug(preset, *slug)}.png"))
    if store.tenants:
        by_trace = defaultdict(list)  # (trace, preset) -> rows of tenants.csv
        for row in store.tenant_rows():
            by_trace[(row["trace"], row["preset"])].append(row)
        for (trace, preset), case in by_trace.items():
            made.append(_per_tenant(plt, case, f"trace {_label(trace)}, preset {preset}, "
                                               f"spec {spec}",
                                    out / f"tenants_{_slug(_label(trace), preset)}.png"))
    return made


def _finish(plt, fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _jct_cdf(plt, details: dict, where: str, path: Path) -> Path:
    """JCTs of all seeds pooled per policy, log hours (JCTs are heavy-tailed)."""
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for policy in dict.fromkeys(p for p, _ in details):
        runs = [d for (p, _), d in details.items() if p == policy]
        jct = sorted(x / 3600 for d in runs for x in d["jct_s"])
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))],
                    label=f"{policy} ({len(runs)} seed{'s' * (len(runs) > 1)})")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs finished (CDF)")
    ax.set_ylim(0, 1.01)
    ax.set_title(f"JCT CDF, all seeds pooled\n{where}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=9, loc="lower right")
    return _finish(plt, fig, path)


def _binned(series, end: float, bins: int) -> tuple[list[float], list[float]]:
    """Time-weighted mean of a step series (t, value) in `bins` equal bins over [0, end]."""
    width = end / bins
    sums = [0.0] * bins
    points = list(series) + [(end, 0)]
    for (t0, v), (t1, _) in zip(points, points[1:]):
        t0, t1 = max(t0, 0.0), min(t1, end)
        if t1 <= t0:
            continue
        for b in range(min(int(t0 / width), bins - 1), min(int(t1 / width), bins - 1) + 1):
            sums[b] += v * max(min(t1, (b + 1) * width) - max(t0, b * width), 0.0)
    return [(b + 0.5) * width / 3600 for b in range(bins)], [s / width for s in sums]


def _timeline(plt, details: dict, where: str, path: Path) -> Path:
    """The lowest seed of each policy: busy GPUs (% of the cluster) and jobs waiting."""
    first = {}
    for (policy, seed), d in sorted(details.items(), key=lambda kv: kv[0][1]):
        first.setdefault(policy, (seed, d))
    end = max(_last_time(d) for _, d in first.values()) or 1.0
    bins = min(BINS, max(int(end // 60), 1))  # no bin under a minute
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, layout="constrained")
    for policy, (seed, d) in first.items():
        shown = sum(1 for b in range(bins) if b * end / bins < _last_time(d))  # to its own end
        x, util = _binned(d["utilisation"], end, bins)
        top.plot(x[:shown], [100 * u / d["total_gpus"] for u in util[:shown]], label=policy,
                 lw=1.3)
        x, waiting = _binned(d["queue"], end, bins)
        bottom.plot(x[:shown], waiting[:shown], label=policy, lw=1.3)
    seeds = sorted({s for s, _ in first.values()})
    top.set_ylabel("GPUs busy (% of cluster)")
    top.set_ylim(0, 105)
    bottom.set_ylabel("jobs waiting")
    bottom.set_xlabel("time since the first submission (hours)")
    step = end / bins
    step_text = f"{step / 3600:.1f} h" if step >= 5400 else f"{step / 60:.0f} min"
    fig.suptitle(f"Over time, seed {', '.join(map(str, seeds))}, mean per {step_text}\n{where}",
                 fontsize=10)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=9, ncol=min(len(first), 5), loc="lower center",
               bbox_to_anchor=(0.5, 1.0), frameon=False)
    return _finish(plt, fig, path)


def _last_time(detail: dict) -> float:
    times = [t for t, _ in detail["utilisation"]] + [t for t, _ in detail["queue"]]
    return max(times, default=0.0)


def _groups(plt, runs: list[dict], where: str, path: Path) -> Path:
    """How much busy GPU-time ran in groups of 1..k jobs, and how efficient the shared groups
    were (sum of members' stage times / (group iteration time x slots)), GPU-time weighted."""
    share = defaultdict(float)
    eff = defaultdict(list)  # size -> [(efficiency, GPU-hours)]
    for d in runs:
        for size, gpus, e, seconds in d["groups"]:
            share[size] += gpus * seconds / 3600
            if size > 1:
                eff[size].append((e, gpus * seconds / 3600))
    total = sum(share.values()) or 1.0
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    sizes = sorted(share)
    bars = left.bar([str(s) for s in sizes], [100 * share[s] / total for s in sizes],
                    color="tab:blue")
    left.bar_label(bars, fmt="%.0f%%", fontsize=9)
    left.set_xlabel("jobs sharing the GPUs (group size)")
    left.set_ylabel("share of busy GPU-time (%)")
    left.set_ylim(0, 110)
    edges = [i / 20 for i in range(21)]
    for size in sorted(eff):
        values, weights = zip(*eff[size])
        right.hist(values, bins=edges, weights=weights, histtype="step", lw=1.6,
                   label=f"{size} jobs")
    right.set_xlabel("group efficiency (busy resource-time / (TT x slots))")
    right.set_ylabel("GPU-hours")
    right.set_xlim(0, 1)
    if eff:
        right.legend(fontsize=9, loc="upper right")  # efficiencies near 1 are rare
    fig.suptitle(f"Groups, {len(runs)} seed{'s' * (len(runs) > 1)} pooled: {where}", fontsize=10)
    return _finish(plt, fig, path)


def _avg_jct(plt, rows: list[dict], where: str, path: Path) -> Path:
    """Per trace, each policy's average JCT: bar = mean over seeds, whiskers = min to max,
    dots = the seeds."""
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    fig, axes = plt.subplots(1, len(traces), figsize=(max(4.5 * len(traces), 7), 4.8),
                             squeeze=False, layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, trace in zip(axes[0], traces):
        for i, policy in enumerate(policies):
            values = [float(r["avg_jct_s"]) / 3600 for r in rows
                      if r["trace"] == trace and r["policy"] == policy]
            if not values:
                continue
            m = mean(values)
            ax.bar(i, m, color=colours[i % len(colours)], alpha=0.75,
                   yerr=[[m - min(values)], [max(values) - m]], capsize=5)
            ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
        ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right")
        ax.set_title(f"trace {_label(trace)}", fontsize=10)
        ax.set_ylabel("average JCT (hours)")
        ax.grid(alpha=0.3, axis="y")
    seeds = len({r["seed"] for r in rows})
    fig.suptitle(f"Average JCT over {seeds} seed{'s' * (seeds > 1)}, {where}\n"
                 "bar = mean, whiskers = min to max, dots = each seed", fontsize=10)
    return _finish(plt, fig, path)


def _per_tenant(plt, rows: list[dict], where: str, path: Path) -> Path:
    """Per policy (a column of panels), each tenant's average JCT (top) and waiting to first
    start (bottom) under each tenants file side by side: bar = mean over seeds, whiskers =
    min to max. What quotas change for whom, at a glance."""
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    files = list(dict.fromkeys(r[TENANTS] for r in rows))
    names = list(dict.fromkeys(r["tenant"] for r in rows))
    fig, axes = plt.subplots(2, len(policies), figsize=(max(4.2 * len(policies), 7), 6.4),
                             squeeze=False, sharey="row", layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(files)
    spread: list[float] = []  # the JCT bars' heights, to pick the scale
    for column, policy in enumerate(policies):
        for ax, field, label in ((axes[0][column], "avg_jct_s", "average JCT (hours)"),
                                 (axes[1][column], "avg_queueing_s", "average waiting (hours)")):
            for k, tenants in enumerate(files):
                for i, name in enumerate(names):
                    values = [float(r[field]) / 3600 for r in rows if r[field] is not None
                              and (r["policy"], r[TENANTS], r["tenant"]) == (policy, tenants,
                                                                            name)]
                    if not values:
                        continue
                    m = mean(values)
                    if field == "avg_jct_s" and m > 0:
                        spread.append(m)
                    ax.bar(i + (k - (len(files) - 1) / 2) * width, m, width,
                           color=colours[k % len(colours)], alpha=0.8,
                           yerr=[[m - min(values)], [max(values) - m]], capsize=3)
            # many tenants (real teams) need their names slanted to stay legible
            ax.set_xticks(range(len(names)), [n or "(none named)" for n in names],
                          rotation=45 if len(names) > 4 else 0,
                          ha="right" if len(names) > 4 else "center")
            ax.grid(alpha=0.3, axis="y")
            if column == 0:
                ax.set_ylabel(label)
        axes[0][column].set_title(policy, fontsize=10)
    if spread and max(spread) > 30 * min(spread):  # a few long teams would flatten the rest
        axes[0][0].set_yscale("log")
        axes[0][0].set_ylabel("average JCT (hours, log scale)")
    from matplotlib.patches import Patch

    axes[0][0].legend(handles=[Patch(color=colours[k % len(colours)], alpha=0.8,
                                     label="one queue" if t == NONE else f"quotas of {Path(t).name}")
                               for k, t in enumerate(files)], fontsize=8, loc="upper left")
    seeds = len({r["seed"] for r in rows})
    fig.suptitle(f"Each tenant's jobs, with and without quotas ({seeds} seed"
                 f"{'s' * (seeds > 1)}): {where}\nbar = mean over seeds, whiskers = min to max",
                 fontsize=10)
    return _finish(plt, fig, path)
