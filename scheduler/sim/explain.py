"""`interlace-sim --explain`: why two policies' JCTs differ, in numbers any user can get on
their own trace.

A job's JCT is its wait (not holding GPUs: queued, or stopped), the time it needs alone,
the time it runs slower than alone (sharing GPUs in a group), and restart overheads. Per
job and by decile of the time alone, the two policies are set side by side in those
terms; and for an interleaving policy, how its groups were made: how often a group joined
a short job with a long one, and how many regroups, moves and stops each arrival caused.
"""
from __future__ import annotations

from collections import Counter
from statistics import mean, median

from scheduler.core.plan_changes import Change
from scheduler.core.state import Plan

#: a group "pairs a short job with a long one" when its members' remaining times differ this
#: many times or more
LONG_SHORT_RATIO = 10.0


class GroupLog:
    """Counts, round by round (the simulator's on_round hook), the groups a plan forms and
    the changes it makes. Never writes the core."""

    def __init__(self) -> None:
        self.formed = 0  # groups of two or more that a plan added
        self.long_short = 0  # of those, joining remaining times LONG_SHORT_RATIO apart
        self.changes: Counter = Counter()  # Change -> how many

    def __call__(self, now: float, plan: Plan, core) -> None:
        changes = plan.changes
        if changes is None:
            return
        for kind in changes.kinds.values():
            self.changes[kind] += 1
        jobs = core.jobs
        for group in changes.added:
            if len(group.jobs) < 2:
                continue
            self.formed += 1
            left = [jobs[j].remaining_time for j in group.jobs]
            if max(left) >= LONG_SHORT_RATIO * max(min(left), 1e-9):
                self.long_short += 1


def job_parts(o) -> tuple[float, float, float, float]:
    """(wait, alone, slower, restart) seconds of one finished job; slower is what running
    took beyond its time alone and its overheads. Neither is below 0: running time is summed
    interval by interval, and the sum may pass the JCT by a rounding error."""
    running = o.running if o.running is not None else o.jct
    overhead = min(o.overhead or 0.0, running)
    return (max(o.jct - running, 0.0), o.alone or 0.0,
            max(running - overhead - (o.alone or 0.0), 0.0), overhead)


