"""Quotas from the real sizes of a log's virtual clusters: each VC is owed the share of the
simulated cluster that its nodes were of the real one, so a sweep's teams are sized as the
teams that made the log were.

The sizes file is a CSV `vc,nodes` (a header row, then a VC a line; HeliosArtifact's
`philly_vc.csv` is of this form). Quotas are whole GPUs by the largest remainder, so they
add up to the cluster's GPUs exactly. A tenant of the trace with no size (a VC the file
lacks, `others`, jobs naming none) is owed nothing and runs on what the others leave idle;
every tenant may borrow up to the whole cluster, so no job is refused for its tenant.
"""

from __future__ import annotations

import csv
import io
import json
import math

from specs.limits import MAX_NODES, MAX_SMALL_FILE_BYTES, read_regular
from specs.pools import NAME

UNNAMED = "others"  # the tenant of jobs naming none, where the trace has such jobs


class SizesError(ValueError):
    """A sizes file that cannot be read; the text is one line naming file, line and field."""


def read_sizes(path: str) -> dict[str, int]:
    """VC name -> nodes, from a `vc,nodes` CSV."""
    try:
        text = read_regular(path, MAX_SMALL_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SizesError(f"{path}: not UTF-8 text") from None
    except (OSError, ValueError) as exc:
        raise SizesError(f"{path}: {exc}") from None
    sizes: dict[str, int] = {}
    for line, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise SizesError(f"{path}:{line}: expected 2 fields (vc, nodes), got {len(row)}")
        name, nodes = (cell.strip() for cell in row)
        if not sizes and line == 1 and not nodes.isdigit():
            continue  # the header
        if not NAME.fullmatch(name):
            raise SizesError(f"{path}:{line}: vc: expected 1-64 letters, digits or _.+-, "
                             f"got {name[:40]!r}")
        if not nodes.isdigit() or not 0 <= int(nodes) <= MAX_NODES:
            raise SizesError(f"{path}:{line}: nodes: expected a whole number in "
                             f"[0, {MAX_NODES}], got {nodes[:40]!r}")
        if name in sizes:
            raise SizesError(f"{path}:{line}: vc: {name!r} again")
        sizes[name] = int(nodes)
    if not sizes:
        raise SizesError(f"{path}: no VC")
    return sizes


def quotas(sizes: dict[str, int], tenants: list[str], total_gpus: int) -> dict[str, int]:
    """Each tenant's quota: its share of `total_gpus` by size among the tenants sized, whole
    GPUs by the largest remainder (ties to the name first in order); 0 without a size."""
    sized = {t: sizes[t] for t in tenants if sizes.get(t)}
    whole = sum(sized.values())
    share = {t: total_gpus * n / whole for t, n in sized.items()} if whole else {}
    owed = {t: (math.floor(share[t]) if t in share else 0) for t in tenants}
    left = total_gpus - sum(owed.values()) if share else 0
    for t in sorted(share, key=lambda t: (-(share[t] - math.floor(share[t])), t))[:left]:
        owed[t] += 1
    return owed


def tenants_toml(owed: dict[str, int], sizes: dict[str, int], total_gpus: int,
                 gpus_per_node: int, source: str, cluster: str) -> str:
    """The tenants file: a table per tenant, its real size in a comment."""
    real = sum(sizes.get(t, 0) for t in owed) * gpus_per_node
    lines = [f"# Quotas from {source}: each VC's share of {cluster}'s {total_gpus} GPUs in "
             f"proportion to its real size",
             f"# ({gpus_per_node} GPUs a node, {real} GPUs in all); a tenant without a size "
             "is owed 0 and borrows.", ""]
    if UNNAMED in owed:
        lines += [f"default = {json.dumps(UNNAMED)}", ""]
    for name, quota in owed.items():
        nodes = sizes.get(name)
        said = f"{nodes} nodes" if nodes else "no size"
        lines += [f"[tenants.{json.dumps(name)}]  # {said}",
                  f"quota = {quota}", f"borrow_limit = {total_gpus - quota}", ""]
    return "\n".join(lines)
