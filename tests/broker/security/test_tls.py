"""TLS listeners: the principal taken from a real client certificate (with
``ssl.principal.mapping.rules``), and start-up failing closed on a bad TLS / SASL / listener
configuration, before the data directory is touched."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from strom.broker.security.listeners import Listener, SecurityProtocol
from strom.broker.security.principal import ANONYMOUS, NoMatchingRule, PrincipalMapper
from strom.broker.security.tls import server_context
from strom.broker.server import BrokerServer, BrokerStartupError
from strom.common.config import BrokerConfig
from tests.broker.security.certs import CLIENT_PRINCIPAL, KEY_PASSWORD, Certs

SSL_LISTENER = Listener("SSL", SecurityProtocol.SSL, "127.0.0.1", 0)


def _tls_config(certs: Certs, **extra: str) -> BrokerConfig:
    return BrokerConfig({"ssl.keystore.location": str(certs.broker_keystore),
                         "ssl.key.password": KEY_PASSWORD,
                         "ssl.truststore.location": str(certs.ca),
                         "ssl.client.auth": "requested", **extra})


def _peercert(certs: Certs, client_cert: Path | None, client_key: Path | None,
              config: BrokerConfig) -> dict[str, Any] | None:
    """The client certificate as the broker's transport reports it after a real handshake."""
    server_ctx = server_context(config, SSL_LISTENER)
    seen: list[Any] = []

    class Capture(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            seen.append(transport.get_extra_info("peercert"))

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Capture, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        client_ctx = ssl.create_default_context(cafile=str(certs.ca))
        if client_cert is not None:
            client_ctx.load_cert_chain(str(client_cert), str(client_key))
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()

    asyncio.run(run())
    return seen[0]


def test_principal_is_the_certificate_subject(certs: Certs) -> None:
    config = _tls_config(certs)
    peercert = _peercert(certs, certs.client_cert, certs.client_key, config)
    assert PrincipalMapper("DEFAULT").principal(peercert) == CLIENT_PRINCIPAL
    rules = PrincipalMapper(r"RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U, DEFAULT")
    assert rules.principal(peercert) == "User:ALICE@ENG"
    falls_through = PrincipalMapper(r"RULE:^CN=bob,.*$/bob/, DEFAULT")
    assert falls_through.principal(peercert) == CLIENT_PRINCIPAL
    with pytest.raises(NoMatchingRule):  # Kafka refuses the connection
        PrincipalMapper(r"RULE:^CN=bob,.*$/bob/").principal(peercert)


def test_no_client_certificate_is_anonymous(certs: Certs) -> None:
    peercert = _peercert(certs, None, None, _tls_config(certs))
    assert PrincipalMapper("DEFAULT").principal(peercert) == ANONYMOUS


def _start_fails(tmp_path: Path, values: dict[str, str]) -> str:
    data = tmp_path / "data"
    server = BrokerServer(BrokerConfig({"log.dirs": str(data), **values}))
    with pytest.raises(BrokerStartupError) as caught:
        asyncio.run(server.start())
    assert not data.exists()  # refused before any disk work
    return str(caught.value)


def _ssl_values(certs: Certs, **extra: str) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "SSL:SSL,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.location": str(certs.broker_keystore),
            "ssl.key.password": KEY_PASSWORD, **extra}


@pytest.mark.parametrize(("change", "message"), [
    ({"ssl.keystore.location": "/nonexistent/ks.pem"},
     "TLS listener SSL: ssl.keystore.location /nonexistent/ks.pem: no such file"),
    ({"ssl.key.password": "wrong"}, "or ssl.key.password is wrong"),
    ({"ssl.keystore.location": "GARBAGE"}, "is not a usable PEM private key"),
    ({"ssl.client.auth": "required"}, "ssl.client.auth=required needs ssl.truststore.location"),
    ({"ssl.truststore.location": "GARBAGE"}, "is not a PEM bundle of CA certificates"),
    ({"ssl.keystore.location": ""}, "ssl.keystore.location is not set"),
])
def test_misconfigured_tls_stops_the_broker(tmp_path: Path, certs: Certs,
                                            change: dict[str, str], message: str) -> None:
    change = {k: str(certs.garbage) if v == "GARBAGE" else v for k, v in change.items()}
    assert message in _start_fails(tmp_path, _ssl_values(certs, **change))


@pytest.mark.parametrize(("values", "message"), [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
      "sasl.enabled.mechanisms": "PLAIN"},
     "SASL listener SASL_PLAINTEXT enables PLAIN but has no users"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
      "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "Foo required a=b"},
     "expected '<LoginModule class> required"),
    ({"listeners": "FOO://127.0.0.1:0"}, "no security protocol for listener FOO"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "SSL://h:1"},
     "advertised.listeners: SSL is not a listener"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9,SSL://127.0.0.1:9"},
     "each listener needs its own port"),
])
def test_bad_listener_or_sasl_configuration_stops_the_broker(
        tmp_path: Path, values: dict[str, str], message: str) -> None:
    assert message in _start_fails(tmp_path, values)


def test_advertised_listener_is_what_metadata_returns(tmp_path: Path) -> None:
    from strom.protocol.versions import ApiKey
    from tests.broker.raw import RawClient

    async def run() -> list[tuple[str, int]]:
        server = BrokerServer(BrokerConfig({
            "log.dirs": str(tmp_path / "d"),
            "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "advertised.listeners": "EXTERNAL://broker.example.com:19092"}))
        await server.start()
        try:
            host, port = server.bound["EXTERNAL"]
            client = RawClient(f"{host}:{port}")
            response = await asyncio.to_thread(client.call, ApiKey.METADATA, 12,
                                               {"topics": []})
            client.close()
            return [(b.host, b.port) for b in response.brokers]
        finally:
            await server.stop()

    assert asyncio.run(run()) == [("broker.example.com", 19092)]
