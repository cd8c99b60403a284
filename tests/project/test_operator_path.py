"""The operator's commands work as docs/operations.md writes them: `. scripts/env` puts the
checkout's .venv on PATH (so `interlace-report RUN` is found), and the scripts' own --help
texts name every option of the program they start (the program's parser is the oracle)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _scripts_with_usage() -> list[tuple[str, str]]:
    """(script, module) for each script that prints a usage of its own and execs a module
    with all its arguments."""
    found = []
    for path in sorted((ROOT / "scripts").iterdir()):
        if not path.is_file():
            continue
        text = path.read_text()
        module = re.search(r'exec "\$PY" -m ([\w.]+) "\$@"', text)
        if module and "usage: scripts/" in text:
            found.append((path.name, module.group(1)))
    return found


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text)) - {"--help"}


def test_the_scripts_are_found():
    assert {"start-scheduler", "start-agent", "feed"} <= {s for s, _ in _scripts_with_usage()}


@pytest.mark.parametrize("script, module", _scripts_with_usage())
def test_a_scripts_help_names_every_option_of_its_program(script, module):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    full = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert full.returncode == 0, full.stderr
    own = subprocess.run([str(ROOT / "scripts" / script), "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert own.returncode == 0, own.stderr
    missing = _options(full.stdout) - _options(own.stdout)
    assert not missing, f"scripts/{script} --help does not name {sorted(missing)}"


def test_start_scheduler_help_names_what_the_operations_page_uses():
    own = subprocess.run([str(ROOT / "scripts" / "start-scheduler"), "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    assert {"--http", "--metrics", "--workload"} <= _options(own)


def _fake_checkout(tmp_path: Path) -> Path:
    """scripts/env in a checkout whose .venv holds a stand-in `interlace-report`."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "env", root / "scripts" / "env")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "interlace-report"):
        (bin_dir / name).write_text("#!/bin/sh\necho stand-in\n")
        (bin_dir / name).chmod(0o755)
    return root


def test_sourcing_scripts_env_puts_the_checkouts_commands_on_path(tmp_path):
    root = _fake_checkout(tmp_path)
    # from another directory, with a PATH that has none of the project's commands
    done = subprocess.run(["bash", "-c", f". {root}/scripts/env && command -v interlace-report"
                           " && . scripts/env && echo \"$PATH\""],
                          cwd=root, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found, path = done.stdout.strip().splitlines()
    assert found == f"{root}/.venv/bin/interlace-report"
    assert path.split(":").count(f"{root}/.venv/bin") == 1  # sourced twice, added once
    assert done.stderr.count("is first on PATH") == 2


def test_running_scripts_env_instead_of_sourcing_it_says_how(tmp_path):
    root = _fake_checkout(tmp_path)
    done = subprocess.run([str(root / "scripts" / "env")], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stderr.strip() == "scripts/env: source it, do not run it: . scripts/env"
