"""Certificates reloaded without a restart: a rotated broker certificate is what the next
connection sees (confluent-kafka still verifies it against the CA), and a broken keystore
written over it keeps the last good certificate and is logged."""

from __future__ import annotations

import shutil
import socket
import ssl
import time
from pathlib import Path

from strom.testing import EmbeddedBroker
from tests.broker.security.certs import KEY_PASSWORD, Certs, _signed

SAN = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"


def _served_subject(bootstrap: str, ca: Path) -> str:
    """The common name of the certificate a new TLS connection is served."""
    host, port = bootstrap.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        cert = tls.getpeercert()
    assert cert is not None
    return dict(item[0] for item in cert["subject"])["commonName"]


def _replace(path: Path, text: str) -> None:
    """Write a new keystore the way tools rotate files: a new file renamed over the old."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    tmp.replace(path)


def _rotated_keystore(certs: Certs, directory: Path, name: str) -> str:
    shutil.copy(certs.ca.with_suffix(".key"), directory / "ca.key")
    shutil.copy(certs.ca, directory / "ca.pem")
    _signed(directory, name, f"/CN={name}", "ca", SAN)
    return (directory / f"{name}.key").read_text() + (directory / f"{name}.pem").read_text()


def test_a_rotated_certificate_is_served_to_new_connections(certs: Certs,
                                                            tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    keystore = tmp_path / "keystore.pem"
    shutil.copy(certs.broker_keystore, keystore)
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
              "inter.broker.listener.name": "PLAINTEXT",
              "ssl.keystore.location": str(keystore), "ssl.key.password": KEY_PASSWORD}
    with EmbeddedBroker(config, log_level="INFO") as broker:
        bootstrap = broker.bootstrap_of("SSL")
        assert _served_subject(bootstrap, certs.ca) == "localhost"
        _replace(keystore, _rotated_keystore(certs, tmp_path, "rotated-1"))
        time.sleep(1.1)  # the files are checked at most once a second
        assert _served_subject(bootstrap, certs.ca) == "rotated-1"
        conf = {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca)}
        assert AdminClient(conf).list_topics(timeout=10).brokers

        _replace(keystore, "-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n")
        time.sleep(1.1)
        assert _served_subject(bootstrap, certs.ca) == "rotated-1"
        log = "".join(broker.output)
        assert "certificates reloaded" in log
        assert "keeps its previous certificates" in log
