"""The stage gates this node runs: one per group of torch jobs that share its GPUs, started
by the group's first launch here and closed when its last member here leaves. Only torch
trainers and users' commands (where the scheduler says `turns`: every member takes turns)
take turns; emulated ones replay the planner's pace and need no gate."""
from __future__ import annotations

import time
from typing import Any, Iterable

from node_agent.config import AgentConfig
from node_agent.gate_spans import GateSpans


def takes_turns(workload: dict) -> bool:
    """Whether the workload's trainer asks a gate for its stages (where it has one)."""
    return workload["kind"] in ("torch", "command") and bool(workload.get("turns", True))


class Gates:
    """group (job ids in slot order) -> StageGate. Guarded by the job table's lock."""

    def __init__(self, cfg: AgentConfig, log: Any):
        self.cfg, self.log = cfg, log
        self._gates: dict[tuple, Any] = {}
        self.on_event: Any = None  # (gate name, event) for every gate's events (metrics)
        self.spans = GateSpans(time.monotonic)  # recent turns, for the heartbeat (web view)

    def for_group(self, group: tuple, workload: dict) -> Any:
        """The group's stage gate on this node (started now if it is the first member's
        launch), or None for a workload that takes no turns."""
        if not takes_turns(workload):
            return None
        gate = self._gates.get(group)
        if gate is None:
            from node_agent.gate import StageGate
            from trainer.stages import STAGES

            name = f"{self.cfg.node}:{'-'.join(map(str, group))}"
            listen, spans = self.on_event, self.spans

            def on_event(event: dict, name: str = name) -> None:
                spans.gate_event(name, event)
                if listen is not None:
                    listen(name, event)
            gate = StageGate(group, STAGES, name=name, log=self.log,
                             stall_timeout=self.cfg.gate_stall_timeout,
                             on_event=on_event).start()
            self._gates[group] = gate
        return gate

    def regroup(self, job: Any, group: tuple) -> bool:
        """`job`, which shares its GPUs here, is now in `group` (slot order) on the same GPUs:
        its gate takes the new members and order in place and is keyed by the new group (the
        group's other members here find it done). False where no gate of the job's can be
        (it runs alone here, so its trainer holds no gate: the scheduler restarts it)."""
        if not job.gate:
            return False
        gate, own = self._gates.get(group), self._gates.get(job.gate)
        if gate is None:  # the first member of the group here to hear of it
            if own is None or not own.regroup(group):
                return False
            del self._gates[job.gate]
            self._gates[group] = own
        elif own not in (None, gate):
            return False  # its own gate serves another group: not the same GPUs
        job.gate = group
        return True

    def release(self, job: Any, others: Iterable[Any]) -> None:
        """`job` left: drop it from its gate; close the gate when none of `others` (the jobs
        still here) is in its group."""
        gate = self._gates.get(job.gate) if job.gate else None
        if gate is None:
            return
        gate.remove(job.job_id)
        if not any(j.gate == job.gate for j in others if j is not job):
            self._gates.pop(job.gate, None)
            gate.close()
            self.spans.forget(gate.name)
