"""The named presets the command lines offer (`--preset default|paper`): a cost model, the
built-in policies' settings, and whether the simulator runs in the artifact mode.

`default` is the physically sensible model, its free terms fitted to the paper's real testbed
run (interlace-calibrate; EXPERIMENTS.md#calibration): one restart overhead for every model,
paid once per start, restart, regroup or move; groups slowed by the fitted interference
factors (model.INTERFERENCE; the live scheduler refines them from measured paces); profiles
scaled to the solo time; running jobs keep their GPUs; auto-unpack on, so that no group is
slower than running alone; Muri merges, while demand exceeds the cluster, where a merge adds
at least a tenth to its jobs' work per second (the gain rule, muri_outlook.py).

`paper` reproduces the published artifact's figures: its cost model (a 1.015 calibration of
iteration times, fixed group slowdown multipliers, every regroup a restart, no sticky
placement), the settings its policies ran with (the trace's `duration` as Muri-S's first
remaining-time estimate, auto-unpack off, its own matcher, whose tie-breaking decides
between equal matchings, no demotion slack, Themis on ECOS), and the simulator's artifact
mode (scheduler/sim/artifact.py: its event folding, overhead accounting, float arithmetic
and Tiresias's admission by GPU count). The live scheduler takes a preset's model and
settings; the artifact mode is the simulator's alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

from scheduler.core.model import INTERFERENCE, MEASURED_OVERHEAD, CostModel
from scheduler.core.policies.settings import (MuriSettings, PolicySettings, ThemisSettings,
                                              TiresiasSettings)


@dataclass(frozen=True)
class Preset:
    name: str
    model: CostModel = field(default_factory=CostModel)
    policies: PolicySettings = field(default_factory=PolicySettings)
    artifact: bool = False  # the simulator replays the artifact's accounting (see above)


PAPER = Preset(
    name="paper",
    model=CostModel(
        calibration=1.015,
        group_slowdown=MappingProxyType({2: 1.33 / 1.015, 3: 1.5 / 1.015, 4: 1.37 / 1.015}),
        nomatch_slowdown=MappingProxyType({4: 1.3 / 1.015}),
        normalize_profiles=False,
        sticky_placement=False,
        regroup_in_place=False,
    ),
    policies=PolicySettings(
        tiresias=TiresiasSettings(demotion_slack=0.0),
        muri=MuriSettings(auto_unpack=False, fresh_estimate_duration=True, merge_rule="efficiency",
                          regroup_hysteresis=0.0, matching_backend="blossom",
                          matching_rel_gap=0.0, matching_window=0),
        themis=ThemisSettings(solver="ecos"),
    ),
    artifact=True,
)

DEFAULT = Preset(name="default", model=CostModel(
    group_slowdown=INTERFERENCE, overhead_table=MappingProxyType({}),
    overhead_default=MEASURED_OVERHEAD))

PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in (PAPER, DEFAULT)})

def _names(cls) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def get_preset(name: str, **overrides: Any) -> Preset:
    """The preset `name`, with fields replaced: a cost model field by its name
    (`overhead_default=0.0`), a policy setting by its policy and name (`tiresias_limits`,
    `muri_matching_window`, `themis_solver`), or `artifact`. One flat namespace, so that a
    command line or a task file can say what it changes without building the parts."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
    if not overrides:
        return preset
    model: dict[str, Any] = {}
    settings: dict[str, dict[str, Any]] = {}  # part of PolicySettings -> its fields replaced
    artifact = overrides.pop("artifact", preset.artifact)
    for key, value in overrides.items():
        part, _, setting = key.partition("_")
        if key in _names(CostModel):
            model[key] = value
        elif part in _names(PolicySettings) \
                and setting in _names(type(getattr(preset.policies, part))):
            settings.setdefault(part, {})[setting] = value
        else:
            raise TypeError(f"get_preset() got an unexpected override {key!r}")
    policies = replace(preset.policies, **{
        part: replace(getattr(preset.policies, part), **values)
        for part, values in settings.items()})
    return replace(preset, model=replace(preset.model, **model), policies=policies,
                   artifact=artifact)
