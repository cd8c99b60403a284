"""Mutation testing with cosmic-ray: does some test fail when the code is made subtly wrong?

    python bench/mutants.py scheduler/core/waiting.py              # every mutant of a module
    python bench/mutants.py --changed main                         # what a change touched
    python bench/mutants.py --sample 300 --budget 2400             # a random sample, seed printed

Targets are files or folders (by default the issue's areas: scheduler/core, scheduler/live,
scheduler/sim, trainer, node_agent, traces/importers). Each module is tested by its own
selection: the test files outside e2e/ that import it by name (`--tests` replaces that), under
the `ci` hypothesis profile, `-x`, slow tests left out. A mutant is killed when that command
fails or runs past its timeout (3x the module's clean run, at least 30 s), and survives when
it passes. Prints each module's score and every survivor's diff; `--json FILE` keeps them.

Why cosmic-ray rather than mutmut: it mutates one file on disk and runs any command, so each
module gets a plain pytest command of its own and nothing about imports changes (mutmut 3 runs
the tests from a copied tree of trampolined functions, after a stats pass over the whole
selection). The run works in a copy of the checkout's tracked files, so an interrupted run
never leaves a mutant behind.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AREAS = ("scheduler/core", "scheduler/live", "scheduler/sim", "trainer", "node_agent",
         "traces/importers")
MIN_TIMEOUT_S = 30.0


def modules(targets: list[str], changed: str | None) -> list[str]:
    """The .py files (relative paths) under `targets`, or of them those changed since
    `changed`; no __init__.py."""
    found = []
    for target in targets:
        path = ROOT / target
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    rel = sorted({str(p.relative_to(ROOT)) for p in found if p.name != "__init__.py"})
    if changed is not None:
        diff = subprocess.run(["git", "diff", "--name-only", changed, "--"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout.split()
        rel = [m for m in rel if m in diff]
    return rel


# where a module's own tests live, for a module no test file names
LAYERS = {"scheduler/core": "tests/core", "scheduler/live": "tests/live",
          "scheduler/sim": "tests/sim", "trainer": "tests/trainer", "node_agent": "tests/agent",
          "traces": "tests/traces"}


def tests_for(module: str) -> list[str]:
    """The test files outside e2e/ that import `module` by its dotted name or carry its name
    (test_NAME*.py); where none does, its layer's folder."""
    dotted = module.removesuffix(".py").replace("/", ".")
    package, _, name = dotted.rpartition(".")
    pattern = re.compile(rf"(import {re.escape(dotted)}\b|from {re.escape(dotted)} import"
                         rf"|from {re.escape(package)} import [^\n]*\b{re.escape(name)}\b)")
    layer = [folder for prefix, folder in LAYERS.items() if module.startswith(prefix)][:1]
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if "e2e" not in p.parts and (pattern.search(p.read_text()) or (
                       p.stem.startswith(f"test_{name}") and str(p.parent.relative_to(ROOT))
                       in layer)))
    return found or layer


def command(tests: list[str]) -> str:
    return shlex.join([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                       "-m", "not slow", *tests])


def mutation_specs(module_paths: list[Path]) -> list:
    """Every mutation cosmic-ray's argument-free operators make in these files."""
    from cosmic_ray.commands.init import init
    from cosmic_ray.work_db import WorkDB, use_db
    with tempfile.TemporaryDirectory() as tmp, use_db(Path(tmp) / "s.sqlite",
                                                      WorkDB.Mode.create) as db:
        init([str(p) for p in module_paths], db, {})
        return [m for item in db.work_items for m in item.mutations]


