"""A round hands back what did not change instead of rebuilding it: Muri returns a lone job's
Group of the last plan while its GPUs and speed stay, and the simulator keeps the runs of a
group handed back unchanged rather than classifying every running job again. Both must be
invisible in the results: whole simulations are compared with a simulator that classifies
every job of every plan (plan_changes.compare) and builds every run anew, as before."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduler.core import plan_changes
from scheduler.core.engine import Core
from scheduler.plugins import make_policy
from scheduler.core.presets import get_preset
from scheduler.sim.simulator import Simulator, _Run
from tests.helpers import job as record, spec


class PlainSimulator(Simulator):
    """Every plan's changes classified job by job (plan_changes.compare), every run new."""

    def _apply(self, plan, now):
        preset, cost = self.preset, self._cost
        previous = self.runs
        charge_all = preset.overhead_every_event
        starting = () if charge_all else set(plan_changes.compare(
            {j: (run.group, run.where) for j, run in previous.items()},
            {j: (g.jobs, g.placement) for g in plan.groups for j in g.jobs}, preset).starting)
        runs = {}
        for group in plan.groups:
            costs = [cost[j] for j in group.jobs]
            for job_id, own in zip(group.jobs, costs):
                if charge_all or job_id in starting:
                    overhead = sum(costs) if preset.overhead_group_sum else own
                else:
                    overhead = previous[job_id].overhead
                runs[job_id] = _Run(group.tt, overhead, group.jobs, group.placement, group)
        self.runs = runs


@st.composite
def traces(draw):
    out = []
    for i in range(draw(st.integers(1, 25))):
        out.append(record(
            i, num_gpu=draw(st.sampled_from([1, 1, 2, 4, 8])),
            submit=draw(st.sampled_from([0.0, 0.0, 5.0, 60.0, 600.0])) + i * draw(
                st.sampled_from([0.0, 1.0])),
            iterations=draw(st.sampled_from([10, 100, 500, 2000])),
            stages=draw(st.sampled_from([(0.1, 0.2, 0.1, 0.1), (0.3, 0.1, 0.2, 0.05),
                                         (0.05, 0.4, 0.05, 0.3)]))))
    return out


def outcomes(kind, records, cluster_spec, policy, preset):
    try:
        result = kind(records, cluster_spec, policy, preset).run()
    except RuntimeError as error:  # a job no node can hold (too few CPUs): both must say so
        return str(error)
    return ([(o.job_id, o.start, o.end, o.preemptions, o.starts) for o in result.outcomes],
            result.rounds)


@settings(max_examples=40, deadline=None)
@given(traces(), st.sampled_from(["muri-s", "muri-l", "srsf", "tiresias", "antman"]),
       st.sampled_from(["paper", "default"]), st.sampled_from([(2, 4, 64), (3, 8, 40)]))
def test_runs_kept_from_the_last_plan_give_what_classifying_every_job_gives(
        records, policy, preset, shape):
    nodes, gpus, cpus = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    p = get_preset(preset)
    assert (outcomes(Simulator, records, cluster_spec, policy, p)
            == outcomes(PlainSimulator, records, cluster_spec, policy, p))


def _core(*records):
    preset = get_preset("default")
    core = Core(spec(nodes=2, gpus=4), make_policy("muri-s", preset), preset)
    for r in records:
        core.submit(r, 0.0)
    return core


def _group_of(plan, job_id):
    return next(g for g in plan.groups if job_id in g.jobs)


def test_a_job_alone_on_the_same_gpus_gets_its_last_group_back():
    core = _core(record(1, num_gpu=2), record(2, num_gpu=1))
    first = _group_of(core.round(0.0), 1)
    core.advance(10.0, {1: 5.0, 2: 5.0})
    assert _group_of(core.round(10.0), 1) is first


def test_a_job_whose_speed_changed_gets_a_new_group_at_its_new_speed():
    core = _core(record(1, num_gpu=2), record(2, num_gpu=1))
    first = _group_of(core.round(0.0), 1)
    core.update_profile(1, solo_time=first.tt * 2)
    again = _group_of(core.round(1.0), 1)
    assert again is not first
    assert again.tt == first.tt * 2 and again.placement == first.placement


def test_a_group_that_stays_together_on_the_same_gpus_gets_its_last_group_back():
    preset = get_preset("default")
    core = Core(spec(nodes=1, gpus=1), make_policy("muri-s", preset), preset)
    core.submit(record(1, stages=(0.3, 0.1, 0.2, 0.05)), 0.0)
    core.submit(record(2, stages=(0.05, 0.4, 0.05, 0.3)), 0.0)
    first = _group_of(core.round(0.0), 1)
    assert sorted(first.jobs) == [1, 2]  # two jobs, one GPU: they interleave
    core.advance(10.0, {1: 5.0, 2: 5.0})
    assert _group_of(core.round(10.0), 1) is first
    core.update_profile(2, profile=(0.3, 0.1, 0.2, 0.05))  # now as job 1: a slower pair
    again = _group_of(core.round(11.0), 1)
    assert again is not first and sorted(again.jobs) == [1, 2]
    assert again.tt > first.tt and again.placement == first.placement
