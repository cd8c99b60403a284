"""The setup probe the scripts share (scripts/_python.sh): a checkout whose .venv has every
dependency runs from it and never runs pip again; a .venv that lacks one is completed. Run
on a copy of scripts/ with a stand-in .venv (its python is this interpreter, its pip only
records that it was called) and a `python` on PATH that has nothing."""
from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_MODULES = ("zmq", "msgpack", "numpy", "networkx", "rustworkx", "scipy", "cvxpy",
                "structlog", "matplotlib", "pytest", "hypothesis", "torch", "torchvision",
                "sklearn")


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def checkout(tmp_path):
    """(root, env, calls file): scripts/ copied, a complete stand-in .venv, a bare `python`."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "scripts", root / "scripts")
    calls = tmp_path / "calls"
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    _script(venv_bin / "python", f'echo "venv-python $*" >> {calls}\nexec {sys.executable} "$@"\n')
    _script(venv_bin / "pip", f'echo "pip $*" >> {calls}\n')
    bare = tmp_path / "bare"
    bare.mkdir()
    _script(bare / "python", "exit 1\n")  # the system python: no dependency at all
    _script(bare / "python3", "exit 1\n")
    env = dict(os.environ, PATH=os.pathsep.join([str(bare), "/usr/bin", "/bin"]),
               PYTHONPATH=str(REPO_ROOT))
    return root, env, calls


def _probe(root: Path, env: dict, modules: str) -> str:
    proc = subprocess.run(["bash", "-c", '. scripts/_python.sh && interlace_python "$PWD" '
                           f'"{modules}" && echo "$PY"'], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_complete_venv_is_used_and_pip_never_runs(checkout):
    missing = [m for m in TEST_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"this interpreter lacks {missing}, so no stand-in venv can be complete")
    root, env, calls = checkout
    proc = subprocess.run([str(root / "scripts" / "test"), "--version"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    log = calls.read_text().splitlines()
    assert not [line for line in log if line.startswith("pip")], log
    assert log[-1].startswith("venv-python -m pytest -p no:cacheprovider --version"), log


def test_demo_sim_help_needs_no_setup(checkout):
    root, env, calls = checkout
    proc = subprocess.run([str(root / "scripts" / "demo-sim"), "--help"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: scripts/demo-sim" in proc.stdout
    assert not calls.exists() or "pip" not in calls.read_text()


def test_a_venv_lacking_a_module_is_completed_once(checkout):
    root, env, calls = checkout
    assert _probe(root, env, "zmq,no_such_module_anywhere") == str(root / ".venv/bin/python")
    pips = [line for line in calls.read_text().splitlines() if line.startswith("pip")]
    assert len(pips) == 1 and pips[0].endswith(f"-e {root}")


def test_a_python_on_path_with_everything_is_used_without_a_venv(checkout, tmp_path):
    root, env, calls = checkout
    shutil.rmtree(root / ".venv")
    _script(tmp_path / "bare" / "python", f'exec {sys.executable} "$@"\n')  # has it all
    assert _probe(root, env, "zmq,numpy") == "python"
    assert not calls.exists()
