"""Policy plug-ins, for real: distributions whose metadata registers entry points in the group
`interlace.policies` (written as dist-info directories on sys.path, which is all an installed
package is to importlib.metadata), `package.module:Class` names, every way a plug-in can be
broken, and, at the end, the example package pip-installed into a fresh virtual environment
and run from that environment's own `interlace-sim` and `pytest`.
"""
from __future__ import annotations

import csv
import importlib
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from scheduler.core.engine import Core
from scheduler.core.policies import POLICIES, Policy
from scheduler.core.policies.base import place_in_order
from scheduler.core.state import Plan
from scheduler.plugins import GROUP, PolicyError, describe_plugins, make_policy, policy_names
from scheduler.presets import get_preset
from scheduler.live.cli import parse_args
from scheduler.sim.cli import main
from scheduler.sim.simulator import simulate
from specs import load_spec, spec_path
from tests.core.test_plan_invariants import CheckedSimulator
from tests.helpers import job as a_job, spec as a_spec
from traces import default_trace_path, read_trace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "interlace-policy-example"
PRESET = get_preset("default")

# a factory and a class that behave exactly as two built-ins, so that a run through them can
# be told apart from any other policy by its results
GOOD = """
from scheduler.core.policies.priority import PriorityPolicy
from scheduler.core.policies.tiresias import Tiresias

def first_come(model):
    return PriorityPolicy(model, "first-come", lambda job: job.submit_time)

class MyTiresias(Tiresias):
    name = "my-tiresias"
"""
BROKEN = """
from scheduler.core.policies import Policy

ANSWER = 42

class NotAPolicy:
    def __init__(self, model):
        pass

def raises(model):
    raise RuntimeError("no GPUs for\\nthis one")

def returns_a_dict(model):
    return {"plan": None}

class RaisesInInit(Policy):
    def __init__(self, model):
        raise KeyError("tuning")
"""


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install a fake distribution: `add(dist, {entry name: target}, {module: source})` writes
    its modules and its dist-info (METADATA, entry_points.txt) into a directory on sys.path.
    The modules it imported are forgotten afterwards."""
    where = tmp_path / "site"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    before = set(sys.modules)

    def add(dist: str, entries: dict[str, str], modules: dict[str, str] | None = None) -> None:
        info = where / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(
            f"[{GROUP}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()))
        for module, source in (modules or {}).items():
            (where / f"{module}.py").write_text(source)
        importlib.invalidate_caches()

    yield add
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture(scope="module")
def small():
    """The packaged default trace (40 jobs) on its default cluster."""
    return read_trace(default_trace_path("default")), load_spec(spec_path("n2g8"))


def ends(result) -> dict[int, float]:
    return {o.job_id: o.end for o in result.outcomes}


def one_line_error(name: str) -> str:
    with pytest.raises(PolicyError) as caught:
        make_policy(name, PRESET)
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# -- finding and running plug-ins -------------------------------------------------------------

def test_an_installed_factory_and_class_run_as_the_policies_they_copy(installed, small):
    installed("my-policies", {"first-come": "good_policies:first_come",
                              "my-tiresias": "good_policies:MyTiresias"}, {"good_policies": GOOD})
    records, spec = small
    assert policy_names() == [*POLICIES, "first-come", "my-tiresias"]
    assert ends(simulate(records, spec, "first-come", PRESET)) == \
        ends(simulate(records, spec, "fifo", PRESET))
    assert ends(simulate(records, spec, "my-tiresias", PRESET)) == \
        ends(simulate(records, spec, "tiresias", PRESET))
    # and the two differ from each other, so the equalities above pick the policy out
    assert ends(simulate(records, spec, "fifo", PRESET)) != \
        ends(simulate(records, spec, "tiresias", PRESET))


def test_a_module_colon_class_name_needs_no_registration(installed, small):
    installed("nothing-registered", {}, {"good_policies": GOOD})
    records, spec = small
    assert policy_names() == list(POLICIES)
    assert ends(simulate(records, spec, "good_policies:MyTiresias", PRESET)) == \
        ends(simulate(records, spec, "tiresias", PRESET))
    assert type(make_policy("good_policies:first_come", PRESET)).__name__ == "PriorityPolicy"


def test_a_builtin_name_always_means_the_builtin(installed):
    installed("shadow", {"fifo": "good_policies:MyTiresias"}, {"good_policies": GOOD})
    assert type(make_policy("fifo", PRESET)).__name__ == "PriorityPolicy"
    assert policy_names() == list(POLICIES)
    assert describe_plugins() == ["fifo (good_policies:MyTiresias; IGNORED: a built-in policy "
                                  "has this name)"]


def _policy_type(name: str) -> str:
    return type(make_policy(name, get_preset("default"))).__name__


def test_plugin_names_resolve_in_worker_processes(installed):
    """A sweep makes its policies by name in fresh processes: they find the same plug-ins."""
    installed("my-policies", {"my-tiresias": "good_policies:MyTiresias"},
              {"good_policies": GOOD})
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        assert pool.submit(_policy_type, "my-tiresias").result(timeout=60) == "MyTiresias"
        assert pool.submit(_policy_type, "good_policies:first_come").result(timeout=60) == \
            "PriorityPolicy"


# -- what goes wrong, in one line naming the plug-in -------------------------------------------

def test_an_unknown_name_lists_builtins_and_plugins(installed):
    installed("my-policies", {"first-come": "good_policies:first_come"}, {"good_policies": GOOD})
    text = one_line_error("nope")
    assert text.startswith("unknown policy 'nope'")
    assert "fifo" in text and "muri-s" in text and "first-come" in text
    assert "package.module:Class" in text


@pytest.mark.parametrize("target, why", [
    ("missing_module:Policy", "cannot load it: ModuleNotFoundError: No module named "
                              "'missing_module'"),
    ("broken_policies:Missing", "cannot load it: AttributeError: module 'broken_policies' has "
                                "no attribute 'Missing'"),
    ("fails_on_import:Anything", "cannot load it: ImportError: needs torch"),
    ("bad_syntax:Anything", "cannot load it: SyntaxError: "),
    ("broken_policies:ANSWER", "is of type int, not a Policy subclass or a function that "
                               "returns a Policy"),
    ("broken_policies:NotAPolicy", "class NotAPolicy is not a subclass of "
                                   "scheduler.core.policies.Policy"),
    ("broken_policies:raises", "making the policy failed: RuntimeError: no GPUs for this one"),
    ("broken_policies:RaisesInInit", "making the policy failed: KeyError: 'tuning'"),
    ("broken_policies:returns_a_dict", "returned an object of type dict, not a Policy"),
])
def test_each_broken_plugin_is_one_line_naming_it(installed, target, why):
    installed("research-policies", {"mine": target},
              {"broken_policies": BROKEN, "fails_on_import": "raise ImportError('needs torch')\n",
               "bad_syntax": "def (:\n"})
    text = one_line_error("mine")
    assert text.startswith(f"plug-in 'mine' ({target}, from research-policies): {why}")
    # the same object named directly says so too, under its own name
    assert one_line_error(target).startswith(f"policy {target!r}: {why}")


def test_two_packages_claiming_one_name_is_an_error_naming_both(installed):
    installed("one", {"mine": "good_policies:first_come"}, {"good_policies": GOOD})
    installed("two", {"mine": "good_policies:MyTiresias"})
    text = one_line_error("mine")
    assert "more than one package" in text
    assert "good_policies:first_come from one" in text
    assert "good_policies:MyTiresias from two" in text


def test_a_broken_plugin_breaks_neither_listing_nor_the_others(installed, small):
    installed("research-policies", {"broken": "missing_module:Policy",
                                    "first-come": "good_policies:first_come"},
              {"good_policies": GOOD})
    records, spec = small
    assert policy_names() == [*POLICIES, "broken", "first-come"]
    assert describe_plugins() == [
        "broken (missing_module:Policy; BROKEN: cannot load it: ModuleNotFoundError: "
        "No module named 'missing_module')",
        "first-come (good_policies:first_come)"]
    assert simulate(records, spec, "first-come", PRESET).summary.jobs == len(records)
    assert simulate(records, spec, "srsf", PRESET).summary.jobs == len(records)


# -- the command lines -------------------------------------------------------------------------

def test_sim_help_lists_plugins_and_marks_the_broken_one(installed, capsys):
    installed("research-policies", {"broken": "missing_module:Policy",
                                    "first-come": "good_policies:first_come"},
              {"good_policies": GOOD})
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere
    assert "installed plug-ins: broken (missing_module:Policy; BROKEN: cannot load it: " \
           "ModuleNotFoundError: No module named 'missing_module'); first-come " \
           "(good_policies:first_come)" in text.replace("- ", "-")


def test_sim_reports_a_broken_plugin_in_one_line_and_runs_the_rest(installed, capsys):
    installed("research-policies", {"broken": "broken_policies:raises",
                                    "first-come": "good_policies:first_come"},
              {"good_policies": GOOD, "broken_policies": BROKEN})
    assert main(["--policy", "srsf,broken"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "interlace-sim: --policy: plug-in 'broken' (broken_policies:raises, from "
        "research-policies): making the policy failed: RuntimeError: no GPUs for this one"]
    assert main(["--policy", "srsf,first-come,good_policies:MyTiresias", "--json"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["policy"] for o in out] == ["srsf", "first-come", "good_policies:MyTiresias"]
    assert all(o["jobs"] == 40 for o in out)


def _live_args(policy: str, tmp_path: Path) -> list[str]:
    return ["--spec", "n2g8", "--policy", policy, "--endpoints", str(tmp_path / "endpoints"),
            "--run-dir", str(tmp_path / "run")]


def test_live_policy_takes_plugins_and_names_a_broken_one_in_one_line(installed, tmp_path,
                                                                       capsys):
    installed("research-policies", {"first-come": "good_policies:first_come",
                                    "broken": "broken_policies:NotAPolicy"},
              {"good_policies": GOOD, "broken_policies": BROKEN})
    assert parse_args(_live_args("first-come", tmp_path))[0].policy == "first-come"
    assert parse_args(_live_args("good_policies:MyTiresias", tmp_path))[0].policy == \
        "good_policies:MyTiresias"
    for name, line in [
            ("broken", "plug-in 'broken' (broken_policies:NotAPolicy, from research-policies): "
                       "class NotAPolicy is not a subclass of scheduler.core.policies.Policy"),
            ("nope", "unknown policy 'nope'")]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            parse_args(_live_args(name, tmp_path))
        assert done.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"python -m scheduler.live: error: --policy: "
                                                   f"{line}")


# -- docs/policies.md -------------------------------------------------------------------------

def _python_blocks() -> list[str]:
    text = (ROOT / "docs" / "policies.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_worked_example_in_the_docs_is_the_examples_code():
    source = (EXAMPLE / "src" / "interlace_policy_example" / "policy.py").read_text()
    shown = next(b for b in _python_blocks() if "class LargestFirst" in b)
    code = [line for line in source.splitlines() if line.strip() and "#" != line.strip()[0]]
    for line in shown.splitlines():  # each line shown is in the package (docstrings aside)
        assert not line.strip() or line in code, line


class _Watched(CheckedSimulator):
    """Checks every round's plan (the contract of docs/policies.md) and keeps the largest
    group seen."""

    largest = 0

    def _check(self, now, plan, core):
        self.largest = max([self.largest, *(len(g.jobs) for g in plan.groups)])
        super()._check(now, plan, core)


def test_the_sharing_sketch_in_the_docs_runs_and_keeps_the_plan_contract(installed, small):
    shown = next(b for b in _python_blocks() if "class Pairs" in b)
    installed("nothing-registered", {}, {"pairs": shown})
    records, spec = small
    sim = _Watched(records, spec, "pairs:Pairs", PRESET)
    result = sim.run()
    assert sim.rounds_checked > 0 and all(o.end is not None for o in result.outcomes)
    assert sim.largest == 2  # it does share GPUs, two jobs at most


# -- plug-ins under a tenants file ------------------------------------------------------------

TENANTS = ROOT / "examples" / "tenants.toml"
EXAMPLE_NAME = "interlace_policy_example.policy:LargestFirst"


def test_the_example_runs_under_a_tenants_file_planning_only_what_is_admitted(monkeypatch,
                                                                             capsys):
    """The command docs/policies.md shows: the example plans from a list of its own, so under
    tenants it must leave out the jobs the tenant layer holds back, and the run ends."""
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    try:
        from interlace_policy_example.policy import LargestFirst
        partial = []  # whether each round's queue left runnable jobs out
        plan = LargestFirst.plan
        monkeypatch.setattr(LargestFirst, "plan",
                            lambda self, ctx: (partial.append(ctx.partial), plan(self, ctx))[1])
        code = main(["--trace", "philly_1k", "--spec", "n8g8", "--policy", EXAMPLE_NAME,
                     "--tenants", str(TENANTS), "--json"])
    finally:
        for name in [m for m in sys.modules if m.startswith("interlace_policy_example")]:
            del sys.modules[name]
    out, err = capsys.readouterr()
    assert code == 0, err
    (run,) = [json.loads(line) for line in out.splitlines()]
    assert run["policy"] == EXAMPLE_NAME and run["jobs"] == 1000
    assert any(partial) and not all(partial)  # the tenant layer did hold jobs back


def test_a_plugin_that_does_not_declare_a_partial_queue_is_refused_in_one_line(installed,
                                                                               capsys):
    """The docs' sharing sketch declares nothing: the safe default refuses it with tenants,
    before any run, rather than trusting it with a queue it may not plan."""
    shown = next(b for b in _python_blocks() if "class Pairs" in b)
    installed("nothing-registered", {}, {"pairs": shown})
    assert main(["--trace", "philly_1k", "--spec", "n8g8", "--policy", "srsf,pairs:Pairs",
                 "--tenants", str(TENANTS)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "interlace-sim: --tenants: policy 'pairs:Pairs' cannot plan for tenants (it keeps its "
        "own jobs running whatever the round's queue)"]


class _Hears(Policy):
    """Runs every job it is shown, first come first served; keeps what the core tells it."""

    name = "hears"

    def __init__(self, model):
        super().__init__(model)
        self.heard: list = []

    def plan(self, ctx):
        return Plan(tuple(place_in_order(ctx, ctx.queue)))


class _HearsEach(_Hears):
    def on_change(self, job):
        self.heard.append(job.id)


class _HearsAll(_HearsEach):
    def on_changes(self, jobs):
        self.heard.append(tuple(job.id for job in jobs))


@pytest.mark.parametrize("kind, heard", [(_Hears, []), (_HearsEach, [0, 1]),
                                         (_HearsAll, [(0, 1)])])
def test_time_moving_on_reaches_the_hook_a_plugin_overrides(kind, heard):
    """Once per advance, for the running jobs: `on_changes`, or `on_change` for each where a
    policy overrides only that; whatever its class, nothing more."""
    policy = kind(PRESET.model)
    core = Core(a_spec(), policy, PRESET.model)
    for i in range(2):
        core.submit(a_job(i), 0.0)
    core.round(0.0)
    core.advance(10.0, {0: 1.0, 1: 2.0})
    assert policy.heard == heard
    assert [j.attained for j in core.running_jobs()] == [10.0, 10.0]


# -- the example, installed with pip into a fresh environment ----------------------------------

def _venv(path: Path) -> Path:
    """A virtual environment that sees this interpreter's packages (interlace's dependencies,
    pytest, setuptools): --system-site-packages reaches only the base interpreter's, so this
    environment's site-packages are added with a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def _run(args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _builds_wheels_offline() -> bool:
    """setuptools with its own bdist_wheel (70.1 on; the `test` extra pins one), or the
    `wheel` package beside an older one: what building here, without an index, takes."""
    find = importlib.util.find_spec
    return find("setuptools") is not None and (
        find("setuptools.command.bdist_wheel") is not None or find("wheel") is not None)


