"""Policies see jobs read-only and keep their own state: no built-in policy writes a `Job`.

Two checks. The source of every module of scheduler/core/policies, read with `ast`: no
assignment, augmented assignment, deletion or setattr of a job's attribute. And every
built-in policy, under both presets, run through the simulator on small traces with jobs that
refuse any write not made by the core's own code (a test double of `Job`, swapped in for the
core's in this test only).
"""
from __future__ import annotations

import ast
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import scheduler.core.engine as engine
from scheduler.core.policies import POLICIES
from scheduler.core.policies.priority import PriorityPolicy
from scheduler.core.state import Job, JobView
from scheduler.presets import get_preset
from scheduler.sim.simulator import Simulator, make_core
from tests.helpers import job as record, spec

ROOT = Path(__file__).resolve().parents[2]
POLICY_MODULES = sorted((ROOT / "scheduler" / "core" / "policies").glob("*.py"))

# Everything a job has that a write could reach: its slots (a Job has no __dict__, so an
# attribute write to a job can only be to one of them) and its properties.
JOB_ATTRIBUTES = frozenset(Job.__slots__) | frozenset(
    name for name, value in vars(Job).items() if isinstance(value, property))
JOB_TYPES = ("Job", "JobView")


# -- the static check ------------------------------------------------------------------------
def _annotation_names(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node else set()


class _Writes(ast.NodeVisitor):
    """Writes to a job's attributes: `x.attr = ...`, `x.attr += ...`, `x.attr[k] = ...`,
    `del x.attr`, `setattr(x, ...)`, `object.__setattr__(x, ...)`, where `attr` is one of a
    job's and `x` may be a job: anything but `self`/`cls` and names annotated with a type
    that is not a job's."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self._not_jobs: list[set[str]] = [set()]  # per enclosing function

    def _function(self, node) -> None:
        args = node.args
        names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
                 if a.annotation is not None
                 and not _annotation_names(a.annotation) & set(JOB_TYPES)}
        self._not_jobs.append(names)
        self.generic_visit(node)
        self._not_jobs.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._not_jobs.append(set(self._not_jobs[-1]))
        self.generic_visit(node)
        self._not_jobs.pop()

    def _may_be_job(self, node: ast.expr) -> bool:
        return not (isinstance(node, ast.Name)
                    and (node.id in ("self", "cls") or node.id in self._not_jobs[-1]))

    def _target(self, target: ast.expr, line: int) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element, line)
        elif isinstance(target, ast.Starred):
            self._target(target.value, line)
        elif isinstance(target, ast.Subscript):  # a job's container changed in place
            if isinstance(target.value, ast.Attribute):
                self._target(target.value, line)
        elif isinstance(target, ast.Attribute):
            if target.attr in JOB_ATTRIBUTES and self._may_be_job(target.value):
                self.found.append((line, ast.unparse(target)))

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and not _annotation_names(
                node.annotation) & set(JOB_TYPES):
            self._not_jobs[-1].add(node.target.id)
        self._target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, node.lineno)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else "")
        if name in ("setattr", "delattr", "__setattr__", "__delattr__"):
            # setattr(x, ...), object.__setattr__(x, ...): the first argument; x.__setattr__(...)
            owner = node.args[0] if node.args and (
                isinstance(func, ast.Name) or _is_name(func.value, "object")) else (
                func.value if isinstance(func, ast.Attribute) else None)
            if owner is not None and self._may_be_job(owner):
                self.found.append((node.lineno, ast.unparse(node)))
        self.generic_visit(node)


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def job_writes(source: str) -> list[tuple[int, str]]:
    """(line, the write) for each write to a job's attribute in `source`."""
    visitor = _Writes()
    visitor.visit(ast.parse(source))
    return visitor.found


def test_the_static_check_finds_writes_to_jobs_and_allows_what_is_not_a_job():
    written = job_writes(
        "def on_submit(self, job, now):\n"
        "    job.remaining_estimate = job.record.duration\n"
        "    job.attained += 1.0\n"
        "    a.status, (b.starts, c) = 1, (2, 3)\n"
        "    setattr(job, 'status', None)\n"
        "    object.__setattr__(j, 'profile', ())\n"
        "    del job.pending_mark\n"
        "    job.group_key[0] = 1\n"
        "    for job.starts in range(3): pass\n"
        "    sorted(q, key=lambda j: setattr(j, 'first_start', 0))\n")
    assert [line for line, _ in written] == [2, 3, 4, 4, 5, 6, 7, 8, 9, 10]
    assert job_writes(
        "class P:\n"
        "    def on_submit(self, job: JobView, now):\n"
        "        self.remaining = job.remaining\n"
        "        self._queue[job.id] = 0\n"
        "        led = self.ledgers[job.id]\n"
        "        led.iso_time += 1.0\n"
        "        slot.owner = job.id\n"
        "    def grab(self, hold: _Hold, led: _Ledger):\n"
        "        hold.remaining = 1\n"
        "        loads: _Loads = {}\n"
        "        loads.status = 2\n"
        "        setattr(self, 'status', 0)\n") == []


@pytest.mark.parametrize("path", POLICY_MODULES, ids=lambda p: p.name)
def test_no_policy_module_writes_a_job(path: Path):
    """Every per-job fact a policy keeps is its own (a dict by job id, objects it owns)."""
    assert job_writes(path.read_text(encoding="utf-8")) == []


def test_a_job_is_a_job_view_with_every_attribute_of_a_job():
    """`JobView`, the Policy API's job type, lists what a job has: no more, no less."""
    view = {name for name in vars(JobView) if not name.startswith("_")}
    assert view == JOB_ATTRIBUTES
    assert all(isinstance(vars(JobView)[name], property) for name in view)


# -- the runtime check -----------------------------------------------------------------------
CORE_MODULES = ("scheduler.core.engine", "scheduler.core.state")


class WriteFromOutsideTheCore(AssertionError):
    pass


class GuardedJob(Job):
    """Test double of the core's `Job`: a write of any attribute from code that is not the
    core's own (scheduler.core.engine, and state for the dataclass's __init__) raises."""

    __slots__ = ()

    def __setattr__(self, name: str, value) -> None:
        _check(name)
        Job.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        _check(name)
        Job.__delattr__(self, name)


def _check(name: str) -> None:
    caller = sys._getframe(2)  # the frame that wrote (past __setattr__ and this)
    module = caller.f_globals.get("__name__", "")
    if module not in CORE_MODULES:
        raise WriteFromOutsideTheCore(
            f"{module}.{caller.f_code.co_name} (line {caller.f_lineno}) wrote job.{name}")


@pytest.fixture
def guarded(monkeypatch):
    """The core makes GuardedJobs for this test."""
    monkeypatch.setattr(engine, "Job", GuardedJob)


def small_trace(seed: int, n: int = 24) -> list:
    """Jobs of 1-4 GPUs on 8 GPUs, arrivals spread over an hour, some long enough for
    Tiresias's queues (thousands of GPU-seconds), stage mixes that interleave, and both
    AntMan priorities."""
    rng = random.Random(seed)
    return [record(i, num_gpu=rng.choice([1, 1, 2, 4]), submit=rng.uniform(0, 3600),
                   iterations=rng.choice([200, 2000, 8000, 20000]),
                   stages=rng.choice([(0.1, 0.2, 0.1), (0.3, 0.1, 0.2), (0.05, 0.4, 0.05)]),
                   priority=rng.choice([0, 0, 1]))
            for i in range(n)]


CLUSTER = spec(nodes=2, gpus=4)
CASES = [(policy, preset, {}) for policy in POLICIES for preset in ("default", "paper")] + [
    ("tiresias", preset, {"tiresias_promote": 1.0}) for preset in ("default", "paper")]


@pytest.mark.parametrize("policy, preset, overrides", CASES,
                         ids=[f"{p}-{s}{'-promote' if o else ''}" for p, s, o in CASES])
def test_no_policy_writes_a_job_while_it_runs(guarded, policy, preset, overrides):
    for seed in (1, 2):
        sim = Simulator(small_trace(seed), CLUSTER, policy, get_preset(preset, **overrides))
        result = sim.run()
        assert all(type(job) is GuardedJob for job in sim.core.jobs.values())
        assert all(o.end is not None for o in result.outcomes)
        if overrides:  # the promotion case promotes
            assert sum(sim.core.policy.promotions.values()) > 0


class WritesAJob(PriorityPolicy):
    """A policy that breaks the rule: it sets a new job's estimate itself."""

    def on_submit(self, job, now):
        super().on_submit(job, now)
        job.remaining_estimate = 0.0


def test_the_guard_refuses_a_write_from_outside_the_core(guarded):
    model = get_preset("default").model
    core = engine.Core(CLUSTER, WritesAJob(model, "writes", lambda j: j.submit_time), model)
    with pytest.raises(WriteFromOutsideTheCore, match="on_submit .* wrote job.remaining_estimate"):
        core.submit(small_trace(1, 1)[0], 0.0)


def test_the_docs_example_keeps_its_own_state(guarded):
    """docs/policies.md's two-queue policy runs under the guard and uses both queues."""
    text = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    shown = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
                 if "class TwoQueues" in b)
    assert job_writes(shown) == []
    namespace = {"__name__": "docs_two_queues"}
    exec(shown, namespace)  # noqa: S102 (the page's own code)
    sim = Simulator(small_trace(1), CLUSTER, "fifo", get_preset("default"))
    sim.core.policy = policy = namespace["TwoQueues"](sim.core.model)
    queues = set()
    sim.loop.on_round = lambda now, plan, core: queues.update(policy.queue_of.values())
    result = sim.run()
    assert all(o.end is not None for o in result.outcomes)
    assert queues == {0, 1} and policy.queue_of == {}


# -- the first estimate ------------------------------------------------------------------------
@pytest.mark.parametrize("policy, preset, from_duration", [
    ("muri-s", "paper", True), ("muri-s", "default", False), ("muri-l", "paper", False),
    ("srtf", "paper", False), ("srsf", "default", False)])
def test_the_core_takes_the_first_estimate_from_the_duration_where_the_policy_plans_by_it(
        policy, preset, from_duration):
    """Muri-S under the paper preset ranks a job that never ran by the trace's duration (as
    the artifact did); every other policy by its iterations x solo time. The core sets it."""
    core = make_core(CLUSTER, policy, get_preset(preset))
    job_record = replace(record(7, iterations=1000), duration=123.0)
    job = core.submit(job_record, 0.0)
    expected = 123.0 if from_duration else 1000 * job.solo_time
    assert job.remaining_estimate == expected
    assert core.policy.estimate_from_duration is from_duration
