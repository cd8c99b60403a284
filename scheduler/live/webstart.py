"""Starting the web view from the scheduler's flags: one place that turns `--http`,
`--http-key`, `--http-key-always` and `--http-insecure` into a running WebView, or one logged
line saying why not."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def check_args(parser: Any, args: Any) -> None:
    """Refuse at parse time (exit 2, one line) what start_webview would refuse anyway, so a
    typo is not found only after the broker is up."""
    if not getattr(args, "http", None):
        if args.http_key or args.http_insecure or args.http_key_always:
            parser.error("--http-key, --http-key-always and --http-insecure need --http "
                         "HOST:PORT")
        return
    if args.http_key_always and args.http_key is None:
        parser.error("--http-key-always needs --http-key FILE")
    from broker.curve import InsecureBind, check_bind
    from scheduler.live.webview import parse_address

    try:
        host, _ = parse_address(args.http)
        check_bind(host, args.http_key is not None, args.http_insecure)
    except (ValueError, InsecureBind) as err:
        parser.error(f"--http: {err}")


def start_webview(args: Any, state: Any, log: Any) -> Any:
    """The started WebView; None when --http was not given; False (logged) when it cannot be
    served as asked (bad address, unreadable key, a non-loopback bind without key or
    --http-insecure, a port in use)."""
    if not getattr(args, "http", None):
        return None
    from broker.curve import InsecureBind
    from scheduler.live.webview import WebView, parse_address

    try:
        host, port = parse_address(args.http)
        key = Path(args.http_key).read_text().strip() if args.http_key else None
        if key == "":
            raise ValueError(f"{args.http_key}: the key file is empty")
        return WebView(state, host, port, key=key, insecure=args.http_insecure,
                       key_always=args.http_key_always, log=log).start()
    except (ValueError, InsecureBind, OSError) as err:
        log.error("http_refused", address=args.http, detail=str(err))
        return False