@pytest.mark.slow
@pytest.mark.skipif(not _builds_wheels_offline(), reason="building the example's wheel without "
                    "an index needs setuptools>=70.1 (the test extra's pin) or wheel")
def test_the_example_installs_with_pip_lists_runs_and_passes_its_tests(tmp_path, small,
                                                                       monkeypatch):
    """Never the network: the example's wheel is built here and installed from its file, pip
    told of no index (and, --isolated, reading no configuration that names one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = _venv(tmp_path / "venv")
    pip = [python, "-m", "pip", "--isolated", "--disable-pip-version-check"]
    offline = ["-q", "--no-index", "--no-deps", "--no-build-isolation"]
    _run([*pip, "install", *offline, "-e", ROOT], tmp_path, env)  # this checkout's commands
    example = tmp_path / "example"  # a copy: pip builds in the source tree
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    wheels = tmp_path / "wheels"
    _run([*pip, "wheel", *offline, "-w", wheels, example], tmp_path, env)
    (wheel,) = wheels.glob("interlace_policy_example-*.whl")
    _run([*pip, "install", *offline, wheel], tmp_path, env)
    sim = tmp_path / "venv" / "bin" / "interlace-sim"

    help_text = " ".join(_run([sim, "--help"], tmp_path, env).stdout.split())
    assert "installed plug-ins: largest-first " \
           "(interlace_policy_example.policy:LargestFirst)" in help_text
    assert "muri-l-nomatch, largest-first;" in help_text.replace("- ", "-")

    out = _run([sim, "--policy", "largest-first,fifo", "--json"], tmp_path, env).stdout
    runs = {o["policy"]: o for o in map(json.loads, out.splitlines())}
    # the same class, loaded here by its module path, gives the same run: the CLI ran it
    monkeypatch.syspath_prepend(str(example / "src"))
    records, spec = small
    try:
        here = simulate(records, spec, "interlace_policy_example.policy:LargestFirst", PRESET)
    finally:
        for name in [m for m in sys.modules if m.startswith("interlace_policy_example")]:
            del sys.modules[name]
    assert runs["largest-first"]["avg_jct"] == pytest.approx(here.summary.avg_jct, rel=1e-9)
    assert runs["largest-first"]["avg_jct"] != pytest.approx(runs["fifo"]["avg_jct"])

    # and in a sweep, by that environment's interlace-sweep: the same run as interlace-sim's
    sweep = tmp_path / "venv" / "bin" / "interlace-sweep"
    _run([sweep, "--traces", "default", "--policies", "largest-first,fifo", "--seeds", "1",
          "--out", tmp_path / "study", "--jobs", "1"], tmp_path, env)
    with open(tmp_path / "study" / "runs.csv", newline="") as fh:
        swept = {row["policy"]: float(row["avg_jct_s"]) for row in csv.DictReader(fh)}
    assert swept == {p: pytest.approx(runs[p]["avg_jct"], rel=1e-9) for p in runs}

    tests = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], example, env).stdout
    assert " passed" in tests and "failed" not in tests and "skipped" not in tests
