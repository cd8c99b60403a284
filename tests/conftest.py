"""Hypothesis profiles: `ci` draws the same examples on every run, so a red CI always
reproduces; a developer's run (the default profile) explores fresh ones each time; `explore`
(.ci/run's randomized pass) draws fresh ones from the seed it is given (`--hypothesis-seed`),
with no example database, so that seed alone replays a failure."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", database=None, print_blob=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


import logging  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import structlog  # noqa: E402


@pytest.fixture(autouse=True)
def _in_process_logs_to_pytest():
    """Components run inside the test process (requesters, services, a broker or scheduler
    on a thread) log through structlog, whose default prints to the sys.stdout of the moment
    structlog was imported: with -s or --capture=tee-sys their lines, debug ones included,
    landed among pytest's progress dots. Route them to stdlib logging instead: pytest captures
    that per test and shows it only with a failure; between tests (a thread still winding
    down) a NullHandler drops it rather than logging's last resort printing it to stderr.
    Processes (broker, scheduler, agents) log to their run dirs; the tests redirect their
    stderr to files there."""
    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    structlog.configure(
        processors=[structlog.stdlib.add_log_level, structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(default=repr)],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    yield


SLOW_LAYERS = frozenset({"e2e"})  # whole systems of real processes: every test there is slow
# The unit tiers: no live processes, no training, no real services. `--quick` runs these
# folders' tests but the slow, real-component and property ones (the properties are most of
# their time), so that a developer's inner loop takes a minute or two; the full run has all.
QUICK_LAYERS = frozenset({"core", "sim", "tools", "traces"})
QUICK_LEAVES_OUT = ("slow", "real", "property")


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="only the unit tiers (tests/" + ",".join(sorted(QUICK_LAYERS))
                     + ") without their " + ", ".join(QUICK_LEAVES_OUT) + " tests: a "
                     "developer's inner loop, under two minutes on 2 cores")


def pytest_ignore_collect(collection_path, config):
    """With --quick, the folders of tests/ outside the unit tiers are not even collected
    (collecting the live and trainer tests imports what they run)."""
    if not config.getoption("quick"):
        return None
    tests = Path(__file__).parent
    if collection_path.parent == tests and collection_path.is_dir() \
            and collection_path.name not in QUICK_LAYERS:
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    """Tests in the folders of whole-system runs are `slow`, and hypothesis tests are
    `property` (see setup.cfg's markers); with --quick, those and the `real` ones go."""
    for item in items:
        if item.path.parent.name in SLOW_LAYERS:
            item.add_marker(pytest.mark.slow)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)
    if config.getoption("quick"):
        out = [item for item in items
               if any(item.get_closest_marker(name) for name in QUICK_LEAVES_OUT)]
        if out:
            config.hook.pytest_deselected(items=out)
            gone = set(map(id, out))
            items[:] = [item for item in items if id(item) not in gone]


# -- real components (Prometheus, Slurm, chromium, strace, a network namespace) -----------------
# A test marked `real` skips, saying why, where its component is missing; these hooks make
# such skips visible at the end of every run (they are easy to miss among the dots), and
# INTERLACE_REQUIRE_REAL=1 (set by .ci/run, which installs the components) fails them instead.
REQUIRE_REAL = "INTERLACE_REQUIRE_REAL"
_REAL_SKIPS = pytest.StashKey[list]()  # per session, on its config: (test id, reason)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped `real` test is remembered for the summary; with INTERLACE_REQUIRE_REAL=1 it
    fails instead: where the components are meant to be installed, a skip is a lost test."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or item.get_closest_marker("real") is None:
        return
    reason = _skip_reason(report)
    item.config.stash.setdefault(_REAL_SKIPS, []).append((item.nodeid, reason))
    if os.environ.get(REQUIRE_REAL) == "1":
        report.outcome = "failed"
        report.longrepr = (f"{REQUIRE_REAL}=1: this test needs a real component and would "
                           f"have skipped: {reason}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = config.stash.get(_REAL_SKIPS, [])
    if not skipped:
        return
    failed = os.environ.get(REQUIRE_REAL) == "1"
    terminalreporter.section(f"real-component tests that {'failed for' if failed else 'skipped'}"
                             f" want of their component: {len(skipped)}")
    for nodeid, reason in skipped:
        terminalreporter.write_line(f"{nodeid}: {reason}")
    if not failed:
        terminalreporter.write_line(f"({REQUIRE_REAL}=1 turns these skips into failures)")


@pytest.fixture
def netns_peer():
    """A client address that is not loopback, in a network namespace of its own
    (tests/netns.py); the test skips, saying why, where namespaces cannot be made: mark it
    `real`."""
    from tests.netns import namespace_peer

    with namespace_peer() as peer:
        yield peer
