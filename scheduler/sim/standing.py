"""Where one policy stands against the others of a run, from `interlace-sim --out`'s
summaries: for each measure, lower or higher than each other policy and by how much, so a
demo's closing words claim only what the run shows, and against which policy.

    python -m scheduler.sim.standing OUT_DIR POLICY
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

MEASURES = (("avg_jct", "mean JCT"), ("p50_jct", "median JCT"), ("p99_jct", "p99 JCT"),
            ("makespan", "makespan"))


def standing(subject: dict, others: list[dict]) -> list[str]:
    """One line per measure (summaries as `--out` writes them: seconds), e.g.
    `mean JCT: 10.8 h under muri-s; 1% lower than srsf (10.9 h), 3% higher than tiresias
    (10.5 h)`; then which measures are lower than under every other policy."""
    name = subject["policy"]
    lines, best = [], []
    for key, label in MEASURES:
        mine = subject[key]
        against = []
        for other in others:
            theirs = other[key]
            if mine == theirs:
                against.append(f"equal to {other['policy']}'s")
                continue
            way = "lower" if mine < theirs else "higher"
            share = abs(mine - theirs) / theirs if theirs else float("inf")
            against.append(f"{share:.0%} {way} than {other['policy']}'s ({theirs / 3600:.4g} h)")
        if others and all(mine < other[key] for other in others):
            best.append(label)
        lines.append(f"  {label}: {mine / 3600:.4g} h under {name}; " + ", ".join(against))
    lines.append(f"  lower under {name} than under every other policy: "
                 + (", ".join(best) if best else "none of these"))
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m scheduler.sim.standing OUT_DIR POLICY", file=sys.stderr)
        return 2
    out, name = Path(argv[0]), argv[1]
    try:
        summaries = {s["policy"]: s for s in (json.loads(p.read_text())
                                              for p in sorted(out.glob("*-summary.json")))}
    except (OSError, ValueError, KeyError) as err:
        print(f"scheduler.sim.standing: {out}: cannot read the summaries ({err})",
              file=sys.stderr)
        return 1
    if name not in summaries:
        print(f"scheduler.sim.standing: {out}: no summary of {name!r} "
              f"(found: {', '.join(summaries) or 'none'})", file=sys.stderr)
        return 1
    others = [s for p, s in summaries.items() if p != name]
    print("\n".join(standing(summaries[name], others)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
