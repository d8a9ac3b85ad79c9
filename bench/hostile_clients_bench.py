"""What hostile clients cost well-behaved ones: request memory held by partial frames, failed
SASL logins, connection floods — against one real strom broker process.

``PYTHONPATH=src python bench/hostile_clients_bench.py memory|logins|connections [...]``;
``--source DIR`` runs the broker from another source tree (e.g. main's ``src``) to compare
before and after with the same clients. Results are kept in docs/benchmarks.md.

* ``memory``: ``queued.max.request.bytes`` (``--bound-mib``, 32) is filled again and again by
  an attacker keeping ``--attackers`` connections (12) that each send ``--partial-mib`` (4)
  of an ``--announced-mib`` (16) frame and stall (a connection the broker closes is reopened
  at once); meanwhile a confluent-kafka producer sends one record every 20 ms. Printed: the
  longest time a record waited for its acknowledgement (the outage), the time spent with a
  record unacknowledged for more than 1 s, the latency distribution, records acknowledged,
  and how often the attacker had to reopen a connection the broker closed.
* ``logins``: a SASL_PLAINTEXT listener with PLAIN; ``--connections`` (200) clients try wrong
  passwords for ``--seconds`` (10), each reconnecting after every failure, half against one
  existing user (``alice``), half from a second address (``127.0.0.2``) against random names;
  meanwhile ``bob`` logs in correctly every 100 ms from a third address. Printed: attempts
  answered per second, passwords actually checked per second (answers other than a back-off
  refusal), bob's login latency and failures, and the broker's CPU µs per login.
* ``connections``: ``--connections`` (2000) connections opened as fast as one thread can
  (then closed), with ``max.connection.creation.rate`` (``--rate``) or an ``ips`` quota
  (``--ip-rate``); printed: connections accepted per second (answered an ApiVersions) and
  the broker's CPU µs per connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strom.testing import EmbeddedBroker

MiB = 1024 * 1024
#: ``--broker-config k=v`` values, added to every scenario's broker config.
EXTRA_CONFIG: dict[str, str] = {}


@contextmanager
def broker(config: Mapping[str, object], source: str | None) -> Iterator[EmbeddedBroker]:
    """A broker process, from ``source`` (a ``src`` directory) when given."""
    config = {**config, **EXTRA_CONFIG}
    saved = os.environ.get("PYTHONPATH")
    if source is not None:
        os.environ["PYTHONPATH"] = str(Path(source).resolve())
    try:
        with EmbeddedBroker(config) as running:
            yield running
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def cpu_s(b: EmbeddedBroker) -> float:
    """CPU seconds (user + system) the broker process has used."""
    assert b.pid is not None
    fields = Path(f"/proc/{b.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


# -- memory ---------------------------------------------------------------------------------

def partial_frame(host: str, port: int, announced: int, payload: int) -> socket.socket:
    """A connection that announces a frame and sends ``payload`` bytes of it (as many as the
    broker takes within a second), then stalls."""
    sock = socket.create_connection((host, port))
    sock.sendall(struct.pack(">i", announced))
    sock.settimeout(1.0)
    data = memoryview(b"\x00" * payload)
    try:
        while data:
            data = data[sock.send(data):]
    except (TimeoutError, OSError):
        pass
    sock.setblocking(False)
    return sock


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def run_memory(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    config = {"queued.max.request.bytes": args.bound_mib * MiB,
              "connections.max.idle.ms": args.idle_ms}  # the others: Kafka's defaults
    with broker(config, args.source) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": 1,
                             "message.timeout.ms": 120000})
        producer.produce("victim", b"warm-up")
        producer.flush(30)
        stop = threading.Event()
        reopened = [0]

        def attack() -> None:
            socks = [partial_frame(b.host, b.port, args.announced_mib * MiB,
                                   args.partial_mib * MiB) for _ in range(args.attackers)]
            while not stop.is_set():
                for i, sock in enumerate(socks):
                    if closed(sock):
                        sock.close()
                        reopened[0] += 1
                        socks[i] = partial_frame(b.host, b.port, args.announced_mib * MiB,
                                                 args.partial_mib * MiB)
                time.sleep(0.05)
            for sock in socks:
                sock.close()

        latencies: list[float] = []
        pending: dict[int, float] = {}
        late_s = 0.0

        def delivered(err: object, msg: object) -> None:
            sent = pending.pop(int(msg.value()), None)  # type: ignore[attr-defined]
            if sent is not None and err is None:
                latencies.append(time.monotonic() - sent)

        attacker = threading.Thread(target=attack, daemon=True)
        started = time.monotonic()
        attacker.start()
        i = 0
        last = started
        while time.monotonic() - started < args.seconds:
            now = time.monotonic()
            if pending and now - min(pending.values()) > 1.0:
                late_s += now - last
            last = now
            pending[i] = now
            producer.produce("victim", str(i).encode(), on_delivery=delivered)
            i += 1
            producer.poll(0.02)
        stop.set()
        attacker.join()
        producer.flush(120)
        outage = max(latencies) if latencies else float("nan")
        print(f"| {args.label} | {args.bound_mib} MiB | {args.attackers} x {args.partial_mib} MiB"
              f" | {outage:.2f} | {late_s:.1f} | {percentile(latencies, 0.5) * 1000:.1f} | "
              f"{percentile(latencies, 0.99) * 1000:.0f} | {len(latencies)}/{i} | "
              f"{reopened[0]} |")


# -- logins ---------------------------------------------------------------------------------

def sasl_plain_attempt(host: str, port: int, user: str, password: str,
                       source: str = "127.0.0.1") -> tuple[int, str]:
    """One PLAIN login on a fresh connection (SaslHandshake v1 + SaslAuthenticate v2):
    (error code, error message)."""
    from strom.protocol import api
    from strom.protocol.versions import ApiKey

    sock = socket.create_connection((host, port), timeout=30, source_address=(source, 0))
    try:
        def call(key: int, version: int, fields: dict[str, object], flexible: bool) -> object:
            header = struct.pack(">hhi", key, version, 1) + struct.pack(">h", 5) + b"bench"
            if flexible:
                header += b"\x00"
            payload = header + api.request(key, version, fields)
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", _read(sock, 4))[0]
            frame = _read(sock, size)
            return api.decode_response(key, version, frame[5 if flexible else 4:])

        call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, False)
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        answer = call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}, True)
        return answer.error_code, answer.error_message or ""  # type: ignore[attr-defined]
    finally:
        sock.close()


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


async def async_plain_attempt(host: str, port: int, user: str, password: str,
                              source: str) -> tuple[int, str]:
    """:func:`sasl_plain_attempt` on asyncio streams (the attackers: 200 at once)."""
    from strom.protocol import api
    from strom.protocol.versions import ApiKey

    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    try:
        async def call(key: int, version: int, fields: dict[str, object],
                       flexible: bool) -> object:
            header = struct.pack(">hhi", key, version, 1) + struct.pack(">h", 5) + b"bench"
            if flexible:
                header += b"\x00"
            payload = header + api.request(key, version, fields)
            writer.write(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
            return api.decode_response(key, version, frame[5 if flexible else 4:])

        await call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, False)
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        answer = await call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}, True)
        return answer.error_code, answer.error_message or ""  # type: ignore[attr-defined]
    finally:
        writer.close()


def run_logins(args: argparse.Namespace) -> None:
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret" user_bob="bob-secret";')
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
              "listener.security.protocol.map":
                  "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
              "inter.broker.listener.name": "PLAINTEXT",
              "sasl.enabled.mechanisms": "PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}
    with broker(config, args.source) as b:
        host, port = b.listeners["SASL_PLAINTEXT"]
        stop = threading.Event()
        counts = {"answered": 0, "checked": 0, "errors": 0}

        async def guesser(n: int) -> None:
            rng = random.Random(n)
            source = "127.0.0.1" if n % 2 == 0 else "127.0.0.2"
            while not stop.is_set():
                user = "alice" if n % 2 == 0 else f"user{rng.randrange(10**9)}"
                try:
                    code, message = await async_plain_attempt(
                        host, port, user, f"guess{rng.randrange(10**9)}", source)
                except (OSError, asyncio.IncompleteReadError):
                    counts["errors"] += 1
                    await asyncio.sleep(0.01)
                    continue
                counts["answered"] += 1
                if code and "Invalid username or password" in message:
                    counts["checked"] += 1

        async def attack() -> None:
            await asyncio.gather(*(guesser(n) for n in range(args.connections)))

        attacker = threading.Thread(target=asyncio.run, args=(attack(),), daemon=True)
        bob: list[float] = []
        bob_failed = [0]

        def legit() -> None:
            while not stop.is_set():
                started = time.monotonic()
                code, _ = sasl_plain_attempt(host, port, "bob", "bob-secret", "127.0.0.3")
                if code:
                    bob_failed[0] += 1
                else:
                    bob.append(time.monotonic() - started)
                time.sleep(0.1)

        legit_thread = threading.Thread(target=legit, daemon=True)
        cpu = cpu_s(b)
        started = time.monotonic()
        attacker.start()
        legit_thread.start()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - started
        cpu = cpu_s(b) - cpu
        answered, checked = counts["answered"], counts["checked"]
        stop.set()
        attacker.join(30)
        legit_thread.join(30)
        print(f"| {args.label} | {args.connections} | {answered / elapsed:,.0f} | "
              f"{checked / elapsed:,.1f} | {checked} | "
              f"{percentile(bob, 0.5) * 1000:.1f} / {percentile(bob, 0.99) * 1000:.0f} / "
              f"{max(bob, default=0) * 1000:.0f} | {bob_failed[0]} | "
              f"{cpu / max(1, answered + len(bob)) * 1e6:,.0f} |")


# -- connections ----------------------------------------------------------------------------

def api_versions(host: str, port: int) -> bool:
    """Connect, send ApiVersions v0, read the answer; False when the broker closed it."""
    try:
        with socket.create_connection((host, port), timeout=10) as sock:
            header = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 5) + b"bench"
            sock.sendall(struct.pack(">i", len(header)) + header)
            size = struct.unpack(">i", _read(sock, 4))[0]
            _read(sock, size)
            return True
    except (OSError, ConnectionError, struct.error):
        return False


def run_connections(args: argparse.Namespace) -> None:
    config: dict[str, object] = {}
    if args.rate:
        config["max.connection.creation.rate"] = args.rate
    with broker(config, args.source) as b:
        if args.ip_rate:
            from strom.client.quota_admin import QuotaAlteration
            from strom.client.sync import SyncAdminClient
            with SyncAdminClient(b.bootstrap) as admin:
                admin.alter_client_quotas([QuotaAlteration(
                    {"ip": "127.0.0.1"}, {"connection_creation_rate": float(args.ip_rate)})])
            time.sleep(0.5)
        ok = refused = 0
        cpu = cpu_s(b)
        started = time.monotonic()
        for _ in range(args.connections):
            if api_versions(b.host, b.port):
                ok += 1
            else:
                refused += 1
        elapsed = time.monotonic() - started
        cpu = cpu_s(b) - cpu
        print(f"| {args.label} | {args.rate or '-'} | {args.ip_rate or '-'} | "
              f"{ok / elapsed:,.0f} | {ok} | {refused} | {elapsed:.1f} | "
              f"{cpu / args.connections * 1e6:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=["memory", "logins", "connections"])
    parser.add_argument("--source", help="run the broker from this src directory")
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--broker-config", action="append", default=[], metavar="K=V",
                        help="another broker config; repeatable")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bound-mib", type=int, default=32)
    parser.add_argument("--attackers", type=int, default=12)
    parser.add_argument("--partial-mib", type=int, default=4)
    parser.add_argument("--announced-mib", type=int, default=16)
    parser.add_argument("--idle-ms", type=int, default=600000)
    parser.add_argument("--connections", type=int, default=None)
    parser.add_argument("--rate", type=int, default=0)
    parser.add_argument("--ip-rate", type=int, default=0)
    args = parser.parse_args()
    EXTRA_CONFIG.update(item.split("=", 1) for item in args.broker_config)
    runs: dict[str, Callable[[argparse.Namespace], None]] = {
        "memory": run_memory, "logins": run_logins, "connections": run_connections}
    if args.connections is None:
        args.connections = 200 if args.scenario == "logins" else 2000
    runs[args.scenario](args)


if __name__ == "__main__":
    main()