def breakdown(a, b, logs: dict | None = None) -> list[str]:
    """Where the time goes under each of two results (SimResults), by decile of the time
    alone of the jobs both finished; then each interleaving run's groups and churn."""
    done_a = {o.job_id: o for o in a.outcomes if o.end is not None}
    done_b = {o.job_id: o for o in b.outcomes if o.end is not None}
    common = sorted(done_a.keys() & done_b.keys(),
                    key=lambda j: (done_a[j].alone or 0.0, j))
    if not common or done_a[common[0]].running is None:
        return []
    na, nb = a.policy, b.policy
    lines = [f"where the time goes (mean seconds per job; decile by the time a job needs "
             f"alone; wait as above):",
             f"  {'decile':>6} {'alone':>9} | {na[:8]:>8}: {'wait':>8} {'slower':>8} "
             f"{'restart':>7} | {nb[:8]:>8}: {'wait':>8} {'slower':>8} {'restart':>7} | "
             f"{'JCT ' + nb[:8] + '/' + na[:8]:>20}"]
    n = len(common)
    totals = {na: [0.0] * 4, nb: [0.0] * 4}
    for d in range(10):
        part = common[d * n // 10:(d + 1) * n // 10]
        if not part:
            continue
        pa = [job_parts(done_a[j]) for j in part]
        pb = [job_parts(done_b[j]) for j in part]
        ma = [mean(p[i] for p in pa) for i in range(4)]
        mb = [mean(p[i] for p in pb) for i in range(4)]
        for i in range(4):
            totals[na][i] += sum(p[i] for p in pa)
            totals[nb][i] += sum(p[i] for p in pb)
        jct_a = sum(done_a[j].jct for j in part)
        jct_b = sum(done_b[j].jct for j in part)
        lines.append(f"  {d + 1:>6} {ma[1]:>9,.0f} | {'':>8}  {ma[0]:>8,.0f} {ma[2]:>8,.0f} "
                     f"{ma[3]:>7,.0f} | {'':>8}  {mb[0]:>8,.0f} {mb[2]:>8,.0f} {mb[3]:>7,.0f} | "
                     f"{jct_b / jct_a if jct_a else float('nan'):>19.2f}x")
    for name in (na, nb):  # (waiting per job is said once, above)
        _, _, slower, restart = (v / n for v in totals[name])
        lines.append(f"  {name}: per job {slower:,.0f} s slower than alone, {restart:,.0f} s "
                     f"restarting")
    for result in (a, b):
        log = (logs or {}).get(result.policy)
        if log is None or not log.formed:
            continue
        arrivals = max(len(result.outcomes), 1)
        ch = log.changes
        lines.append(
            f"  {result.policy}: {log.formed:,} groups formed, "
            f"{log.long_short / log.formed:.0%} of them a short job with a long one "
            f"(remaining times {LONG_SHORT_RATIO:g}x apart); per arrival "
            f"{ch[Change.REGROUP] / arrivals:.1f} regroups, "
            f"{(ch[Change.MOVE] + ch[Change.RESTART]) / arrivals:.1f} moves or restarts, "
            f"{ch[Change.STOP] / arrivals:.1f} stops")
    return lines


def explain(a, b, records, logs: dict | None = None) -> list[str]:
    """Why two JCT CDFs can cross, in numbers: per job, which policy finishes it sooner; how
    long jobs run (holding GPUs) against their time alone (sharing GPUs stretches it) and how
    long they wait (not holding GPUs: queued, or stopped); the two add up to the JCT
    (`job_parts`). A policy can finish most jobs later and still win on the mean and the tail
    when what it loses per job is small and what it saves the long waiters is large. Then
    the breakdown of where the time goes (see `breakdown`)."""
    alone = {r.job_id: r.duration for r in records}
    done_a = {o.job_id: o for o in a.outcomes if o.end is not None}
    done_b = {o.job_id: o for o in b.outcomes if o.end is not None}
    common = sorted(done_a.keys() & done_b.keys())
    if not common:
        return [f"{a.policy} and {b.policy} have no finished job in common"]
    sooner_a = [j for j in common if done_a[j].jct < done_b[j].jct]
    sooner_b = [j for j in common if done_b[j].jct < done_a[j].jct]
    longest = sorted(common, key=lambda j: alone.get(j, 0.0))[-max(len(common) // 10, 1):]

    def stretch(done: dict) -> float:
        return median((done[j].jct - job_parts(done[j])[0]) / alone[j] for j in common
                      if alone.get(j, 0) > 0)

    def waiting(done: dict, jobs: list[int]) -> float:
        return mean(job_parts(done[j])[0] for j in jobs) / 3600

    def pct(jobs: list[int]) -> str:
        return f"{len(jobs) / len(common):.0%}"

    na, nb = a.policy, b.policy
    ties = len(common) - len(sooner_a) - len(sooner_b)
    return [
        f"{na} against {nb}, job by job ({len(common)} jobs finished under both):",
        f"  {na} finishes {pct(sooner_a)} of them sooner, {nb} {pct(sooner_b)}"
        + (f" ({ties} equal)" if ties else "")
        + f"; median JCT {a.summary.p50_jct / 3600:.2f} h against {b.summary.p50_jct / 3600:.2f} h",
        f"  running (holding GPUs, restarts included): a median {stretch(done_a):.2f}x the "
        f"job's time alone under {na}, {stretch(done_b):.2f}x under {nb}",
        f"  waiting (not holding GPUs: queued, or stopped): {waiting(done_a, common):.2f} h "
        f"per job under {na}, {waiting(done_b, common):.2f} h under {nb}; the longest tenth "
        f"of jobs {waiting(done_a, longest):.2f} h against {waiting(done_b, longest):.2f} h",
        f"  the jobs {nb} finishes sooner gain "
        f"{sum(done_a[j].jct - done_b[j].jct for j in sooner_b) / 3600:,.0f} job-hours, "
        f"those it finishes later lose "
        f"{sum(done_b[j].jct - done_a[j].jct for j in sooner_a) / 3600:,.0f}: "
        f"mean JCT {a.summary.avg_jct / 3600:.2f} h against {b.summary.avg_jct / 3600:.2f} h, "
        f"p99 {a.summary.p99_jct / 3600:.2f} h against {b.summary.p99_jct / 3600:.2f} h",
    ] + breakdown(a, b, logs)
