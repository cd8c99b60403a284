"""What each GPU type named in real cluster lists holds: memory per GPU (GB).

Vendor data sheets give the disclosed types: NVIDIA T4 16 GB, Tesla P100 16 GB (the PCIe
12 GB part is not what the Alibaba list names), V100 16 GB and 32 GB (Alibaba's V100M16 and
V100M32), A10 24 GB. Alibaba's openb node list also has G2 and G3, which its README calls
"undisclosed internal GPU codes": their figures here are assumptions, stated wherever they
are used (G2 24 GB, the middle of the disclosed types; G3 32 GB, as its hosts are the
cluster's largest, the size of the V100M32 hosts). `--gpu-mem TYPE=GB` replaces any of them.
"""
from __future__ import annotations

from typing import Mapping

from specs.limits import MAX_GPU_MEM_GB, MAX_GPU_TYPES, show
from specs.pools import NAME

GPU_MEM_GB: Mapping[str, float] = {
    "T4": 16.0, "P100": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0,
    "G2": 24.0, "G3": 32.0,
}
ASSUMED = frozenset({"G2", "G3"})  # undisclosed types: their memory is this project's guess


def parse_override(text: str) -> tuple[str, float]:
    """`TYPE=GB` as (type, GB); ValueError with the reason."""
    kind, sep, value = text.partition("=")
    try:
        gb = float(value)
    except ValueError:
        gb = float("nan")
    if not sep or not kind.strip() or not (0 < gb <= MAX_GPU_MEM_GB):
        raise ValueError(f"must be TYPE=GB with GB in (0, {show(MAX_GPU_MEM_GB)}], "
                         f"got {text!r}")
    return kind.strip(), gb


NAME_RULE = "1-64 letters, digits or _.+-, starting with a letter or digit"


def parse_types(text: str) -> tuple[tuple[str, ...], str | None]:
    """The GPU types a job accepts, from one or several joined by `|` (the openb form:
    `V100M16|V100M32`): ((types, in order, each once), None), or ((), why not). An empty
    text accepts any type: ()."""
    text = text.strip()
    if not text:
        return (), None
    types: list[str] = []
    for piece in text.split("|"):
        name = piece.strip()
        if not name:
            return (), f"has an empty type in {text!r} (types are joined by '|')"
        if not NAME.fullmatch(name):
            return (), f"{name!r} is not a GPU type name ({NAME_RULE})"
        if name not in types:  # real lists repeat a type (V100M16|V100M32|V100M32)
            types.append(name)
            if len(types) > MAX_GPU_TYPES:
                return (), f"names more than {MAX_GPU_TYPES} GPU types"
    return tuple(types), None


def types_problem(value: object, shown: str) -> str | None:
    """What is wrong with a record's `gpu_types` (a tuple or list of names, each once), or
    None: the check for records built in memory or sent to the live scheduler."""
    if not isinstance(value, (tuple, list)):
        return f"must be a list of GPU type names, got {shown}"
    if len(value) > MAX_GPU_TYPES:
        return f"names {len(value)} GPU types; at most {MAX_GPU_TYPES}"
    seen: set[str] = set()
    for name in value:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return f"{name!r} is not a GPU type name ({NAME_RULE})"
        if name in seen:
            return f"names {name!r} twice"
        seen.add(name)
    return None