def copy_checkout(dest: Path) -> None:
    """The tracked files, and this checkout's uncommitted edits to them, into `dest`."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def run_tests(cmd: str, cwd: Path, timeout: float) -> tuple[str, float]:
    """'killed' (failed, or past `timeout`) or 'survived', and the seconds it took."""
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=str(cwd))  # the copy's code first, in child processes too
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    start = time.monotonic()
    try:
        done = subprocess.run(shlex.split(cmd), cwd=cwd, env=env, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start
    return ("survived" if done.returncode == 0 else "killed"), time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", default=list(AREAS))
    ap.add_argument("--changed", metavar="REV", help="only the modules changed since REV")
    ap.add_argument("--sample", type=int, help="this many mutants, drawn at random")
    ap.add_argument("--seed", type=int, help="the sample's seed (fresh and printed if absent)")
    ap.add_argument("--budget", type=float, default=float("inf"),
                    help="start no mutant after this many seconds")
    ap.add_argument("--tests", nargs="+", help="these test files for every module")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    from cosmic_ray.mutating import use_mutation
    from cosmic_ray.plugins import get_operator

    mods = modules(args.targets, args.changed)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"mutants: {len(mods)} modules; seed {seed}", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="interlace-mutants-") as tmp:
        work = Path(tmp)
        copy_checkout(work)
        specs = mutation_specs([work / m for m in mods])
        print(f"mutants: {len(specs)} in all", flush=True)
        if args.sample is not None and args.sample < len(specs):
            specs = random.Random(seed).sample(specs, args.sample)
        by_module: dict[str, list] = defaultdict(list)
        for spec in specs:
            by_module[str(Path(spec.module_path).relative_to(work))].append(spec)
        results, counts = [], defaultdict(Counter)
        order = sorted(by_module)
        random.Random(seed).shuffle(order)  # a budget cut leaves out modules at random
        for module in order:
            if time.monotonic() - started > args.budget:
                counts[module]["not_run"] += len(by_module[module])
                continue
            tests = args.tests or tests_for(module)
            if not tests:
                print(f"{module}: no test file imports it; {len(by_module[module])} mutants "
                      f"not run", flush=True)
                counts[module]["untested"] += len(by_module[module])
                continue
            cmd = command(tests)
            clean, took = run_tests(cmd, work, 3600)
            if clean != "survived":
                print(f"{module}: its tests fail unmutated ({cmd}); skipped", flush=True)
                counts[module]["baseline_failed"] += len(by_module[module])
                continue
            timeout = max(MIN_TIMEOUT_S, 3 * took)
            for spec in by_module[module]:
                if time.monotonic() - started > args.budget:
                    counts[module]["not_run"] += 1
                    continue
                operator = get_operator(spec.operator_name)(**(spec.operator_args or {}))
                with use_mutation(Path(spec.module_path), operator, spec.occurrence) as (
                        before, after):
                    if after is None:
                        continue
                    outcome, secs = run_tests(cmd, work, timeout)
                counts[module][outcome] += 1
                line = spec.start_pos[0]
                diff = _diff(before, after)
                results.append({"module": module, "line": line, "operator": spec.operator_name,
                                "occurrence": spec.occurrence, "outcome": outcome,
                                "seconds": round(secs, 1), "diff": diff, "tests": tests})
                print(f"{outcome:8} {module}:{line} {spec.operator_name} {secs:.0f} s",
                      flush=True)
                if outcome == "survived":
                    print(diff, flush=True)
    print(report(counts))
    print(f"mutants: seed {seed}; {time.monotonic() - started:.0f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": seed, "targets": args.targets,
                                               "sample": args.sample, "results": results},
                                              indent=1))
    return 0


def _diff(before: str, after: str) -> str:
    import difflib
    return "".join(line for line in difflib.unified_diff(
        before.splitlines(True), after.splitlines(True), n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def report(counts: dict[str, Counter]) -> str:
    """A row per module: killed (timeouts among them), survived, score."""
    rows = [f"{'module':40} {'killed':>6} {'timeout':>7} {'survived':>8} {'score':>6}"]
    total = Counter()
    for module, c in sorted(counts.items()):
        total.update(c)
        rows.append(_row(module, c))
    rows.append(_row("all", total))
    return "\n".join(rows)


def _row(name: str, c: Counter) -> str:
    killed = c["killed"] + c["timeout"]
    ran = killed + c["survived"]
    score = f"{killed / ran:.0%}" if ran else "-"
    extra = ", ".join(f"{k} {v}" for k, v in sorted(c.items())
                      if k not in ("killed", "timeout", "survived"))
    return (f"{name:40} {killed:>6} {c['timeout']:>7} {c['survived']:>8} {score:>6}"
            + (f"  ({extra})" if extra else ""))


if __name__ == "__main__":
    sys.exit(main())
