"""Bounds on what Interlace takes in: trace fields, cluster specs, command-line options, the
numbers on the wire, and the files they come from. Stated once, here, and imported by the
trace checks (shared by `interlace-trace validate`, the simulator's reader and the live
submit path), the spec loader, the message schema and every command-line tool, so that what
one accepts no other refuses. docs/traces.md shows them as a table.

Why bounds at all: a value past them is a typo or an attack, never a real cluster, and let
through it costs minutes, gigabytes or a figure computed from nonsense (a job of 1e305 s
"can never run", an average JCT of 0.0). Each bound sits orders of magnitude above any real
use. Standard library only, so any layer may import it.
"""
from __future__ import annotations

import os
import stat

# -- times (trace seconds) --------------------------------------------------------------------
MAX_SECONDS = 1e6  # a stage, iteration or restart time: ~11.6 days is a broken clock
MAX_TRACE_SECONDS = 1e9  # a submit time, interval or a job's run time alone: ~31.7 years

# -- counts and ids ---------------------------------------------------------------------------
MAX_ITERATIONS = 10**15  # iterations of one job, done or reported
MAX_ID = 2**53  # job ids and counters: exact as a float, as in JSON and the journal
MAX_BATCH_SIZE = 2**31 - 1  # a batch dimension a framework can hold

# -- cluster shape ----------------------------------------------------------------------------
MAX_NODES = 65_536  # nodes of one cluster (switches x nodes per switch)
MAX_GPUS_PER_NODE = 64  # a node's GPUs are bits of one machine word; real nodes hold 8 or 16
MAX_GPUS = MAX_NODES * MAX_GPUS_PER_NODE  # GPUs one job may ask for
MAX_CPUS = 1_000_000  # cores of one node (an agent's announcement, a spec's column)
MAX_MEM = 1_000_000_000  # memory of one node (GB)
MAX_GPU_MEM_GB = 100_000.0  # memory of one GPU, or what a job needs on each (GB)
MAX_GPU_TYPES = 64  # GPU types one job may accept (a real list names a handful)

# -- strings on the wire -----------------------------------------------------------------------
# Every string a request carries is bounded, so none costs memory, log or journal space in
# proportion to what a sender chose: a name of 250,000 characters was taken and logged twice.
MAX_NAME_CHARS = 256  # a name: a model, node, incarnation, key of a map, ... (the default)
MAX_PATH_CHARS = 4096  # a work directory (Linux's PATH_MAX)
MAX_COMMAND_ARGS = 256  # arguments of a user's command
MAX_COMMAND_CHARS = 16_384  # the whole argv with the work dir; a job record must fit a frame
MAX_DETAIL_CHARS = 16_384  # an agent's account of a failed trainer (its output's last lines)
MAX_ENVELOPE_ID_CHARS = 256  # a message's id (a service remembers ids to answer retries)
MAX_SENDER_CHARS = 128  # a message's sender name

# -- command-line options ---------------------------------------------------------------------
MAX_WAIT_S = 3600.0  # any option that is a wait or timeout: an hour is already a hang
MAX_RETRIES = 100  # resends of one request
MAX_RESTARTS = 1000  # relaunches of a job after failures in a row (its max_restarts)
MAX_JOBS = 1_000_000  # jobs one `interlace-trace generate` writes
MAX_SEED = 2**63 - 1  # a random seed (numpy takes any int; a signed 64-bit word is plenty)
MAX_SEEDS = 10_000  # seeds of one sweep (runs = traces x policies x presets x seeds)
MAX_PROCESSES = 1024  # local worker processes of one sweep
MAX_KEYS = 1000  # client key pairs one `interlace-keys generate` makes
MAX_SIGMA = 10.0  # lognormal sigma of generated run times (e**10 is a 22,000x spread)
MAX_TIME_SCALE = 1e6  # trace seconds per wall second, and its inverse the least: 11 days a
# second either way; past it a scaled submit time or deadline overflows to inf or to 0

# -- files ------------------------------------------------------------------------------------
MAX_SMALL_FILE_BYTES = 1 << 20  # a spec, endpoints or key file (each is under 1 KB)

def show(bound: float) -> str:
    """A bound as messages print it: whole numbers in full while short, else 4 digits."""
    if float(bound).is_integer() and abs(bound) < 10**7:
        return str(int(bound))
    return f"{bound:.4g}"


def file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot be read as an input file ("no such file", "is a directory", "not a
    regular file (a FIFO)", ...), or None. Opened without blocking: a FIFO or a device given
    as a trace, spec, endpoints or key file must be refused, not waited on forever."""
    try:
        os.close(_open_regular(path))
    except InputFileError as err:
        return str(err)
    return None


def read_regular(path: str | os.PathLike[str], max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, or InputFileError saying why not (see file_problem);
    `max_bytes` bounds what is read, so a huge file costs no memory before it is refused."""
    with os.fdopen(_open_regular(path), "rb") as handle:
        try:
            data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
        except OSError as exc:
            raise InputFileError(f"cannot read: {exc.strerror or exc}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise InputFileError(f"larger than {max_bytes} bytes, too large for this kind of file")
    return data


def _open_regular(path: str | os.PathLike[str]) -> int:
    """A descriptor open on the regular file `path`, or InputFileError (nothing left open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputFileError("no such file") from None
    except IsADirectoryError:
        raise InputFileError("is a directory, not a file") from None
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise InputFileError("is a directory, not a file")
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode)
            or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "special")
    raise InputFileError(f"not a regular file ({kind})")


class InputFileError(ValueError):
    """An input path that is not a readable regular file; the text is the reason alone, for
    the caller to put after the path in its own format."""
