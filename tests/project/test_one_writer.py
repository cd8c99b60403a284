"""The core has one writer, the driver loop: read from the source with `ast` (nothing is
imported), no module outside the core and scheduler/loop.py calls a method of the core that
changes it, nor assigns to one of its attributes. The live side's threads hand the loop
events (scheduler/events.py) instead, and read the view the loop leaves after each round.

MUTATORS and QUERIES sort the core's public methods by hand, in this one place: a method
added to `Core` fails `test_every_method_of_the_core_is_sorted` until it is sorted, so a new
mutator cannot slip past the check.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from scheduler.core.engine import Core

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "node_agent", "scheduler", "specs", "traces", "trainer", "workloads")
# Where the core may be written: itself, and the loop that drives it.
WRITERS = ("scheduler/core/", "scheduler/loop.py")

MUTATORS = frozenset({
    "submit", "finish", "stop", "advance", "round", "update_profile", "set_restart_overhead",
    "note_gpu_memory", "run_alone", "calibrate_slowdown", "calibrate_speed", "note_stop_time",
    "set_node_online", "set_remaining", "hold",
})
QUERIES = frozenset({
    "submit_problem", "cpu_problem", "outgrows_group", "judged", "running_jobs",
    "held_until",
})


def _core_names(node: ast.AST) -> bool:
    """Whether an expression names the core: `core`, `x.core`, `self.state.core`..."""
    return (isinstance(node, ast.Name) and node.id == "core") or (
        isinstance(node, ast.Attribute) and node.attr == "core")


def writes_of(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for each call of a core mutator, and each assignment to an attribute of
    the core, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and _core_names(node.func.value):
            found.append((node.lineno, f"core.{node.func.attr}()"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and _core_names(target.value):
                    found.append((node.lineno, f"core.{target.attr} ="))
    return sorted(found)


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if ".venv" not in p.parts)


def test_every_method_of_the_core_is_sorted():
    public = {name for name, _ in inspect.getmembers(Core, inspect.isfunction)
              if not name.startswith("_")}
    assert sorted(public - MUTATORS - QUERIES) == []
    assert sorted((MUTATORS | QUERIES) - public) == []  # a stale name would check nothing


def test_only_the_loop_writes_the_core():
    bad = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(WRITERS):
            continue
        bad += [f"{rel}:{line}: {what}"
                for line, what in writes_of(path.read_text(encoding="utf-8"), rel)]
    assert bad == []


def test_the_check_sees_a_write_from_a_live_module():
    """What the check above would miss if it could not see these."""
    source = ("def requeue(state, job_id, now):\n"
              "    state.core.stop(job_id, now)\n"
              "    s = state\n"
              "    s.core.set_remaining(job_id, 3)\n"
              "    state.core.model = None\n"
              "    core.finish(job_id, now)\n"
              "    state.core.running_jobs()\n")  # a query: not a write
    assert writes_of(source) == [(2, "core.stop()"), (4, "core.set_remaining()"),
                                 (5, "core.model ="), (6, "core.finish()")]


def test_the_loop_takes_no_lock():
    """Nothing shares the core with the loop, so the backend contract has no lock."""
    from scheduler import loop

    assert not hasattr(loop.Backend, "lock")
    assert "lock" not in ast.dump(ast.parse(inspect.getsource(loop.Loop)))
