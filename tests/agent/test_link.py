"""The agent's link to a real broker and a scheduler service: a report the broker did not
forward (rate limited, overloaded) stays queued and is delivered later, never dropped."""
from __future__ import annotations

import structlog

from broker.testing import broker_thread, service_thread, wait_until
from node_agent.config import AgentConfig
from node_agent.jobs import JobTable
from node_agent.link import Link


def test_a_report_the_broker_rate_limited_is_kept_and_delivered_later(tmp_path):
    got: list[int] = []

    def scheduler(msg):
        if msg.type == "job.stopped":
            got.append(msg["job_id"])
        return {}

    # one request at once and one a second: the second report is answered rate_limited
    with broker_thread(rate_limit=1.0, rate_burst=1) as broker, \
            service_thread(broker.endpoints, "scheduler", scheduler):
        cfg = AgentConfig("n0", (0,), 8, 64.0, "", tmp_path, request_timeout=1.0,
                          request_retries=0)
        log = structlog.get_logger("test")
        table = JobTable(cfg, log)
        link = Link(cfg, broker.endpoints, table, log)
        link.registered = True
        try:
            for job in (1, 2):
                table.outbox.append(("job.stopped", {"job_id": job, "node": "n0",
                                                     "iterations": 5.0}))
            assert not link.deliver()  # the first goes, the second is rate limited
            assert got == [1] and len(table.outbox) == 1
            wait_until(link.deliver, 10, 0.2)
        finally:
            link.req.close()
    assert got == [1, 2]
