"""The import graph the design promises, read from the source with `ast` (nothing is imported):
the scheduling core knows nothing of the drivers or of the processes around it, and no
package imports in a circle, nor does any module. An import inside a function counts as much
as one at the top: it is still a dependency, only a later one. So does one in an
`if __name__ == "__main__":` block: a program whose main block imports a module that imports
the program's own module runs that module twice (once as __main__, once by its name).

CORE lists the core by module name, in this one place (the package scheduler.core).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "node_agent", "scheduler", "specs", "traces", "trainer", "workloads")

# The scheduling core: pure, shared by the simulator and the live driver.
CORE = frozenset({
    "scheduler.core.engine", "scheduler.core.state", "scheduler.core.interleave", "scheduler.core.matching",
    "scheduler.core.blossom", "scheduler.core.placement", "scheduler.core.policies", "scheduler.core.model",
    "scheduler.core.profiles", "scheduler.core.plan_changes", "scheduler.core.metrics",
    "scheduler.core",
})
# What the core must never import: the drivers, the tools and the processes around it.
NOT_FROM_CORE = ("scheduler.live", "scheduler.tools", "scheduler.sim.simulator", "scheduler.sim.cli",
                 "broker", "node_agent", "trainer")
# What the core may import of the trace package: the record it plans with. Reading files, and
# the artifact's millisecond arithmetic on them, are the drivers' (scheduler/sim/artifact.py).
CORE_FROM_TRACES = frozenset({"traces.record"})
# Known edges from the core outward, each with its way out; the test below fails when one is
# gone, so this list only shrinks.
KNOWN: set[tuple[str, str]] = set()
# Units of the package-cycle check: top-level packages, except that the scheduler's driver
# and tool subpackages count apart from the core they drive (scheduler.live -> scheduler is
# the design; scheduler -> scheduler.live would be the cycle).
SUBPACKAGES = ("scheduler.live", "scheduler.tools", "scheduler.sim")
# Packages whose modules must not import each other in a circle either: all of them.
NO_MODULE_CYCLES = PACKAGES


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports (absolute names; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import mod`
    return found


def source_modules() -> dict[str, set[str]]:
    """module name -> the project modules it imports."""
    graph = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            graph[module_name(path)] = imports_of(path)
    known = set(graph)
    return {mod: {i for i in deps if i in known} for mod, deps in graph.items()}


def is_core(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CORE)


def unit_of(module: str) -> str:
    for sub in SUBPACKAGES:
        if module == sub or module.startswith(sub + "."):
            return sub
    return module.split(".")[0]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph, as a path that returns to its start; None if none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        for dep in deps:
            a, b = unit_of(mod), unit_of(dep)
            if a != b:
                edges.setdefault(a, set()).add(b)
    return edges


def module_edges(graph: dict[str, set[str]], packages: tuple[str, ...]) -> dict[str, set[str]]:
    def inside(mod: str) -> bool:
        return any(mod == p or mod.startswith(p + ".") for p in packages)

    # a package's __init__ is imported with any of its modules; only its own imports count
    return {mod: {d for d in deps if inside(d) and d != mod} for mod, deps in graph.items()
            if inside(mod)}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return source_modules()


def test_every_core_module_exists(graph):
    """A CORE entry that names nothing would make the next test pass vacuously."""
    assert sorted(c for c in CORE if c not in graph) == []


def test_core_imports_no_driver_and_no_process(graph):
    bad = sorted((mod, dep) for mod, deps in graph.items() if is_core(mod) for dep in deps
                 if any(dep == n or dep.startswith(n + ".") for n in NOT_FROM_CORE))
    assert sorted(set(bad) - KNOWN) == []
    assert sorted(KNOWN - set(bad)) == []  # fixed: drop it from KNOWN


def core_trace_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(core module, traces module) for each import of the trace package beyond the record."""
    return sorted((mod, dep) for mod, deps in graph.items() if is_core(mod) for dep in deps
                  if (dep == "traces" or dep.startswith("traces."))
                  and dep not in CORE_FROM_TRACES)


def test_core_imports_nothing_of_the_traces_but_the_record(graph):
    assert core_trace_imports(graph) == []


def test_the_trace_check_sees_a_reader_imported_by_the_core():
    made_up = {"scheduler.core.model": {"traces.muri_csv", "traces.record"},
               "scheduler.sim.artifact": {"traces.muri_csv"}}
    assert core_trace_imports(made_up) == [("scheduler.core.model", "traces.muri_csv")]


def test_no_package_imports_in_a_circle(graph):
    assert find_cycle(package_edges(graph)) is None


def test_no_module_imports_in_a_circle(graph):
    assert find_cycle(module_edges(graph, NO_MODULE_CYCLES)) is None


def test_the_checks_see_a_cycle_and_a_core_import():
    """The checks themselves can fail: a made-up graph with a cycle through a driver."""
    made_up = {"scheduler.core.engine": {"scheduler.live.service"},
               "scheduler.live.service": {"scheduler.core.engine", "trainer.checkpoint"},
               "trainer.checkpoint": set()}
    assert find_cycle(package_edges(made_up)) == ["scheduler", "scheduler.live", "scheduler"]
    assert is_core("scheduler.core.policies.muri") and not is_core("scheduler.live.service")


def test_relative_imports_resolve(tmp_path):
    """`from . import x` inside a package names the package's own module."""
    pkg = tmp_path / "scheduler" / "live"
    pkg.mkdir(parents=True)
    (pkg / "loop.py").write_text("from . import ledger\nfrom ..core import Core\n")
    found = imports_of(pkg / "loop.py", root=tmp_path)
    assert {"scheduler.live.ledger", "scheduler.core", "scheduler.core.Core"} <= found


def test_an_entry_point_block_closes_a_circle(tmp_path):
    """A program's main block importing its own command line, which imports the program's
    module: a cycle (the module would run twice)."""
    pkg = tmp_path / "node_agent"
    pkg.mkdir()
    (pkg / "agent.py").write_text("import os\nif __name__ == '__main__':\n"
                                  "    from node_agent.cli import main\n")
    (pkg / "cli.py").write_text("from node_agent.agent import run\n")
    found = imports_of(pkg / "agent.py", root=tmp_path)
    assert found == {"os", "node_agent.cli", "node_agent.cli.main"}
    graph = {"node_agent.agent": {"node_agent.cli"}, "node_agent.cli": {"node_agent.agent"}}
    assert find_cycle(module_edges(graph, NO_MODULE_CYCLES)) == [
        "node_agent.agent", "node_agent.cli", "node_agent.agent"]
