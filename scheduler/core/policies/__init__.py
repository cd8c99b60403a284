"""The built-in policies by the names the CLI spells them. Names are resolved, plug-ins
included, outside the core (scheduler/plugins.py reads installed packages' metadata).

Muri and Themis are imported when one is made, not with this package: they pull in numpy
and scipy (a tenth of a second or more), which a run of the other policies never uses."""
from __future__ import annotations

from typing import Callable

from scheduler.core.policies.antman import AntMan
from scheduler.core.policies.base import Policy, RoundContext
from scheduler.core.policies.priority import fifo, srsf, srtf
from scheduler.core.policies.tiresias import Tiresias
from scheduler.core.presets import Preset

def _themis(preset: Preset) -> Policy:
    from scheduler.core.policies.themis import Themis
    return Themis(preset)


def _muri(preset: Preset, name: str, **options) -> Policy:
    from scheduler.core.policies.muri import Muri
    return Muri(preset, name, **options)


POLICIES: dict[str, Callable[[Preset], Policy]] = {
    "fifo": fifo,
    "srtf": srtf,
    "srsf": srsf,
    "tiresias": Tiresias,
    "themis": _themis,
    "antman": AntMan,
    "muri-s": lambda p: _muri(p, "muri-s", know_duration=True, backend=p.matching_backend),
    "muri-l": lambda p: _muri(p, "muri-l", know_duration=False, backend=p.matching_backend),
    "muri-l-worst": lambda p: _muri(p, "muri-l-worst", know_duration=False, ordering="worst",
                                     backend=p.matching_backend),
    "muri-l-nomatch": lambda p: _muri(p, "muri-l-nomatch", know_duration=False, matching=False),
}


__all__ = ["POLICIES", "Policy", "RoundContext"]
