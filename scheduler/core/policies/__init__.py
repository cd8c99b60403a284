"""The built-in policies by the names the CLI spells them. Names are resolved, plug-ins
included, outside the core (scheduler/plugins.py reads installed packages' metadata).

Muri and Themis are imported when one is made, not with this package: they pull in numpy
and scipy (a tenth of a second or more), which a run of the other policies never uses."""
from __future__ import annotations

from typing import Callable

from scheduler.core.model import CostModel
from scheduler.core.policies.antman import AntMan
from scheduler.core.policies.base import Policy, RoundContext
from scheduler.core.policies.priority import fifo, srsf, srtf
from scheduler.core.policies.settings import PolicySettings
from scheduler.core.policies.tiresias import Tiresias


def _themis(model: CostModel, settings: PolicySettings) -> Policy:
    from scheduler.core.policies.themis import Themis
    return Themis(model, settings.themis)


def _muri(name: str, **options) -> Callable[[CostModel, PolicySettings], Policy]:
    def make(model: CostModel, settings: PolicySettings) -> Policy:
        from scheduler.core.policies.muri import Muri
        return Muri(model, name, settings=settings.muri, **options)
    return make


# name -> factory(cost model, settings of every policy): each built-in takes its own settings
POLICIES: dict[str, Callable[[CostModel, PolicySettings], Policy]] = {
    "fifo": lambda model, _: fifo(model),
    "srtf": lambda model, _: srtf(model),
    "srsf": lambda model, _: srsf(model),
    "tiresias": lambda model, settings: Tiresias(model, settings.tiresias),
    "themis": _themis,
    "antman": lambda model, _: AntMan(model),
    "muri-s": _muri("muri-s", know_duration=True),
    "muri-l": _muri("muri-l", know_duration=False),
    "muri-l-worst": _muri("muri-l-worst", know_duration=False, ordering="worst"),
    "muri-l-nomatch": _muri("muri-l-nomatch", know_duration=False, matching=False),
}


__all__ = ["POLICIES", "Policy", "RoundContext"]
