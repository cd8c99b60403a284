"""The tenants file: who shares the cluster, and how much of it each may hold.

    default = "research"        # the tenant of jobs that name none (optional)
    default_class = "batch"     # the priority class of jobs that name none (optional)

    [classes.batch]
    priority = 0                # a tenant's jobs of higher classes are admitted first
    preemptible = true          # false: once running, never stopped by the planner
    min_run_s = 600             # seconds a job runs before the planner may stop it
    restart_budget = 6          # the most planner stops of one job in any hour (0: none)

    [tenants.research]
    quota = 32                  # GPUs the tenant is owed: its jobs get them back when it asks
    borrow_limit = 16           # GPUs past its quota it may hold while others leave theirs idle
    weight = 2.0                # its share of idle GPUs against other borrowers (default 1)
    cohort = "lab"              # lends to and borrows from this cohort's members only
    classes = ["batch"]         # the classes its jobs may use (default: every class)
    commands = false            # true: its jobs may run a user's command (default false)

    [keys]                      # who each CURVE client key is (its name in authorized/)
    alice = "research"          # a tenant: submits, sees and cancels only its own jobs
    ops = "@operator"           # anything but what agents send
    agent-n0 = "@agent"         # node n0's agent (named agent-NODE): its own node's reports

Read with the standard library (tomllib). A fault is one line naming the file, the tenant
and the key, and the bound it breaks (`TenantsError`). docs/tenants.md gives the rules the
core applies.
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from specs.keyroles import node_of_key
from specs.limits import MAX_GPUS, MAX_SMALL_FILE_BYTES, InputFileError, read_regular, show
from specs.pools import NAME

MAX_TENANTS = 4096  # a real cluster has tens; past this, a generated file gone wrong
MAX_WEIGHT = 1e6
MAX_PRIORITY = 10**6
MAX_MIN_RUN_S = 7 * 86400.0  # a week: past it, no job could ever be reclaimed
MAX_RESTART_BUDGET = 3600  # stops an hour: one a second
KEYS = ("quota", "borrow_limit", "weight", "cohort", "classes", "commands")
OPERATOR, AGENT = "@operator", "@agent"  # the roles a key may have besides a tenant
CLASS_KEYS = ("priority", "preemptible", "min_run_s", "restart_budget")


class TenantsError(ValueError):
    """A tenants file the scheduler cannot use; the text is one line naming where."""


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    quota: int  # GPUs
    borrow_limit: int = 0  # GPUs past quota
    weight: float = 1.0
    cohort: str = ""  # "": the cohort of every tenant that names none
    classes: tuple[str, ...] = ()  # the priority classes its jobs may use; (): every one
    commands: bool = False  # its jobs may run a user's command


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """How a job is ranked within its tenant, and when the planner may stop it."""

    name: str = ""
    priority: int = 0  # higher: admitted first within its tenant
    preemptible: bool = True  # False: never stopped by the planner once running
    min_run_s: float = 0.0  # seconds it runs before the planner may stop it
    restart_budget: int = 0  # the most planner stops of one job in any hour; 0: no bound


ANY_CLASS = PriorityClass()  # a file without classes: every job is of this one


@dataclass(frozen=True, slots=True)
class Tenancy:
    """The tenants, by name, and the one jobs that name none belong to ("": such jobs are
    refused); the priority classes, and the one of jobs naming none."""

    tenants: Mapping[str, Tenant]
    default: str = ""
    classes: Mapping[str, PriorityClass] = field(
        default_factory=lambda: MappingProxyType({"": ANY_CLASS}))
    default_class: str = ""
    # client key name -> a tenant's name, OPERATOR or AGENT; empty: no authorization (every
    # key may do anything, as without a tenants file)
    keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def tenant_of(self, name: str) -> Tenant | None:
        """The tenant a job naming `name` belongs to, or None when the file has none."""
        return self.tenants.get(name or self.default)

    def class_of(self, name: str) -> PriorityClass | None:
        """The class of a job naming `name`, or None when the file has none such."""
        return self.classes.get(name or self.default_class)

    @property
    def guards(self) -> bool:
        """Some class bounds when the planner may stop a job."""
        return any(not c.preemptible or c.min_run_s or c.restart_budget
                   for c in self.classes.values())


def job_problem(tenancy: Tenancy, job_id: int, tenant: str, num_gpu: int,
                priority_class: str = "") -> str | None:
    """Why a job of `num_gpu` GPUs naming `tenant` and `priority_class` can never run under
    `tenancy`, or None."""
    owner = tenancy.tenant_of(tenant)
    if owner is None:
        return (f"job {job_id}: tenant {tenant!r} is not in the tenants file" if tenant else
                f"job {job_id} names no tenant and the tenants file has no default")
    kind = tenancy.class_of(priority_class)
    if kind is None:
        return (f"job {job_id}: priority class {priority_class!r} is not in the tenants file"
                if priority_class else
                f"job {job_id} names no priority class and the tenants file has no "
                f"default_class")
    if owner.classes and kind.name not in owner.classes:
        return (f"job {job_id}: tenant {owner.name!r} may not use priority class "
                f"{kind.name!r} (it may use {', '.join(owner.classes)})")
    most = owner.quota + (owner.borrow_limit if kind.preemptible else 0)
    if not kind.preemptible and num_gpu > most:
        return (f"job {job_id} needs {num_gpu} GPUs; a job of the unpreemptible class "
                f"{kind.name!r} runs within its tenant's quota, and tenant {owner.name!r} "
                f"has {owner.quota}")
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
    return parse_tenants(text, label)


def parse_tenants(text: str, label: str = "tenants") -> Tenancy:
    """The tenancy a tenants file's text states, or TenantsError naming `label`: for a
    process that gets the text, not the file (a Tenancy's mapping proxies do not pickle)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise TenantsError(f"{label}: not TOML: {err}") from None
    return tenancy_of(data, label)


def tenancy_of(data: Mapping[str, Any], label: str = "tenants") -> Tenancy:
    """The tenancy of a parsed tenants document, or TenantsError naming `label`."""
    extra = sorted(set(data) - {"default", "default_class", "tenants", "classes", "keys"})
    if extra:
        raise TenantsError(f"{label}: unknown key {extra[0]!r} (expected 'default', "
                           f"'default_class', [classes.NAME], [tenants.NAME] and [keys])")
    classes = _classes(label, data.get("classes"))
    table = data.get("tenants")
    if not isinstance(table, dict) or not table:
        raise TenantsError(f"{label}: no [tenants.NAME] table")
    if len(table) > MAX_TENANTS:
        raise TenantsError(f"{label}: {len(table)} tenants, more than {MAX_TENANTS}")
    tenants = {name: _tenant(label, name, fields, classes) for name, fields in table.items()}
    default = data.get("default", "")
    if not isinstance(default, str) or (default and default not in tenants):
        raise TenantsError(f"{label}: default {default!r} is not a tenant of the file")
    default_class = data.get("default_class", "")
    if not isinstance(default_class, str) or default_class not in classes:
        raise TenantsError(f"{label}: default_class {default_class!r} is not a class of the "
                           f"file")
    keys = _keys(label, data.get("keys", {}), tenants)
    return Tenancy(tenants, default, MappingProxyType(classes), default_class, keys)


def _keys(label: str, table: Any, tenants: Mapping[str, Tenant]) -> Mapping[str, str]:
    """The [keys] table: each client key's name -> a tenant of the file, or a role."""
    if not isinstance(table, dict):
        raise TenantsError(f"{label}: keys must be a table of KEY = \"tenant\" or "
                           f"\"{OPERATOR}\" or \"{AGENT}\"")
    if len(table) > MAX_TENANTS:
        raise TenantsError(f"{label}: {len(table)} keys, more than {MAX_TENANTS}")
    for name, who in table.items():
        where = f"{label}: key {name!r}"
        if not NAME.fullmatch(name):
            raise TenantsError(f"{where}: a key name is 1-64 letters, digits or _.+- "
                               f"(starting with a letter or digit), as interlace-keys names")
        if who not in tenants and who not in (OPERATOR, AGENT):
            raise TenantsError(f"{where}: {who!r} is neither a tenant of the file nor "
                               f"{OPERATOR!r} or {AGENT!r}")
        # the broker binds agent.NODE to the key agent-NODE: the name is the agent's node
        if (who == AGENT) != (node_of_key(name) is not None):
            raise TenantsError(f"{where}: an agent's key is named agent-NODE after the node "
                               f"it serves (e.g. agent-n0), and is mapped to {AGENT!r}")
    return MappingProxyType(dict(table))


def _table(where: str, name: str, fields: Any, keys: tuple[str, ...]) -> str:
    """`where`, once the table `name` is checked to be a named table of only `keys`."""
    if not NAME.fullmatch(name):
        raise TenantsError(f"{where}: a name is 1-64 letters, digits or _.+- (starting with "
                           f"a letter or digit)")
    if not isinstance(fields, dict):
        raise TenantsError(f"{where}: must be a table of {', '.join(keys)}")
    extra = sorted(set(fields) - set(keys))
    if extra:
        raise TenantsError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(keys)})")
    return where


