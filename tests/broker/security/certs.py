"""Test certificates made at test time with the ``openssl`` command (no key material is
committed): a CA, a broker certificate for 127.0.0.1 / localhost signed by it (its key
encrypted with a password), a client certificate signed by it, and a client certificate
signed by another, untrusted CA."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY_PASSWORD = "broker-key-pw"
CLIENT_SUBJECT = "/C=US/O=Example/OU=eng/CN=alice"
CLIENT_PRINCIPAL = "User:CN=alice,OU=eng,O=Example,C=US"


@dataclass(frozen=True)
class Certs:
    ca: Path  # CA certificate (PEM): the truststore of both sides
    broker_keystore: Path  # encrypted broker key + certificate chain (PEM)
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # signed by an untrusted CA
    rogue_key: Path
    garbage: Path  # not a certificate at all


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(cwd: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}",
             cwd=cwd)


def _signed(cwd: Path, name: str, subject: str, ca: str, extensions: str | None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", subject, cwd=cwd)
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem"]
    if extensions:
        (cwd / f"{name}.ext").write_text(extensions)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=cwd)


def make_certs(directory: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    d = directory
    _ca(d, "ca")
    _ca(d, "rogue-ca")
    _signed(d, "broker", "/CN=localhost", "ca",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("pkey", "-in", "broker.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
             "-out", "broker-enc.key", cwd=d)
    keystore = d / "broker-keystore.pem"
    keystore.write_text((d / "broker-enc.key").read_text() + (d / "broker.pem").read_text())
    _signed(d, "client", CLIENT_SUBJECT, "ca", None)
    _signed(d, "rogue", "/CN=mallory", "rogue-ca", None)
    garbage = d / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n"
                       "-----END CERTIFICATE-----\n")
    return Certs(d / "ca.pem", keystore, d / "client.pem", d / "client.key",
                 d / "rogue.pem", d / "rogue.key", garbage)
