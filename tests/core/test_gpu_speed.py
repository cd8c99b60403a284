"""GPU types' speeds: the shipped table against the public measurements it comes from, a job's
time on a slower type against arithmetic done here, placement that tries the fastest type
first, and measured speeds that replace the table."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core, SchedulingError
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs.gpu_speed import MEASURED, data_sheet_speed, speed
from specs.spec import ClusterSpec, Pool
from tests.helpers import job, traces

# Gavel's single-GPU throughputs (stanford-futuredata/gavel, scheduler/
# simulation_throughputs.json, batch size 32 rows; LM at 20), typed in from the file
GAVEL = {  # model: (K80, P100, V100)
    "ResNet-50": (1.24, 4.89, 7.79), "Transformer": (3.51, 7.87, 10.62),
    "A3C": (3.44, 5.68, 7.18), "LM": (17.14, 58.17, 64.74), "CycleGAN": (0.50, 2.40, 4.43),
}
FAMILIES = {"cnn": "ResNet-50", "transformer": "Transformer", "rl": "A3C"}


def gavel_ratio(model: str, column: int) -> float:
    row = GAVEL[model]
    return row[column] / row[2]


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


@pytest.mark.parametrize("kind,column", [("K80", 0), ("P100", 1)])
def test_the_measured_table_is_gavels_ratios(kind, column):
    for family, model in FAMILIES.items():
        assert MEASURED[kind][family] == pytest.approx(gavel_ratio(model, column), abs=0.006)
    assert MEASURED[kind]["other"] == pytest.approx(
        geomean(gavel_ratio(m, column) for m in GAVEL), abs=0.006)


@pytest.mark.parametrize("kind,column", [("K80", 0), ("P100", 1)])
def test_the_data_sheet_rule_lands_near_what_gavel_measured(kind, column):
    """The rule for unmeasured types, tried on the measured ones: within 15%."""
    measured = geomean(gavel_ratio(m, column) for m in GAVEL)
    assert data_sheet_speed(kind) == pytest.approx(measured, rel=0.15)


def test_types_as_alibaba_names_them():
    assert speed("bert", "V100M16") == speed("bert", "V100M32") == 1.0
    assert speed("vgg16", "P100") == MEASURED["P100"]["cnn"]
    assert speed("some_model", "P100") == MEASURED["P100"]["other"]
    assert speed("gpt2", "T4") == pytest.approx(min(8.1 / 15.7, 320 / 900))
    assert speed("gpt2", "A10") == pytest.approx(min(31.2 / 15.7, 600 / 900))
    assert speed("gpt2", "G2") == speed("gpt2", "NEWGPU") == speed("gpt2", "") == 1.0


T4 = min(8.1 / 15.7, 320 / 900)  # the data sheets' bound, worked out here


def t4_first() -> ClusterSpec:
    """A T4 pool listed before a V100 pool: first fit alone would pick the T4s."""
    return ClusterSpec.of_pools((Pool("t4", 1, 4, 64, 256, "T4", 16.0),
                                 Pool("v100", 1, 4, 64, 256, "V100M32", 32.0)))


def ended(trace, cluster, policy="srtf"):
    result = simulate(trace, cluster, policy, get_preset("default"))
    return {o.job_id: o for o in result.outcomes}


def test_a_job_on_a_slower_type_takes_its_gpu_stage_that_much_longer():
    stages = (0.1, 0.2, 0.1)
    trace = [dataclasses.replace(job(0, stages=stages, model="gpt2"), gpu_types=("T4",)),
             dataclasses.replace(job(1, stages=stages, model="gpt2"), gpu_types=("V100M32",))]
    out = ended(trace, t4_first())
    assert (out[0].gpu_type, out[1].gpu_type) == ("T4", "V100M32")
    # the same restart overhead on both: the difference is 100 iterations' GPU stage
    assert out[0].end - out[1].end == pytest.approx(100 * (0.2 / T4 - 0.2))


def test_placement_tries_the_fastest_type_first_then_the_rest():
    trace = [job(i, num_gpu=4, model="gpt2") for i in range(2)]
    out = ended(trace, t4_first(), "fifo")
    assert (out[0].gpu_type, out[1].gpu_type) == ("V100M32", "T4")


@settings(max_examples=40, deadline=None)
@given(trace=traces(), kinds=st.lists(st.sampled_from(["T4", "P100", "V100M16", "A10", ""]),
                                      min_size=2, max_size=2),
       policy=st.sampled_from(["fifo", "srtf", "srsf", "tiresias", "themis", "antman",
                               "muri-s", "muri-l"]))
def test_every_lone_job_runs_at_its_types_pace(trace, kinds, policy):
    """Random traces on two pools of random types, every policy (AntMan's rounds with
    guests aside: they run slower by its own rule), every job ends; each job running alone
    advances at its solo time with the GPU stage at its type's speed; a group's iteration, at its members' paces on its type,
    is no shorter than its slowest member's alone and no longer than all of them in series
    times the largest interference factor (1.5)."""
    cluster = ClusterSpec.of_pools((Pool("a", 2, 4, 64, 256, kinds[0], 0.0),
                                    Pool("b", 1, 8, 64, 256, kinds[1], 0.0)))
    trace = [r for r in trace if r.num_gpu <= 8]
    types = [kinds[0]] * 2 + [kinds[1]]
    by_id = {r.job_id: r for r in trace}
    broken: list[str] = []

    def solo(record, kind):
        s = speed(record.model_name, kind)
        scale = record.iteration_time / sum(record.stage_times)
        return sum(t * scale / (s if i == len(record.stage_times) - 2 else 1.0)
                   for i, t in enumerate(record.stage_times))

    def look(now, plan, core):
        if plan.shared_gpus:
            return
        for group in plan.groups:
            kind = types[group.placement[0].node]
            if len(group.jobs) == 1:
                want = solo(by_id[group.jobs[0]], kind)
                if not math.isclose(group.tt, want, rel_tol=1e-9):
                    broken.append(f"job {group.jobs[0]} on {kind!r}: {group.tt} != {want}")
            else:  # the cyclic model's bounds: the slowest member alone, all in series
                times = [solo(by_id[j], kind) for j in group.jobs]
                if not max(times) * (1 - 1e-9) <= group.tt <= sum(times) * 1.5:
                    broken.append(f"group {group.jobs} on {kind!r}: {group.tt} not in "
                                  f"[{max(times)}, 1.5 x {sum(times)}]")

    result = simulate(trace, cluster, policy, get_preset("default"), on_round=look)
    assert not broken, broken[:3]
    assert all(o.end is not None for o in result.outcomes)


def test_a_measured_speed_replaces_the_table_for_placement_and_pace():
    preset = get_preset("default")
    model = preset.model
    v100_first = ClusterSpec.of_pools(tuple(reversed(t4_first().pools)))
    core = Core(v100_first, make_policy("fifo", preset), model)
    core.submit(job(0, num_gpu=4, model="gpt2"), 0.0)
    core.calibrate_speed("gpt2", "T4", 2.0)  # measured here: twice a V100
    plan = core.round(0.0)
    group = plan.groups[0]
    assert group.placement[0].node == 1  # the T4 node, now the faster
    profile = core.jobs[0].profile
    assert group.tt == pytest.approx(sum(profile) - profile[1] / 2)
    for bad in (0.0, -1.0, float("nan"), 1e9):
        with pytest.raises(SchedulingError, match="GPU speed must be"):
            core.calibrate_speed("gpt2", "T4", bad)
    with pytest.raises(SchedulingError, match="no GPU type 'H100'"):
        core.calibrate_speed("gpt2", "H100", 1.5)


def test_a_groups_figures_use_its_members_profiles_at_its_types_pace():
    from scheduler.core.speed import TypeSpeeds
    from scheduler.core.state import NodeSlice

    model = get_preset("default").model
    core = Core(t4_first(), make_policy("fifo", get_preset("default")), model)
    member = core.submit(job(0, stages=(0.1, 0.2, 0.1), model="gpt2"), 0.0)
    speeds = TypeSpeeds(t4_first(), {})
    on_t4 = speeds.profiles_on([member], (NodeSlice(0, (0,)),))
    on_v100 = speeds.profiles_on([member], (NodeSlice(1, (0,)),))
    assert on_t4[0] == pytest.approx((0.1, 0.2 / T4, 0.1))
    assert on_v100[0] == member.profile
