"""Policy names to policies, for the drivers: the core's built-ins, installed plug-ins and
`package.module:Class` names. Outside the core because it reads installed packages' metadata
(files) and imports code by name; the core only holds the built-ins (POLICIES).

A researcher's package registers a policy under the entry-point group `interlace.policies`
(name -> `module:attr`), or a user names one directly as `package.module:Class`; neither
needs an edit here. The object found must be a Policy subclass or a callable taking the cost
model (scheduler.core.model.CostModel) and returning a Policy. A preset's policy settings are
the built-ins' own: a plug-in that subclasses a built-in plans with that one's default
settings unless it passes others. Every way this can go wrong (unknown name, a module that
does not import, an object that is no factory, a factory that raises or returns something
else) is a PolicyError whose message is one line naming the plug-in, so the command lines
print it as it is. Only the plug-in asked for is imported: a broken one never stops the
others.

Nothing is cached: entry points are read afresh on each call (a few milliseconds), so a
worker process or a package installed meanwhile sees the same as a fresh command would.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, Collection, Mapping

from scheduler.core.policies import POLICIES
from scheduler.core.policies.base import Policy
from scheduler.core.model import CostModel
from scheduler.core.policies.settings import PolicySettings
from scheduler.presets import Preset

GROUP = "interlace.policies"

Factory = Callable[[CostModel], Policy]  # a plug-in's
Builtin = Callable[[CostModel, PolicySettings], Policy]


class PolicyError(ValueError):
    """A policy name that does not give a policy; the message is one line naming it."""


class UnknownPolicy(PolicyError):
    """A name that is no built-in, installed plug-in or module:attr: the user's typo (a
    usage error), not a plug-in's fault."""


@dataclass(frozen=True)
class PlugIn:
    """Where a policy name outside the built-ins points: `module:attr`, and from which
    installed distribution (None for a name given as `module:attr` itself)."""

    name: str
    target: str
    dist: str | None = None

    @property
    def label(self) -> str:
        if self.dist is None:
            return f"policy {self.name!r}"
        return f"plug-in {self.name!r} ({self.target}, from {self.dist})"


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _dist_name(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else "?"


def installed(taken: Collection[str] = ()) -> dict[str, list[PlugIn]]:
    """Installed plug-ins by name (several when distributions disagree), reading only their
    metadata; names in `taken` (the built-ins, which always win) are left out."""
    found: dict[str, list[PlugIn]] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in taken:
            continue
        plug = PlugIn(ep.name, ep.value, _dist_name(ep))
        same = found.setdefault(ep.name, [])
        if all(p.target != plug.target for p in same):
            same.append(plug)
    return found


def locate(name: str, taken: Collection[str] = ()) -> PlugIn:
    """The plug-in `name` stands for: an installed one, else a `module:attr` name."""
    plugs = installed(taken).get(name)
    if plugs:
        if len(plugs) > 1:
            raise PolicyError(f"plug-in {name!r} is registered by more than one package: "
                              + "; ".join(f"{p.target} from {p.dist}" for p in plugs)
                              + " (uninstall one, or give module:attr)")
        return plugs[0]
    module, colon, attr = name.partition(":")
    if colon and module and attr:
        return PlugIn(name, name)
    names = [*taken, *installed(taken)]
    raise UnknownPolicy(f"unknown policy {name!r}{did_you_mean(name, names)} (choose from "
                        f"{', '.join(names)}, or give package.module:Class)")


def did_you_mean(name: str, names: Collection[str]) -> str:
    """`; did you mean 'x'?` for the one of `names` closest to `name` (case aside), or ""."""
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


def load(plug: PlugIn) -> Factory:
    """The factory `plug` points at: its module imported, its attribute checked."""
    module_name, _, attr = plug.target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attr.strip().split(".")):  # no attr: the module itself
            obj = getattr(obj, part)
    except Exception as err:  # whatever the plug-in's import raises, reported in one line
        raise PolicyError(f"{plug.label}: cannot load it: {_one_line(err)}") from None
    if isinstance(obj, type):
        if not issubclass(obj, Policy):
            raise PolicyError(f"{plug.label}: class {obj.__name__} is not a subclass of "
                              "scheduler.core.policies.Policy")
    elif not callable(obj):
        raise PolicyError(f"{plug.label}: is of type {type(obj).__name__}, not a Policy "
                          "subclass or a function that returns a Policy")
    return obj


def build(plug: PlugIn, factory: Factory, model: CostModel) -> Policy:
    """`factory(model)`, checked to be a Policy; its failure is one line naming `plug`."""
    try:
        policy = factory(model)
    except Exception as err:  # the plug-in's own code: reported, not a traceback
        raise PolicyError(f"{plug.label}: making the policy failed: {_one_line(err)}") from None
    if not isinstance(policy, Policy):
        raise PolicyError(f"{plug.label}: returned an object of type {type(policy).__name__}, "
                          "not a Policy")
    return policy


def make(name: str, preset: Preset, builtins: Mapping[str, Builtin]) -> Policy:
    """The policy `name` names: built-in (made with the preset's model and its own
    settings), installed plug-in, or `module:attr` (made with the preset's model)."""
    factory = builtins.get(name)
    if factory is not None:
        return factory(preset.model, preset.policies)
    plug = locate(name, builtins)
    return build(plug, load(plug), preset.model)


def describe(builtins: Collection[str]) -> list[str]:
    """One line per installed plug-in for a --help: its name and target, or why it is broken
    or ignored (each is imported here, so only a help text should ask)."""
    lines = []
    for name, plugs in sorted(installed().items()):
        where = ", ".join(p.target for p in plugs)
        if name in builtins:
            lines.append(f"{name} ({where}; IGNORED: a built-in policy has this name)")
            continue
        try:
            load(locate(name, builtins))
        except PolicyError as err:
            why = str(err).removeprefix(f"{plugs[0].label}: ")
            lines.append(f"{name} ({where}; BROKEN: {why})")
        else:
            lines.append(f"{name} ({where})")
    return lines


def make_policy(name: str, preset: Preset) -> Policy:
    """The policy `name` names, planning with `preset`'s cost model: a built-in (POLICIES,
    given its own settings of the preset), an installed plug-in (entry-point group
    `interlace.policies`) or `package.module:Class`. PolicyError (a ValueError) says in one
    line why a name gives none."""
    return make(name, preset, POLICIES)


def policy_names() -> list[str]:
    """The built-ins, then the installed plug-ins (read from metadata; none is imported)."""
    return [*POLICIES, *installed(POLICIES)]


def describe_plugins() -> list[str]:
    """One line per installed plug-in for a --help, broken ones marked (imports each)."""
    return describe(POLICIES)
