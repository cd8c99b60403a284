"""The tenants file: who shares the cluster, and how much of it each may hold.

    default = "research"        # the tenant of jobs that name none (optional)

    [tenants.research]
    quota = 32                  # GPUs the tenant is owed: its jobs get them back when it asks
    borrow_limit = 16           # GPUs past its quota it may hold while others leave theirs idle
    weight = 2.0                # its share of idle GPUs against other borrowers (default 1)
    cohort = "lab"              # lends to and borrows from this cohort's members only

Read with the standard library (tomllib). A fault is one line naming the file, the tenant
and the key, and the bound it breaks (`TenantsError`). docs/tenants.md gives the rules the
core applies.
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from typing import Any, Mapping

from specs.limits import MAX_GPUS, MAX_SMALL_FILE_BYTES, InputFileError, read_regular, show
from specs.pools import NAME

MAX_TENANTS = 4096  # a real cluster has tens; past this, a generated file gone wrong
MAX_WEIGHT = 1e6
KEYS = ("quota", "borrow_limit", "weight", "cohort")


class TenantsError(ValueError):
    """A tenants file the scheduler cannot use; the text is one line naming where."""


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    quota: int  # GPUs
    borrow_limit: int = 0  # GPUs past quota
    weight: float = 1.0
    cohort: str = ""  # "": the cohort of every tenant that names none


@dataclass(frozen=True, slots=True)
class Tenancy:
    """The tenants, by name, and the one jobs that name none belong to ("": such jobs are
    refused)."""

    tenants: Mapping[str, Tenant]
    default: str = ""

    def tenant_of(self, name: str) -> Tenant | None:
        """The tenant a job naming `name` belongs to, or None when the file has none."""
        return self.tenants.get(name or self.default)


def job_problem(tenancy: Tenancy, job_id: int, tenant: str, num_gpu: int) -> str | None:
    """Why a job of `num_gpu` GPUs naming `tenant` can never run under `tenancy`, or None."""
    owner = tenancy.tenant_of(tenant)
    if owner is None:
        return (f"job {job_id}: tenant {tenant!r} is not in the tenants file" if tenant else
                f"job {job_id} names no tenant and the tenants file has no default")
    most = owner.quota + owner.borrow_limit
    if num_gpu > most:
        return (f"job {job_id} needs {num_gpu} GPUs; tenant {owner.name!r} may hold at most "
                f"{most} (quota {owner.quota} + borrow_limit {owner.borrow_limit})")
    return None


def load_tenants(path: str | os.PathLike[str]) -> Tenancy:
    """The tenancy `path` states, or TenantsError."""
    label = os.fspath(path)
    try:
        text = read_regular(path, MAX_SMALL_FILE_BYTES).decode("utf-8")
    except InputFileError as err:
        raise TenantsError(f"{label}: {err}") from None
    except UnicodeDecodeError as err:
        raise TenantsError(f"{label}: not UTF-8 text ({err.reason} at byte {err.start})") \
            from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise TenantsError(f"{label}: not TOML: {err}") from None
    return tenancy_of(data, label)


def tenancy_of(data: Mapping[str, Any], label: str = "tenants") -> Tenancy:
    """The tenancy of a parsed tenants document, or TenantsError naming `label`."""
    extra = sorted(set(data) - {"default", "tenants"})
    if extra:
        raise TenantsError(f"{label}: unknown key {extra[0]!r} (expected 'default' and "
                           f"[tenants.NAME] tables)")
    table = data.get("tenants")
    if not isinstance(table, dict) or not table:
        raise TenantsError(f"{label}: no [tenants.NAME] table")
    if len(table) > MAX_TENANTS:
        raise TenantsError(f"{label}: {len(table)} tenants, more than {MAX_TENANTS}")
    tenants = {name: _tenant(label, name, fields) for name, fields in table.items()}
    default = data.get("default", "")
    if not isinstance(default, str) or (default and default not in tenants):
        raise TenantsError(f"{label}: default {default!r} is not a tenant of the file")
    return Tenancy(tenants, default)


def _tenant(label: str, name: str, fields: Any) -> Tenant:
    where = f"{label}: tenant {name!r}"
    if not NAME.fullmatch(name):
        raise TenantsError(f"{where}: a name is 1-64 letters, digits or _.+- (starting with "
                           f"a letter or digit)")
    if not isinstance(fields, dict):
        raise TenantsError(f"{where}: must be a table of {', '.join(KEYS)}")
    extra = sorted(set(fields) - set(KEYS))
    if extra:
        raise TenantsError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(KEYS)})")
    if "quota" not in fields:
        raise TenantsError(f"{where}: quota is missing (GPUs the tenant is owed)")
    quota = _count(where, "quota", fields["quota"])
    borrow = _count(where, "borrow_limit", fields.get("borrow_limit", 0))
    weight = fields.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
            or not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise TenantsError(f"{where}: weight must be a number in (0, {show(MAX_WEIGHT)}], "
                           f"got {weight!r}")
    cohort = fields.get("cohort", "")
    if not isinstance(cohort, str) or (cohort and not NAME.fullmatch(cohort)):
        raise TenantsError(f"{where}: cohort must be a name of 1-64 letters, digits or "
                           f"_.+-, got {cohort!r}")
    return Tenant(name, quota, borrow, float(weight), cohort)


def _count(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise TenantsError(f"{where}: {key} must be a whole number of GPUs in "
                           f"[0, {show(MAX_GPUS)}], got {value!r}")
    return value
