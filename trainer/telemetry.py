"""A trainer's telemetry and log: progress and stage-timing events on the bus, JSON log lines.

Its own module so that the one trainer contract (trainer/api.py, trainer/reporting.py) and
both packaged trainers share it; zmq and structlog are imported only when used.
"""
from __future__ import annotations

import argparse
from typing import Any

JOIN_WAIT_S = 0.5  # a trainer's first report waits at most this long for the bus after start


class Telemetry:
    """Publishes progress/timing events; a no-op without endpoints. Never fatal after startup."""

    def __init__(self, endpoints_file: str | None, job_id: int, log: Any,
                 client_key: str | None = None):
        self._pub = None
        self._log = log
        self._job_id = job_id
        if endpoints_file:
            from broker.client import Publisher  # imported lazily: zmq only when used
            from broker.endpoints import Endpoints
            from broker.curve import attach_client_key
            endpoints = attach_client_key(Endpoints.load(endpoints_file), client_key)
            self._pub = Publisher(endpoints, f"trainer.{job_id}", join_wait=JOIN_WAIT_S)

    def publish(self, iterations: float, stages: dict[str, float],
                iteration_time: float, restart_overhead: float | None = None,
                gpu_mem_gb: float | None = None) -> None:
        """event.progress, then event.timing with the stage means and the iteration time
        (and the restart overhead this launch paid, when measured, and the GPU memory the
        job holds on each GPU, where known)."""
        if self._pub is None:
            return
        extra = {} if restart_overhead is None else {"restart_overhead": float(restart_overhead)}
        if gpu_mem_gb is not None:
            extra["gpu_mem_gb"] = float(gpu_mem_gb)
        try:
            self._pub.publish("event.progress", job_id=self._job_id, iterations=float(iterations))
            self._pub.publish("event.timing", job_id=self._job_id,
                              stages={k: float(v) for k, v in stages.items()},
                              iteration_time=float(iteration_time),
                              iterations=float(iterations), **extra)
        except Exception as err:  # telemetry is lossy by design; losing it must not stop training
            self._log.warning("publish_failed", error=repr(err))

    def close(self) -> None:
        if self._pub is not None:
            try:
                self._pub.close()
            except Exception:
                pass


def logger(args: argparse.Namespace) -> Any:
    import structlog

    if args.run_dir:
        from broker.logs import configure_logging

        configure_logging(f"trainer-{args.job_id}", args.run_dir)
    return structlog.get_logger().bind(job_id=args.job_id, node=args.node)
