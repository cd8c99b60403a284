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

from specs.limits import MAX_GPU_MEM_GB, show

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
