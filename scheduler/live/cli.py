"""The live scheduler's command line: `python -m scheduler.live --spec n2g8 --endpoints F ...`.

Parses and checks the options, opens the run directory and the journal once up front (so an
unusable one is one line on stderr, not a traceback once the broker is up), waits for the
broker's endpoints, then runs a SchedulerService until SIGTERM or Ctrl-C.
"""
from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from scheduler.core.model import INTERFERENCE
from scheduler.live.gateway import SERVICE
from scheduler.live.journal import Journal
from scheduler.live.options import Options
from scheduler.live.service import SchedulerService
from scheduler.plugins import PolicyError, make_policy, policy_names
from scheduler.presets import get_preset
from specs import spec_path
from specs.gpu_speed import missing_types
from specs.options import gpu_speed
from specs.spec import ClusterSpec, SpecError, load_spec
from specs.tenants import TenantsError, load_tenants
from specs.limits import MAX_RETRIES, MAX_TIME_SCALE, MAX_WAIT_S
from specs.options import number


def _load_spec(text: str) -> ClusterSpec:
    path = Path(text)
    return load_spec(path if path.suffix == ".csv" or path.exists() else spec_path(text))


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, ClusterSpec]:
    # bounded numbers (specs/limits.py): one line naming the option and its range
    scale = number(1 / MAX_TIME_SCALE, MAX_TIME_SCALE)
    seconds = number(0, MAX_WAIT_S, above=True, unit="s")
    wait = number(0, MAX_WAIT_S, unit="s")
    p = argparse.ArgumentParser(prog="python -m scheduler.live",
                                description=__doc__.split("\n")[0])
    from specs import available_specs
    p.add_argument("--spec", required=True, help="cluster spec: a CSV path or a packaged name ("
                   f"{', '.join(available_specs())})")
    p.add_argument("--policy", default="muri-s",
                   help=f"{', '.join(policy_names())}, or package.module:Class "
                        "(default: muri-s)".replace("%", "%%"))
    p.add_argument("--preset", default="default", help="model preset (default: default)")
    p.add_argument("--no-interference", action="store_true",
                   help="groups at the interleave model's own pace: no interference factor "
                        "(default's, fitted to the paper's testbed: "
                        + ", ".join(f"{v:g}x" for v in INTERFERENCE.values())
                        + " for groups of " + ", ".join(map(str, INTERFERENCE)) + ")")
    p.add_argument("--gpu-speed", type=gpu_speed, action="append", default=[],
                   metavar="[MODEL:]TYPE=SPEED",
                   help="how fast a GPU type runs a job's GPU stage, a V100 being 1, in place "
                        "of the shipped table until measured here; repeat for several")
    p.add_argument("--endpoints", required=True, help="the broker's endpoints file")
    p.add_argument("--run-dir", required=True,
                   help="scheduler.log, journal.db; agents' checkpoints/ are read from here")
    p.add_argument("--time-scale", type=scale, default=1.0, help="trace seconds per wall second")
    p.add_argument("--round", type=seconds, default=5.0, dest="round_s",
                   help="wall seconds between rounds when nothing happens (default 5.0); "
                        "arrivals, completions and agent changes start a round at once")
    p.add_argument("--round-interval", type=seconds, default=0.0, metavar="SECONDS",
                   help="plan only at multiples of SECONDS trace seconds, where something "
                        "happened since the last round, as a scheduler on a period does, and "
                        "as interlace-sim can (default 0: a round at every event)")
    p.add_argument("--agent-timeout", type=seconds, default=10.0,
                   help="wall seconds without a heartbeat before an agent is dead (default 10)")
    p.add_argument("--failure-backoff", type=number(0, MAX_WAIT_S, unit="s"), default=10.0,
                   metavar="S", help="wall seconds a job whose program failed (exited with an "
                   "error, or would not start) waits before it may run again; doubled with "
                   "each failure in a row (default 10)")
    p.add_argument("--failure-backoff-cap", type=number(0, MAX_WAIT_S, unit="s"),
                   default=600.0, metavar="S",
                   help="the longest such wait, wall seconds (default 600)")
    p.add_argument("--max-failures", type=number(1, MAX_RETRIES, integer=True), default=3,
                   metavar="N", help="failures in a row without progress after which a job is "
                   "failed and never run again (default 3; a job's own --max-restarts R "
                   "makes it R+1)")
    p.add_argument("--journal", default=None, help="journal path (default RUN_DIR/journal.db)")
    p.add_argument("--fresh-journal", action="store_true",
                   help="where the journal kept here is lost (empty, missing, unreadable, or "
                        "another), set it aside as JOURNAL.lost-TIME and start a new one; "
                        "without it that is an error (exit 2), since its jobs would be "
                        "forgotten. A journal that reads well is used as ever")
    p.add_argument("--unpaced-trainers", action="store_true",
                   help="the emulated trainers do not keep the pace they are launched with "
                        "(stand-ins that do a job's work in a second, as bench/bench_scale.py "
                        "runs them): a job's progress is not bounded by what that pace "
                        "allows (it must still be finite, within the job, and not behind)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="where agents write checkpoints (default RUN_DIR/checkpoints)")
    p.add_argument("--wait-endpoints", type=wait, default=30.0,
                   help="seconds to wait for the endpoints file to appear")
    p.add_argument("--workload", default="emulated", choices=["emulated", "torch"],
                   help="emulated: trainers replay the planned pace (default); torch: real "
                        "training of each job's model (needs the train extra)")
    p.add_argument("--torch-config", default="{}",
                   help="JSON settings for every torch workload, e.g. '{\"input_size\": 16}'")
    p.add_argument("--tenants", default=None, metavar="FILE",
                   help="the tenants file (TOML: quotas, borrowing, priority classes; "
                        "docs/tenants.md); without it, one queue for everyone")
    p.add_argument("--log-level", default="info")
    from broker.metrics_http import add_arguments as add_metrics_arguments
    add_metrics_arguments(p)
    p.add_argument("--http", default=None, metavar="HOST:PORT",
                   help="serve the live web view and its JSON API here (e.g. 127.0.0.1:8080); "
                        "a non-loopback HOST needs --http-key or --http-insecure")
    p.add_argument("--http-key", default=None, metavar="FILE",
                   help="a secret (the file's text) non-loopback web clients must send as "
                        "'Authorization: Bearer SECRET'")
    p.add_argument("--http-key-always", action="store_true",
                   help="ask every web client for --http-key, loopback ones too (behind a "
                        "reverse proxy on this host, every client comes from loopback)")
    p.add_argument("--http-insecure", action="store_true",
                   help="let any web client that can reach --http see the view, keyless")
    from broker.keys import add_client_key_argument
    add_client_key_argument(p)
    a = p.parse_args(argv)
    try:
        a.torch_config = json.loads(a.torch_config)
        if not isinstance(a.torch_config, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        p.error(f"--torch-config must be a JSON object: {err}")
    from broker.metrics_http import check_arguments as check_metrics_arguments
    check_metrics_arguments(p, a)
    from scheduler.live.webstart import check_args as check_http_args
    check_http_args(p, a)
    try:
        preset = get_preset(a.preset)
        spec = _load_spec(a.spec)
    except (ValueError, SpecError) as err:
        p.error(str(err).splitlines()[0])
    for problem in missing_types(a.gpu_speed, (pool.gpu_type for pool in spec.layout)):
        p.error(problem)
    try:
        policy = make_policy(a.policy, preset)  # a plug-in's mistake: one line now
    except PolicyError as err:
        p.exit(2, f"{p.prog}: error: --policy: {err}\n")
    if a.tenants is not None:
        try:
            a.tenants = load_tenants(a.tenants)
        except TenantsError as err:
            p.exit(2, f"{p.prog}: error: --tenants: {err}\n")
        if not policy.plans_partial:
            p.exit(2, f"{p.prog}: error: --tenants: policy {policy.name!r} cannot plan for "
                      "tenants: it keeps its own jobs running whatever the round's queue\n")
    return a, spec


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0 after a clean stop; 1 with one line on stderr naming the file when the
    run dir, the journal or the endpoints cannot be had; 2 for a usage error, or a journal
    kept here that is lost (empty, missing, unreadable: journal.lost) without
    --fresh-journal."""
    args, spec = parse_args(argv)
    import sqlite3

    from broker.curve import component_endpoints
    from broker.logs import configure_logging
    from scheduler.live.journal import JournalError, JournalLost
    from scheduler.live.journal import set_aside as journal_set_aside

    run_dir = Path(args.run_dir).resolve()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"{SERVICE}: {run_dir}: cannot create the run directory ({err.strerror or err})",
              file=sys.stderr)
        return 1
    # opened once here, before anything waits for the broker, so an unwritable or corrupt
    # journal is one line at once (not a traceback once the broker is up)
    journal_path = Path(args.journal).resolve() if args.journal else run_dir / "journal.db"
    set_aside: list[str] = []
    try:
        try:
            Journal(journal_path).close()
        except JournalLost as err:
            if not args.fresh_journal:
                print(f"{SERVICE}: {err}", file=sys.stderr)
                return 2
            set_aside = journal_set_aside(journal_path)  # nothing destroyed
            Journal(journal_path).close()
    except (OSError, sqlite3.Error, JournalError) as err:
        print(f"{SERVICE}: {journal_path}: cannot use the journal ({err})", file=sys.stderr)
        return 1
    log = configure_logging(SERVICE, run_dir, level=args.log_level)
    if set_aside:
        log.warning("journal_set_aside", path=str(journal_path), moved=set_aside,
                    detail="--fresh-journal: a lost journal set aside; a new one started")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    endpoints = component_endpoints("scheduler", args.endpoints, args.wait_endpoints,
                                    args.client_key, stop, log)
    if endpoints is None:
        return 1
    options = Options(spec=spec, policy=args.policy, preset=args.preset, run_dir=run_dir,
                      time_scale=args.time_scale, round_s=args.round_s,
                      round_interval=args.round_interval,
                      agent_timeout=args.agent_timeout,
                      journal=Path(args.journal) if args.journal else None,
                      checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
                      workload=args.workload, torch_config=args.torch_config,
                      unpaced_trainers=args.unpaced_trainers,
                      metrics=args.metrics, metrics_key=args.metrics_key,
                      metrics_insecure=args.metrics_insecure,
                      metrics_key_always=args.metrics_key_always,
                      interference=not args.no_interference,
                      gpu_speed=dict(args.gpu_speed), tenancy=args.tenants,
                      failure_backoff=args.failure_backoff,
                      failure_backoff_cap=args.failure_backoff_cap,
                      max_failures=int(args.max_failures))
    try:
        service = SchedulerService(endpoints, options, log=log)
    except (OSError, sqlite3.Error, JournalError) as err:  # changed since the check above
        log.error("journal_unusable", path=str(journal_path), error=str(err))
        return 1
    from scheduler.live.webstart import start_webview
    web = start_webview(args, service.state, log)
    if web is False:
        return 2
    # The heap is mostly long-lived (jobs, agents, the ledger): collecting young objects every
    # 700 allocations promotes enough of them that, at 10,000 jobs, a full pass of 60-375 ms
    # ran every second or so, found nothing, and stalled rounds; collected every 50,000
    # allocations, none ran in the same benchmark (EXPERIMENTS.md).
    gc.set_threshold(50_000, 20, 10)
    try:
        return service.run(stop)
    finally:
        if web is not None:
            web.close()
        service.close()


if __name__ == "__main__":
    sys.exit(main())
