"""Policies by the names the CLI spells them."""
from __future__ import annotations

from typing import Callable

from scheduler.core.policies.antman import AntMan
from scheduler.core.policies.base import Policy, RoundContext
from scheduler.core.policies.muri import Muri
from scheduler.core.policies.priority import fifo, srsf, srtf
from scheduler.core.policies.themis import Themis
from scheduler.core.policies.tiresias import Tiresias
from scheduler.core.presets import Preset

def _backend(preset: Preset) -> str:
    return preset.matching_backend


POLICIES: dict[str, Callable[[Preset], Policy]] = {
    "fifo": fifo,
    "srtf": srtf,
    "srsf": srsf,
    "tiresias": Tiresias,
    "themis": Themis,
    "antman": AntMan,
    "muri-s": lambda p: Muri(p, "muri-s", know_duration=True, backend=_backend(p)),
    "muri-l": lambda p: Muri(p, "muri-l", know_duration=False, backend=_backend(p)),
    "muri-l-worst": lambda p: Muri(p, "muri-l-worst", know_duration=False, ordering="worst",
                                    backend=_backend(p)),
    "muri-l-nomatch": lambda p: Muri(p, "muri-l-nomatch", know_duration=False, matching=False),
}


def make_policy(name: str, preset: Preset) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
    return factory(preset)


__all__ = ["POLICIES", "Policy", "RoundContext", "make_policy"]
