"""Message-plane benchmark: event throughput through the broker against raw pyzmq PUB/SUB,
and request round trips through the broker, all measured in the same run.

Run from the repository root:  python bench/bench_broker.py [--events 100000] [--rounds 3]
                                                            [--requests 2000] [--keyed] [--json]

Why: trainers publish stage timings and agents forward them, so the bus must not be the
bottleneck (target: >= 0.8 of direct PUB/SUB and >= 50,000 events/s); every launch, stop and
finish is a request, so its round trip bounds how fast the scheduler can act on a round.

Each figure is the median of `--rounds` runs; raw and broker runs alternate so background
load hits both alike. Publishers and services run in their own processes (spawned), the
broker is the real `python -m broker.broker` process. `--keyed` adds round trips through a
second broker process running with CURVE keys (made in a temporary folder), the cost of
encryption and of reading each request's authenticated caller.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack  # noqa: E402
import zmq  # noqa: E402

from broker.client import (Publisher, RequestFailed, Requester, Service,  # noqa: E402
                           Subscriber)
from broker.curve import attach_client_key  # noqa: E402
from broker.endpoints import Endpoints  # noqa: E402
from broker.keys import generate  # noqa: E402
from broker.logs import configure_logging  # noqa: E402
from broker.testing import broker_process  # noqa: E402

TOPIC = b"event.timing"
WARM, END = b"event.warm", b"event.end"


def timing_fields(i: int) -> dict:
    return {"job_id": 17, "stages": {"io": 0.012, "cpu": 0.034, "gpu": 0.101, "net": 0.047},
            "iteration_time": 0.194, "iterations": i}


def raw_event(i: int) -> dict:
    """The same ~200-byte map the Publisher class sends, built by hand."""
    return {"type": "event.timing", "v": 1, "id": f"trainer.17-4242-12345678-{i}",
            "sender": "trainer.17", "ts": time.time(), "seq": i, **timing_fields(i)}


# -- publisher processes ------------------------------------------------------------------

def raw_publisher(address: str, bind: bool, n: int, go, done) -> None:
    """msgpack + PUB, nothing else: the baseline (also used through the broker)."""
    sock = zmq.Context().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address) if bind else sock.connect(address)
    while not go.wait(0.01):
        sock.send_multipart([WARM, b"warm"])
    for i in range(1, n + 1):
        sock.send_multipart([TOPIC, msgpack.packb(raw_event(i))])
    while not done.wait(0.01):
        sock.send_multipart([END, b"end"])
    sock.close(0)


def class_publisher(endpoints_json: str, n: int, go, done) -> None:
    """broker.client.Publisher: validation, ids and seq numbers included."""
    configure_logging("bench-publisher", None, "warning")
    pub = Publisher(Endpoints.from_json(endpoints_json), "trainer.17")
    while not go.wait(0.01):
        pub.publish("event.log", record={"warm": True})
    for i in range(1, n + 1):
        pub.publish("event.timing", **timing_fields(i))
    while not done.wait(0.01):
        pub.publish("event.log", record={"end": True})
    pub.close()


# -- subscriber side (this process) -------------------------------------------------------

def measure_raw(sub: zmq.Socket, go, done) -> tuple[float, int]:
    """Events/s from the first measured event to the last; returns (rate, received)."""
    while True:
        topic, _ = sub.recv_multipart()
        if topic == WARM:
            break
    go.set()
    count, first, last = 0, None, None
    while True:
        topic, payload = sub.recv_multipart()
        if topic == TOPIC:
            msgpack.unpackb(payload)
            now = time.perf_counter()
            first = first or now
            last = now
            count += 1
        elif topic == END:
            break
    done.set()
    return (count - 1) / (last - first) if count > 1 else 0.0, count


def measure_class(sub: Subscriber, go, done) -> tuple[float, int]:
    while True:
        msg = sub.recv(30.0)
        if msg is None:
            raise RuntimeError("no event from the publisher")
        if msg.type == "event.log":
            break
    go.set()
    count, first, last = 0, None, None
    while True:
        msg = sub.recv(30.0)
        if msg is None:
            raise RuntimeError("events stopped")
        if msg.type == "event.timing":
            now = time.perf_counter()
            first = first or now
            last = now
            count += 1
        elif msg.type == "event.log" and msg["record"].get("end"):
            break
    done.set()
    return (count - 1) / (last - first) if count > 1 else 0.0, count


def run_raw(ctx, spawn, n: int, via: Endpoints | None) -> tuple[float, int]:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    if via is None:  # direct: SUB binds and PUB connects, the same roles as with a broker
        port = sub.bind_to_random_port("tcp://127.0.0.1")
        address, bind = f"tcp://127.0.0.1:{port}", False
    else:
        sub.connect(via.events_out)
        address, bind = via.events_in, False
    go, done = spawn.Event(), spawn.Event()
    proc = spawn.Process(target=raw_publisher, args=(address, bind, n, go, done))
    proc.start()
    try:
        return measure_raw(sub, go, done)
    finally:
        done.set()
        proc.join(30)
        sub.close(0)


def run_class(spawn, n: int, ep: Endpoints) -> tuple[float, int]:
    sub = Subscriber(ep)
    go, done = spawn.Event(), spawn.Event()
    proc = spawn.Process(target=class_publisher, args=(ep.to_json(), n, go, done))
    proc.start()
    try:
        return measure_class(sub, go, done)
    finally:
        done.set()
        proc.join(30)
        sub.close()


# -- round trips --------------------------------------------------------------------------

def serve_echo(endpoints_json: str, stop, key_file: str | None = None) -> None:
    configure_logging("bench-service", None, "warning")
    svc = Service(attach_client_key(Endpoints.from_json(endpoints_json), key_file), "echo",
                  lambda msg: {"ok": 1})
    while not stop.is_set():
        svc.poll(0.05)
    svc.close()


def serve_raw(address_q, stop) -> None:
    """Direct baseline: a ROUTER answering DEALER requests, msgpack both ways."""
    sock = zmq.Context().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    address_q.put(f"tcp://127.0.0.1:{port}")
    while not stop.is_set():
        if sock.poll(50):
            ident, payload = sock.recv_multipart()
            req = msgpack.unpackb(payload)
            sock.send_multipart([ident, msgpack.packb({"type": "reply", "re": req["id"]})])
    sock.close(0)


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1e3,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3,
            "n": len(ordered)}


def round_trips_broker(spawn, ep: Endpoints, count: int, keys: Path | None = None) -> dict:
    """Sequential round trips; with `keys` (a folder from `generate`) both ends are keyed."""
    stop = spawn.Event()
    service_key = str(keys / "clients" / "service.key_secret") if keys else None
    proc = spawn.Process(target=serve_echo, args=(ep.to_json(), stop, service_key))
    proc.start()
    if keys is not None:
        ep = attach_client_key(ep, str(keys / "clients" / "requester.key_secret"))
    requester = Requester(ep, "bench", timeout=5.0, retries=3)
    try:
        deadline = time.monotonic() + 60
        while True:  # the service process takes a moment to start and register
            try:
                requester.request("echo", "status.query")
                break
            except RequestFailed as err:
                if err.code != "no_service" or time.monotonic() > deadline:
                    raise
                stop.wait(0.05)
        for _ in range(100):  # warm-up
            requester.request("echo", "status.query")
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            requester.request("echo", "status.query")
            samples.append(time.perf_counter() - start)
        return percentiles(samples)
    finally:
        requester.close()
        stop.set()
        proc.join(30)


def round_trips_raw(spawn, count: int) -> dict:
    stop, address_q = spawn.Event(), spawn.Queue()
    proc = spawn.Process(target=serve_raw, args=(address_q, stop))
    proc.start()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address_q.get(timeout=30))
    try:
        samples = []
        for i in range(100 + count):
            start = time.perf_counter()
            sock.send(msgpack.packb({"type": "status.query", "id": f"b-{i}", "v": 1}))
            msgpack.unpackb(sock.recv())
            if i >= 100:
                samples.append(time.perf_counter() - start)
        return percentiles(samples)
    finally:
        sock.close(0)
        stop.set()
        proc.join(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="events per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--keyed", action="store_true",
                        help="also time round trips through a broker running with CURVE keys")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = parser.parse_args(argv)
    configure_logging("bench", None, "warning")
    spawn = mp.get_context("spawn")
    ctx = zmq.Context.instance()
    raw, broker, classes, lost = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp, \
            broker_process(Path(tmp), (0, 0, 0), "--log-level", "warning") as (_proc, ep):
        for _ in range(args.rounds):
            rate, got = run_raw(ctx, spawn, args.events, None)
            raw.append(rate)
            lost.append(args.events - got)
            rate, got = run_raw(ctx, spawn, args.events, ep)
            broker.append(rate)
            lost.append(args.events - got)
            rate, got = run_class(spawn, args.events, ep)
            classes.append(rate)
            lost.append(args.events - got)
        rtt_broker = round_trips_broker(spawn, ep, args.requests)
        rtt_keyed = None
        if args.keyed:
            keys = Path(tmp) / "keys"
            generate(keys, ["requester", "service"])
            with broker_process(Path(tmp) / "keyed", (0, 0, 0), "--log-level", "warning",
                                "--keys", str(keys)) as (_keyed_proc, keyed_ep):
                rtt_keyed = round_trips_broker(spawn, keyed_ep, args.requests, keys)
    rtt_raw = round_trips_raw(spawn, args.requests)
    result = {
        "events_per_run": args.events, "rounds": args.rounds,
        "raw_pubsub_eps": statistics.median(raw),
        "broker_pubsub_eps": statistics.median(broker),
        "broker_ratio": statistics.median(broker) / statistics.median(raw),
        "client_classes_eps": statistics.median(classes),
        "client_classes_ratio": statistics.median(classes) / statistics.median(raw),
        "events_lost": sum(lost),
        "rtt_broker": rtt_broker, "rtt_direct": rtt_raw, "rtt_broker_keyed": rtt_keyed,
        "raw_runs": raw, "broker_runs": broker, "class_runs": classes,
    }
    ok = result["broker_ratio"] >= 0.8 and result["broker_pubsub_eps"] >= 50_000
    result["meets_target"] = ok
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"events, ~200-byte msgpack maps, {args.events:,} per run, median of {args.rounds}")
    print(f"  raw PUB -> SUB (direct)             {result['raw_pubsub_eps']:>10,.0f} /s")
    print(f"  raw PUB -> broker -> SUB            {result['broker_pubsub_eps']:>10,.0f} /s"
          f"   ratio {result['broker_ratio']:.2f}")
    print(f"  Publisher -> broker -> Subscriber   {result['client_classes_eps']:>10,.0f} /s"
          f"   ratio {result['client_classes_ratio']:.2f}  (validation both ends)")
    print(f"  events lost: {result['events_lost']}   runs (k/s): raw "
          + " ".join(f"{r / 1e3:.0f}" for r in raw) + ", broker "
          + " ".join(f"{r / 1e3:.0f}" for r in broker) + ", classes "
          + " ".join(f"{r / 1e3:.0f}" for r in classes))
    print(f"round trips, {args.requests} requests after 100 warm-up")
    for name, key in (("Requester -> broker -> Service", "rtt_broker"),
                      ("the same, CURVE keys", "rtt_broker_keyed"),
                      ("raw DEALER -> ROUTER (direct)", "rtt_direct")):
        r = result[key]
        if r is None:
            continue
        print(f"  {name:<34} median {r['median_ms']:.3f} ms   p99 {r['p99_ms']:.3f} ms")
    print(f"target (broker >= 0.8 x direct and >= 50,000/s): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
