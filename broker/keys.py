"""CURVE key material for the message plane: `interlace-keys generate DIR`, and loading it.

Why a folder of zmq certificates: they are the format `zmq.auth` reads, so the broker admits
clients by pointing its authenticator at a folder of public keys, and revoking a client is
deleting one file. What `generate` writes under DIR:

    server.key                broker's public certificate (safe to copy anywhere)
    server.key_secret         broker's secret certificate (stays on the broker's host; 0600)
    clients/NAME.key_secret   one per client: copy it only to the host that runs NAME (0600)
    clients/NAME.key          its public half
    authorized/NAME.key       the public keys the broker admits (delete one to revoke NAME);
                              NAME is its connections' User-Id, so each request's
                              caller (broker.messages.Message.caller)

A name is also a role (specs/keyroles.py): only `scheduler` may serve the scheduler and
order agents, only agent-NODE may serve agent.NODE and report for NODE; `--nodes N` makes
those keys for a cluster of N nodes (n0 .. nN-1), so the right names are the easy ones.

Clients never need a copy of the server key: the broker writes its public key into the
endpoints file, and each component takes its own secret certificate with `--client-key FILE`
(or `$INTERLACE_CLIENT_KEY`), so one scheme serves every process.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import zmq
import zmq.auth

from specs.keyroles import SCHEDULER_KEY, agent_key
from specs.limits import MAX_KEYS, MAX_SMALL_FILE_BYTES, file_problem
from specs.options import OneLineParser, number

SERVER = "server"
CLIENTS, AUTHORIZED = "clients", "authorized"
KEY_ENV = "INTERLACE_CLIENT_KEY"  # default for --client-key in every component
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


class KeyFileError(ValueError):
    """A key file or folder is missing or unusable; the message says which and why."""


@dataclass(frozen=True)
class ServerKeys:
    """The broker's key pair (Z85) and the folder of client public keys it admits."""
    public: bytes
    secret: bytes = field(repr=False)
    authorized: Path


@dataclass(frozen=True)
class ClientKeys:
    """One client's key pair (Z85); the secret never appears in a repr or a log."""
    public: bytes
    secret: bytes = field(repr=False)
    source: str = ""


def _check_curve() -> None:
    if not zmq.has("curve"):
        raise KeyFileError("this libzmq was built without CURVE support")


def generate(directory: Path | str, clients: Sequence[str], *, force: bool = False) -> list[str]:
    """Create the server pair (unless present, or `force`) and each missing client pair.

    Returns one line per file set made or kept, for the CLI to print. Existing client keys
    are kept, so the same command adds clients to a running cluster's folder.
    """
    _check_curve()
    bad = [n for n in clients if not _NAME.fullmatch(n) or n == SERVER]
    if bad:
        raise KeyFileError(f"bad client names {bad}: letters, digits, _.- (not 'server')")
    root = Path(directory)
    ours = [] if root.exists() else [root]  # never tighten a folder the user already had
    for sub in (root, root / CLIENTS, root / AUTHORIZED):
        if not sub.exists():
            ours.append(sub)
        sub.mkdir(parents=True, exist_ok=True)
    for sub in dict.fromkeys(ours):
        os.chmod(sub, 0o700)
    lines = []
    if force or not (root / f"{SERVER}.key_secret").exists():
        _pair(root, SERVER)
        lines.append(f"server  {root / (SERVER + '.key_secret')}")
    else:
        lines.append(f"server  {root / (SERVER + '.key_secret')} (kept)")
    for name in dict.fromkeys(clients):  # in order, once each
        secret = root / CLIENTS / f"{name}.key_secret"
        if secret.exists() and not force:
            lines.append(f"client  {secret} (kept)")
        else:
            _pair(root / CLIENTS, name)
            lines.append(f"client  {secret}")
        shutil.copyfile(root / CLIENTS / f"{name}.key", root / AUTHORIZED / f"{name}.key")
    return lines


def is_key_name(name: str) -> bool:
    """A client key's name as `generate` makes them (and the broker stamps on requests)."""
    return bool(_NAME.fullmatch(name))


def authorized_names(folder: Path) -> tuple[dict[bytes, str], list[str]]:
    """The keys `folder` admits, Z85 public key -> NAME of its file (NAME.key), and one line
    per file left out. Left out: a name `generate` would not make (the name travels in frames
    and logs), an unreadable file, and a key filed under two names (whose requests they are
    would be a guess, so neither name admits it). A missing folder admits nobody."""
    if not folder.is_dir():
        return {}, [f"{folder}: no such folder; no client is admitted"]
    names: dict[bytes, str] = {}
    problems: list[str] = []
    shared: set[bytes] = set()
    for path in sorted(folder.glob("*.key")):
        if not is_key_name(path.stem):
            problems.append(f"{path}: {path.stem!r} is not a key name (letters, digits, _.-)")
            continue
        try:
            public, _ = _read(path, "client")
        except (KeyFileError, OSError) as err:  # OSError: removed while being read
            problems.append(str(err))
            continue
        if public in names or public in shared:
            problems.append(f"{path}: the same key as {names.get(public, 'another')!r}; "
                            "neither name is admitted")
            names.pop(public, None)
            shared.add(public)
            continue
        names[public] = path.stem
    return names, problems


