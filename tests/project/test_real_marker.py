"""Every test that needs a real outside component carries the `real` marker, so that its skip
is listed at the end of a run and INTERLACE_REQUIRE_REAL=1 turns it into a failure: a test
whose module or body names a component (its binary, its harness, a network namespace) is marked
`real`, on its module (`pytestmark`) or by a decorator that marks it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what a test names when it needs a component; helpers the tests call for one
COMPONENT = re.compile(r"\b(CHROMIUM|Browser|_screenshot|PROMETHEUS|slurm_harness|SlurmCluster"
                       r"|netns_peer|namespace_peer|small_disk|strace)\b")


def _marks_real(decorators: list[ast.expr], source: str) -> bool:
    """`pytest.mark.real` itself, or a decorator of this module that applies it."""
    for dec in decorators:
        text = ast.get_source_segment(source, dec) or ""
        if "mark.real" in text:
            return True
        name = text.split("(")[0]
        helper = re.search(rf"def {re.escape(name)}\(.*?\n(?:    .*\n|\n)*", source)
        if helper and "mark.real" in helper.group(0):
            return True
    return False


def unmarked(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    module_marked = any(isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "mark.real" in (ast.get_source_segment(source, node) or "") for node in tree.body)
    if module_marked:
        return []
    return [f"{path.relative_to(ROOT)}::{node.name}" for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and COMPONENT.search(ast.get_source_segment(source, node) or "")
            and not _marks_real(node.decorator_list, source)]


def test_tests_needing_a_real_component_are_marked_real():
    files = sorted((ROOT / "tests").rglob("test_*.py"))
    missing = [name for path in files if path.name != Path(__file__).name
               for name in unmarked(path)]
    assert not missing, missing


def test_the_check_sees_an_unmarked_browser_test(tmp_path):
    """The check is not vacuous: a chromium test without the marker is named."""
    path = ROOT / "tests" / "project" / "_probe_real_marker.py"
    path.write_text("def test_page():\n    _screenshot('u', 'p')\n\n"
                    "@pytest.mark.real\ndef test_marked():\n    _screenshot('u', 'p')\n")
    try:
        assert unmarked(path) == ["tests/project/_probe_real_marker.py::test_page"]
    finally:
        path.unlink()
