"""The broker's three addresses, and the small JSON file that hands them to every component.

The broker binds port 0 by default, so the file it writes once bound is how the scheduler,
agents and trainers learn where it is; writes are atomic so a reader never sees half a file.
A broker running with CURVE keys also records its public key here (`server_key`), so clients
learn whom to trust from the same file; each client's own key pair rides along in memory
(`client`, never written out) so every socket built from these endpoints is keyed alike.
"""
from __future__ import annotations

import errno
import json
import os
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from zmq.utils import z85

from specs.limits import MAX_SMALL_FILE_BYTES, InputFileError, read_regular

_FIELDS = ("events_in", "events_out", "requests")


@dataclass(frozen=True)
class Endpoints:
    events_in: str   # XSUB bound by the broker; publishers connect here
    events_out: str  # XPUB bound by the broker; subscribers connect here
    requests: str    # ROUTER bound by the broker; requesters and services connect here
    server_key: str | None = None  # the broker's CURVE public key (Z85) when it runs keyed
    client: Any = field(default=None, compare=False, repr=False)  # broker.keys.ClientKeys

    def addresses(self) -> dict[str, str]:
        """The three addresses by name (for logs; never the keys)."""
        return {f: getattr(self, f) for f in _FIELDS}

    def with_client(self, client: Any) -> "Endpoints":
        """The same endpoints carrying this client's key pair (broker.keys.ClientKeys)."""
        return replace(self, client=client)

    def to_json(self) -> str:
        raw: dict[str, str] = self.addresses()
        if self.server_key is not None:
            raw["server_key"] = self.server_key
        return json.dumps(raw, sort_keys=True)

    @classmethod
    def from_json(cls, s: str | bytes) -> "Endpoints":
        """Parse and check the file's content; a bad file is a ValueError naming what is wrong."""
        try:
            raw = json.loads(s)
        except json.JSONDecodeError as err:
            raise ValueError(f"endpoints: not JSON ({err})") from None
        if not isinstance(raw, dict):
            raise ValueError("endpoints: expected a JSON object")
        missing = [f for f in _FIELDS if f not in raw]
        if missing:
            raise ValueError(f"endpoints: missing {missing}")
        bad = [f for f in _FIELDS if not isinstance(raw[f], str) or "://" not in raw[f]]
        if bad:
            raise ValueError(f"endpoints: {bad} must be zmq addresses like tcp://host:port")
        key = raw.get("server_key")
        if key is not None and not _is_z85_key(key):
            raise ValueError("endpoints: server_key must be a 40-character Z85 CURVE key")
        return cls(**{f: raw[f] for f in _FIELDS}, server_key=key)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Endpoints":
        """The file's endpoints; ValueError when it is not a small regular file of them (a
        FIFO would block the reader forever)."""
        try:
            data = read_regular(path, MAX_SMALL_FILE_BYTES)
        except InputFileError as err:
            if not os.path.lexists(path):  # an OSError as before: callers wait for the file
                raise FileNotFoundError(errno.ENOENT, "no such file", os.fspath(path)) from None
            raise ValueError(f"endpoints: {err}") from None
        try:
            return cls.from_json(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("endpoints: not UTF-8 text") from None

    @classmethod
    def wait_load(cls, path: str | os.PathLike[str], wait_s: float,
                  stop: threading.Event | None = None,
                  on_wait: Callable[[str], None] | None = None) -> "Endpoints":
        """load, waiting up to `wait_s` for the file: components started together with their
        broker come up in any order (`on_wait` hears once why they wait). ValueError naming
        the file and what is wrong."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + wait_s
        waiting = False
        while True:
            try:
                return cls.load(path)
            except (OSError, ValueError) as err:
                if not waiting and on_wait is not None:
                    on_wait(str(err))
                waiting = True
                if time.monotonic() >= deadline or stop.is_set():
                    reason = ("no such file" if isinstance(err, FileNotFoundError)
                              else getattr(err, "strerror", None) or str(err))
                    raise ValueError(f"endpoints file {path}: {reason}"
                                     + (f" (waited {wait_s:g} s)" if wait_s > 0 else "")) from None
                stop.wait(0.1)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write to a temporary file in the same folder, then rename over the target (atomic)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.to_json() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def _is_z85_key(text: Any) -> bool:
    if not isinstance(text, str) or len(text) != 40:
        return False
    try:
        return len(z85.decode(text.encode("ascii"))) == 32
    except (ValueError, UnicodeEncodeError, KeyError, struct.error):
        return False