def _pair(folder: Path, name: str) -> None:
    public, secret = zmq.auth.create_certificates(folder, name)
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)


def load_server(directory: Path | str) -> ServerKeys:
    """The broker's keys from a folder made by `generate`; KeyFileError naming what is missing."""
    _check_curve()
    root = Path(directory)
    public, secret = _load(root / f"{SERVER}.key_secret", "server")
    authorized = root / AUTHORIZED
    if not authorized.is_dir():
        raise KeyFileError(f"{authorized}: no such folder (run `interlace-keys generate {root}`)")
    if not any(authorized.glob("*.key")):
        raise KeyFileError(f"{authorized}: no client public keys, so no client could connect")
    return ServerKeys(public, secret, authorized)


def load_client(path: Path | str) -> ClientKeys:
    """A client's keys from its secret certificate (clients/NAME.key_secret)."""
    _check_curve()
    public, secret = _load(Path(path), "client")
    return ClientKeys(public, secret, str(path))


def _load(path: Path, what: str) -> tuple[bytes, bytes]:
    public, secret = _read(path, what)
    if not secret:
        raise KeyFileError(f"{what} key {path}: a public certificate; "
                           "the .key_secret file is needed")
    return public, secret


def _read(path: Path, what: str) -> tuple[bytes, bytes | None]:
    """A certificate's (public, secret) keys in Z85; secret None for a public one."""
    problem = file_problem(path)  # a FIFO would block the reader forever
    if problem is None and path.stat().st_size > MAX_SMALL_FILE_BYTES:
        problem = f"larger than {MAX_SMALL_FILE_BYTES} bytes, not a key file"
    if problem is not None:
        raise KeyFileError(f"{what} key {path}: {problem}")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as err:
        raise KeyFileError(f"{what} key {path}: unreadable ({err})") from None
    if not public:
        raise KeyFileError(f"{what} key {path}: no public key in it")
    return public, secret


def _main_generate(args: argparse.Namespace) -> int:
    names = [SCHEDULER_KEY, *(agent_key(f"n{i}") for i in range(args.nodes))] \
        if args.nodes else []
    names += [n.strip() for n in (args.clients or "").split(",") if n.strip()]
    names += [f"client-{i}" for i in range(args.count)]
    try:
        lines = generate(args.dir, names, force=args.force)
    except (KeyFileError, OSError) as err:
        print(f"interlace-keys: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    print(f"start the broker with --keys {args.dir}; give each component its "
          f"{CLIENTS}/NAME.key_secret with --client-key (or ${KEY_ENV}); only "
          f"{SCHEDULER_KEY}.key_secret serves as the scheduler and only "
          f"{agent_key('NODE')}.key_secret as node NODE's agent")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: `interlace-keys generate DIR --nodes 2 --clients alice,ops`."""
    parser = OneLineParser(prog="interlace-keys",
                           description="CURVE keys for the Interlace message plane.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="make the server pair and client pairs in DIR")
    gen.add_argument("dir", metavar="DIR", type=Path)
    gen.add_argument("--clients", default="", metavar="NAMES",
                     help="comma-separated client names, e.g. scheduler,feeder,agent-n0")
    gen.add_argument("--nodes", type=number(0, MAX_KEYS, integer=True), default=0, metavar="N",
                     help="also make the scheduler's key and one agent key per node "
                          "(agent-n0 .. agent-nN-1): only they may serve those roles")
    gen.add_argument("--count", type=number(0, MAX_KEYS, integer=True), default=0, metavar="N",
                     help=f"also make N clients named client-0 .. client-N-1 (at most {MAX_KEYS})")
    gen.add_argument("--force", action="store_true",
                     help="replace existing pairs (every client then needs its new key)")
    return _main_generate(parser.parse_args(argv))


def add_client_key_argument(parser: argparse.ArgumentParser) -> None:
    """The one option every component takes for its CURVE identity."""
    parser.add_argument("--client-key", default=os.environ.get(KEY_ENV) or None, metavar="FILE",
                        help="this component's secret certificate (clients/NAME.key_secret "
                             f"from interlace-keys; default ${KEY_ENV}); needed when the "
                             "broker runs with --keys")


if __name__ == "__main__":
    sys.exit(main())
