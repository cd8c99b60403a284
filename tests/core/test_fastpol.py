"""The fast policies' per-round shortcuts give what the plain computation gives:
reused placements, keys re-set in place, and no scipy for a run that never uses it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.placement import ClusterState, Demand
from scheduler.core.policies.base import Replay, solo_group
from scheduler.core.policies.order import CarriedOrder
from scheduler.core.state import Job
from tests.helpers import job as record, spec

ROOT = Path(__file__).resolve().parents[2]


def make_job(job_id: int, num_gpu: int = 1, key: float = 0.0) -> Job:
    return Job(record=record(job_id, num_gpu=num_gpu), solo_time=1.0, profile=(1.0,),
               remaining=key, remaining_estimate=key)


# -- reused placements ---------------------------------------------------------------------
WALK = st.tuples(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8, 12]), max_size=14),
                 st.sets(st.integers(0, 3), max_size=2))  # requests, offline nodes


@settings(max_examples=300, deadline=None)
@given(st.lists(WALK, min_size=1, max_size=8), st.sampled_from([(2, 4, 64), (3, 8, 40),
                                                                 (4, 4, 10)]),
       st.sampled_from([(6, 2), (2, 6)]), st.booleans())
def test_a_replayed_walk_answers_what_an_emptied_cluster_does(walks, shape, demand, repeat):
    """Walk after walk on one cluster (some repeating the last, nodes going offline and
    back): every answer and free count is the plain placement's on an emptied cluster."""
    nodes, gpus, cpus = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    cluster = ClusterState(cluster_spec, Demand(*demand))
    replay = Replay()
    if repeat:  # each walk twice, then a prefix of it: the replay's common case
        walks = [w for walk in walks for w in (walk, walk, (walk[0][:len(walk[0]) // 2],
                                                              walk[1]))]
    for requests, offline in walks:
        cluster.offline.clear()
        cluster.offline.update(n for n in offline if n < nodes)
        plain = ClusterState(cluster_spec, Demand(*demand))
        plain.offline.update(cluster.offline)
        plain.reset()
        replay.start(cluster)
        for gpus in requests:
            assert replay.place(cluster, gpus) == plain.place(gpus)
            assert replay.free_total == plain.free_total
        replay.finish()


def test_a_repeated_walk_gives_the_same_groups_and_a_changed_one_new_ones():
    cluster = ClusterState(spec(nodes=2, gpus=4, cpus=64))
    replay = Replay()
    jobs = [make_job(i, n) for i, n in enumerate([2, 1, 4])]

    def walk(order):
        replay.start(cluster)
        where = [replay.place(cluster, j.num_gpu) for j in order]
        replay.finish()
        return replay.groups(order, where)

    first = walk(jobs)
    again = walk(jobs)
    assert again == first
    assert list(first) == [solo_group(j, w.placement) for j, w in zip(jobs, first)]
    swapped = walk([jobs[1], jobs[0], jobs[2]])  # other requests first: other GPUs
    assert swapped[0].placement != first[1].placement
    assert swapped[0] == solo_group(jobs[1], swapped[0].placement)
    jobs[2].solo_time = 2.0  # a new solo time: a new group, timed by it
    assert walk([jobs[1], jobs[0], jobs[2]])[2].tt == 2.0


# -- keys re-set in place ------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=1, max_size=25),
       st.lists(st.lists(st.tuples(st.integers(0, 100), st.sampled_from(
           [-1.0, -0.5, -0.25, 0.0, 0.25, 1.0])), max_size=12), min_size=1, max_size=8))
def test_running_jobs_rekeyed_in_bulk_keep_the_carried_sort(keys, rounds):
    """Many jobs touched at once each round, most keys shrinking a little (as running jobs'
    do) into ties with others, some growing: the order is the stable sort of last round's."""
    key = lambda j: j.remaining_estimate  # noqa: E731
    jobs = [make_job(i, 1, k) for i, k in enumerate(keys)]
    kept = CarriedOrder(key)
    for job in jobs:
        kept.add(job)
    reference = sorted(jobs, key=key)
    assert kept.sync() == reference
    for changes in rounds:
        touched = []
        for pick, delta in changes:
            job = jobs[pick % len(jobs)]
            job.remaining_estimate = max(job.remaining_estimate + delta, 0.0)
            touched.append(job)
        kept.touch_all(touched)
        reference = sorted(reference, key=key)  # stable: ties stay in last round's order
        assert kept.sync() == reference


# -- no scipy unless Themis or Muri runs -----------------------------------------------------
def test_a_fast_policy_run_imports_no_scipy_and_themis_still_loads():
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from scheduler.presets import get_preset\n"
        "from scheduler.sim.simulator import simulate\n"
        "from scheduler.plugins import make_policy\n"
        "from specs import ClusterSpec\n"
        "from traces import generate\n"
        "spec = ClusterSpec(num_switch=1, nodes_per_switch=2, gpus_per_node=8,"
        " cpus_per_node=64, mem_per_node=256)\n"
        "for p in ('srtf', 'srsf', 'tiresias', 'antman'):\n"
        "    simulate(generate(20, seed=1, max_gpus=8), spec, p, get_preset('paper'))\n"
        "before = sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'cvxpy'))\n"
        "themis = make_policy('themis', get_preset('paper'))\n"
        "print(json.dumps([before, type(themis).__name__]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    before, themis = json.loads(out.strip().splitlines()[-1])
    assert before == []
    assert themis == "Themis"
