"""The live scheduler under a stream of random and hostile telemetry, heartbeats and
registrations (tests/fuzz_service.py), over real sockets: it refuses and counts what the
schema's rules (written in tests/fuzz_service.py, not taken from the codec) say is bad,
stays up, keeps planning, and a running job still finishes. CI sends 1,500 messages;
`python bench/fuzz_service.py --messages 10000` runs the full count against real processes."""
from __future__ import annotations

import math
import os

from tests.fuzz_service import Fuzzer
from tests.helpers import job, spec
from tests.live.test_service import wait_for
from tests.live.test_telemetry_guard import logged  # noqa: F401  (the fixture)
from tests.live.test_service import harness  # noqa: F401  (the fixture it uses)

MESSAGES = int(os.environ.get("FUZZ_SERVICE_MESSAGES", "1500"))
SEED = int(os.environ.get("FUZZ_SERVICE_SEED", "20261201"))


def test_the_scheduler_survives_hostile_messages_and_counts_the_refusals(logged):  # noqa: F811
    h = logged(policy="muri-s", spec=spec(nodes=2, gpus=4), round_s=0.2)
    svc = h.start_scheduler()
    h.agent("n0")  # n1 has no agent: the fuzz may claim it, and n9 and x do not exist
    h.wait_online("n0")
    for j in (1, 2, 3):
        h.submit(job(j, num_gpu=2, stages=(0.1 * j, 0.2, 0.1), iterations=10**6))
    wait_for(lambda: h.status()["counts"]["running"] >= 2)
    rounds = h.status()["rounds"]
    fuzzer = Fuzzer(h.endpoints, SEED, job_ids=(1, 2, 3), nodes=("n1", "n9", "x"))
    try:
        summary = fuzzer.run(MESSAGES)
    finally:
        fuzzer.close()
    expected = fuzzer.event_refusals()
    assert summary["sent"] >= MESSAGES * 0.95 and sum(expected.values()) > MESSAGES / 10
    # every event the schema's rules refuse (the test's own table) counted once, by kind, and
    # nothing else refused (and the service never stopped)
    def counted() -> dict:
        return {k: n for k, n in h.status()["refused"].items() if k.startswith("event.")}
    try:
        wait_for(lambda: counted() == expected)
    except AssertionError:
        assert counted() == expected, "the scheduler's refusals differ from the schema's rules"
    assert h._thread.is_alive()
    # what reached the planner is finite (on 2d48c7c, stage times of inf and 1e17 got in)
    with svc.state.lock:
        jobs = list(svc.state.core.jobs.values())
        assert all(math.isfinite(x) for j in jobs for x in (*j.profile, j.solo_time,
                                                             j.restart_overhead, j.remaining))
    assert h.log.of("profile_updated")  # and valid measurements did reach it
    status = h.status()
    assert status["rounds"] > rounds
    answers = summary["answers"]
    assert answers.get("no_answer", 0) == 0 and answers.get("internal", 0) == 0
    assert not h.log.of("request_failed") and not h.log.of("round_failed")
    # logged once per sender and kind: a few dozen lines for all those refusals
    assert len(h.log.of("input_refused")) <= len(fuzzer.senders) * len(status["refused"])
    # and it still schedules: a running job finishes, a new one is placed
    running = [j["job_id"] for j in status["jobs"] if j["state"] == "running"
               and j["nodes"] == ["n0"]]
    if running:
        h.request("job.finished", job_id=running[0], node="n0", iterations=10**6, ok=True)
        wait_for(lambda: h.job(running[0])["state"] == "finished")
    h.submit(job(4, num_gpu=1, iterations=10))
    wait_for(lambda: h.job(4)["state"] == "running", timeout=60)
    print("fuzz", summary, "refused", h.status()["refused"], "rounds", h.status()["rounds"])
