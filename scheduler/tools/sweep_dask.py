"""The sweep's runs on an existing Dask distributed cluster: the same tasks and the same
run_one as the local pool, handed to the cluster's scheduler, which keeps the queue and
reruns a task whose worker died (so a lost worker loses no run).

The workers need this package importable (the same version), nothing else: a task carries
its jobs and spec.
"""
from __future__ import annotations

import uuid
from typing import Iterable, Iterator

from scheduler.tools.sweep_runs import Task, run_one


class DaskError(Exception):
    """The cluster cannot be used; the text is the one line the user sees."""


def dask_missing() -> str | None:
    """Why the Dask backend cannot run here (its optional packages are not installed), or
    None: said before any run, in one line, rather than as an ImportError's traceback."""
    try:
        import distributed  # noqa: F401
    except ImportError as err:
        return (f"needs the dask extra ({err.name or 'distributed'} is not installed): "
                "pip install 'interlace[dask]'")
    return None


def run_dask(tasks: Iterable[Task], address: str,
             timeout: float = 30.0) -> Iterator[tuple[Task, object]]:
    """(task, (row, detail)) or (task, the exception) for each task as it finishes."""
    from distributed import Client, as_completed

    try:
        client = Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as err:
        raise DaskError(f"--dask {address}: cannot connect ({err})") from None
    try:
        batch = uuid.uuid4().hex[:8]
        futures = {}
        for n, task in enumerate(tasks):
            # pure=False and a key of our own: two equal tasks are still two runs
            future = client.submit(run_one, task, pure=False,
                                   key=f"interlace-sweep-{batch}-{n}")
            futures[future] = task
        for future in as_completed(futures):
            task = futures.pop(future)
            try:
                outcome = future.result()
            except Exception as err:  # the run's own error, or the cluster's (KilledWorker)
                outcome = err
            # let the cluster forget the result: else a worker lost later takes it along
            # and the scheduler runs the task again for nobody
            future.release()
            yield task, outcome
    finally:
        client.close()