def _classes(label: str, table: Any) -> dict[str, PriorityClass]:
    if table is None:
        return {"": ANY_CLASS}
    if not isinstance(table, dict) or not table:
        raise TenantsError(f"{label}: classes must be [classes.NAME] tables")
    out = {}
    for name, fields in table.items():
        where = _table(f"{label}: class {name!r}", name, fields, CLASS_KEYS)
        priority = fields.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int) \
                or abs(priority) > MAX_PRIORITY:
            raise TenantsError(f"{where}: priority must be a whole number in "
                               f"[-{MAX_PRIORITY}, {MAX_PRIORITY}], got {priority!r}")
        preemptible = fields.get("preemptible", True)
        if not isinstance(preemptible, bool):
            raise TenantsError(f"{where}: preemptible must be true or false, got "
                               f"{preemptible!r}")
        min_run = fields.get("min_run_s", 0)
        if isinstance(min_run, bool) or not isinstance(min_run, (int, float)) \
                or not 0 <= min_run <= MAX_MIN_RUN_S:
            raise TenantsError(f"{where}: min_run_s must be a number of seconds in "
                               f"[0, {show(MAX_MIN_RUN_S)}], got {min_run!r}")
        budget = fields.get("restart_budget", 0)
        if isinstance(budget, bool) or not isinstance(budget, int) \
                or not 0 <= budget <= MAX_RESTART_BUDGET:
            raise TenantsError(f"{where}: restart_budget must be a whole number of stops an "
                               f"hour in [0, {MAX_RESTART_BUDGET}], got {budget!r}")
        out[name] = PriorityClass(name, priority, preemptible, float(min_run), budget)
    return out


def _tenant(label: str, name: str, fields: Any, classes: Mapping[str, PriorityClass]) -> Tenant:
    where = _table(f"{label}: tenant {name!r}", name, fields, KEYS)
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
    allowed = fields.get("classes", [])
    if not isinstance(allowed, list) or not all(isinstance(c, str) for c in allowed):
        raise TenantsError(f"{where}: classes must be a list of class names")
    for kind in allowed:
        if kind not in classes or not kind:
            raise TenantsError(f"{where}: class {kind!r} is not a class of the file")
    commands = fields.get("commands", False)
    if not isinstance(commands, bool):
        raise TenantsError(f"{where}: commands must be true or false, got {commands!r}")
    return Tenant(name, quota, borrow, float(weight), cohort, tuple(dict.fromkeys(allowed)),
                  commands)


def _count(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise TenantsError(f"{where}: {key} must be a whole number of GPUs in "
                           f"[0, {show(MAX_GPUS)}], got {value!r}")
    return value
