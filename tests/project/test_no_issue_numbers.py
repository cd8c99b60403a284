"""No issue numbers in the project's Python files (code, docstrings, comments): a reader of
the code cannot follow such a number anywhere, so a reference says in words what it means.
History belongs in CHANGELOG, not in the code."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
# "issue" or "issues", any case, then a number, with or without "#"
ISSUE_NUMBER = re.compile(r"\bissues? #?[0-9]+\b", re.IGNORECASE)
# folders that hold no project source: build outputs and third-party code
SKIP = {"build", "dist", "node_modules", "site-packages", "__pycache__"}


def project_files(root: Path = ROOT) -> Iterator[Path]:
    """Every .py file of the project, not descending into hidden or build folders."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP)
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder) / name


def issue_numbers(path: Path) -> list[str]:
    """`path:line: text` for every line that names an issue by its number."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [f"{path}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if ISSUE_NUMBER.search(line)]


def test_no_python_file_names_an_issue_by_number():
    files = list(project_files())
    assert Path(__file__) in files and len(files) > 100  # the scan sees the project
    found = [hit for path in files for hit in issue_numbers(path)]
    assert found == []


def test_the_scan_finds_a_number_and_skips_build_folders(tmp_path):
    number, hashed = "issue" + " 12", "Issues" + " #3"  # in parts: this file must not match
    (tmp_path / "a.py").write_text(f'"""Fast ({number})."""\nx = 1  # see {hashed}\n'
                                   "y = 2  # no issue here; 12 issues; tissue 4\n")
    for skipped in ("build", ".venv"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "b.py").write_text(f"# {number}\n")
    assert list(project_files(tmp_path)) == [tmp_path / "a.py"]
    assert [hit.split(":")[1] for hit in issue_numbers(tmp_path / "a.py")] == ["1", "2"]
