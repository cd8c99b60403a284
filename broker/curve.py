"""CURVE on sockets, and the rule for when the broker may bind without it.

Why here and not in each class: every socket of the message plane must be keyed the same
way, and a half-keyed plane (one component forgetting) fails as a silent hang, not an error.
So the broker keys its sockets with `server_options`, every client socket gets
`client_options(endpoints)`, and a client without a key for a keyed broker is refused at
socket creation with a message saying what to pass.
"""
from __future__ import annotations

import ipaddress
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from broker.endpoints import Endpoints
from broker.keys import KEY_ENV, ServerKeys, authorized_names, load_client

ZAP_DOMAIN = "interlace"


class InsecureBind(ValueError):
    """Binding a non-loopback interface with neither keys nor an explicit --insecure."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keyed: bool, insecure: bool) -> str | None:
    """Raise InsecureBind when `host` may not be bound as asked; else the warning to log
    (None when there is nothing to warn about)."""
    if keyed:
        return None
    if not is_loopback(host) and not insecure:
        raise InsecureBind(
            f"refusing to bind {host}: a non-loopback interface needs CURVE keys "
            "(--keys DIR, made by `interlace-keys generate DIR`), or --insecure for a "
            "trusted lab network")
    if insecure:
        return ("INSECURE: no authentication or encryption on the message plane; anyone who "
                f"can reach {host} can submit jobs and read events")
    return None


class NamedKeys(ThreadAuthenticator):
    """The ZAP handler: admits the keys of an authorized/ folder and names each connection
    after its key's file, so authorized/NAME.key connects with the User-Id NAME.

    Why: pyzmq's default User-Id is the key itself; the broker stamps the User-Id on every
    request it forwards (Message.caller), and a name is what an operator writes in a tenants
    file. Admission and naming read one table, so a key is never admitted without a name.
    """

    def __init__(self, ctx: zmq.Context):
        super().__init__(ctx, log=logging.getLogger("broker.auth"))
        self._names: dict[bytes, str] = {}  # Z85 public key -> name; replaced whole on load

    def load(self, folder: Path) -> list[str]:
        """(Re-)read the admitted keys; one line per file left out (keys.authorized_names).
        The domain is the sockets' ZAP domain: pyzmq falls back to "*" only for sockets that
        set none."""
        names, problems = authorized_names(folder)
        self._names = names  # one assignment: the ZAP thread sees the old table or the new
        self.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=self)
        return problems

    @property
    def admitted(self) -> int:
        return len(self._names)

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's credentials-provider hook: is this Z85 key admitted."""
        return key in self._names

    def curve_user_id(self, client_public_key: bytes) -> str:
        """The admitted key's name. Empty only when the key was revoked between admission and
        this call (the same handshake): the broker refuses requests with no name."""
        return self._names.get(z85.encode(client_public_key), "")


def start_authenticator(ctx: zmq.Context, keys: ServerKeys) -> tuple[NamedKeys, list[str]]:
    """A ZAP handler on `ctx` admitting only the public keys in keys.authorized, and the
    files it left out.

    Must run before any keyed socket binds: without a ZAP handler libzmq lets every CURVE
    client in, whatever its key.
    """
    auth = NamedKeys(ctx)
    auth.start()
    try:
        return auth, auth.load(keys.authorized)
    except BaseException:
        auth.stop()
        raise


def server_options(keys: ServerKeys) -> dict[str, Any]:
    return {"CURVE_SERVER": 1, "CURVE_SECRETKEY": keys.secret, "CURVE_PUBLICKEY": keys.public,
            "ZAP_DOMAIN": ZAP_DOMAIN.encode("ascii")}


def client_options(endpoints: Endpoints) -> dict[str, Any]:
    """Socket options for a client of the broker at `endpoints` (empty when it is unkeyed)."""
    if endpoints.server_key is None:
        if endpoints.client is not None:
            raise ValueError("a client key was given but the broker runs without keys "
                             "(its endpoints file has no server_key)")
        return {}
    if endpoints.client is None:
        raise ValueError("the broker requires CURVE keys: pass --client-key FILE "
                         f"(or set ${KEY_ENV}) with this component's clients/NAME.key_secret")
    return {"curve_serverkey": endpoints.server_key.encode("ascii"),
            "curve_publickey": endpoints.client.public,
            "curve_secretkey": endpoints.client.secret}


def attach_client_key(endpoints: Endpoints, key_file: str | None) -> Endpoints:
    """Endpoints loaded from the broker's file, plus this component's key (when given).

    Checks the pairing up front so a misconfigured component stops at start with a clear
    ValueError rather than retrying a handshake that can never succeed.
    """
    keyed = endpoints.with_client(load_client(key_file)) if key_file else endpoints
    client_options(keyed)
    return keyed


def component_endpoints(who: str, path: str, wait_s: float, key_file: str | None,
                        stop: threading.Event, log: Any) -> Endpoints | None:
    """What a long-running component (scheduler, agent) connects with: the broker's file,
    waited for (the broker may be starting) and paired with this component's key. None
    when it cannot be had: logged as `no_endpoints` and said in one line on stderr."""
    try:
        return attach_client_key(
            Endpoints.wait_load(path, wait_s, stop, on_wait=lambda why: log.info(
                "waiting_for_endpoints", path=path, why=why)), key_file)
    except (OSError, ValueError) as err:
        log.error("no_endpoints", path=path, error=str(err))
        print(f"{who}: {err}", file=sys.stderr)
        return None
