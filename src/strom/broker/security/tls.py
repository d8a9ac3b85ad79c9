"""TLS listeners through Python's ``ssl`` module, configured with Kafka's keys.

Kafka's PEM keystores map directly: ``ssl.keystore.location`` is one PEM file holding the
private key and the certificate chain (``ssl.keystore.type=PEM``), ``ssl.key.password``
(else ``ssl.keystore.password``) decrypts an encrypted key, ``ssl.truststore.location`` is a
PEM bundle of CA certificates. JKS and PKCS12 stores are not read; convert them once with
``keytool -importkeystore -deststoretype PKCS12`` then ``openssl pkcs12 -nodes`` (see the
broker README).

A listener's context is built at start-up and fails closed: a missing or unreadable file, a
key that does not match its certificate, a wrong password or a missing trust store where
client certificates are checked raise :class:`TlsConfigError` naming the listener and the key,
and the broker does not start — it never falls back to plaintext.
"""

from __future__ import annotations

import ssl

from strom.broker.security.listeners import Listener
from strom.common.config import BrokerConfig
from strom.common.errors import StromError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


class TlsConfigError(StromError):
    """A TLS listener cannot be set up; the broker must not start."""


def server_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The server-side SSL context of ``listener`` (SSL or SASL_SSL)."""
    name = listener.name

    def get(key: str) -> object:
        return config.for_listener(name, key)

    def fail(what: str) -> TlsConfigError:
        return TlsConfigError(f"TLS listener {name}: {what}")

    keystore = get("ssl.keystore.location")
    if not keystore:
        raise fail("ssl.keystore.location is not set (a PEM file with the broker's private "
                   "key and certificate chain)")
    password = get("ssl.key.password") or get("ssl.keystore.password")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [str(v) for v in get("ssl.enabled.protocols") or ()]  # type: ignore[attr-defined]
    if not enabled:
        raise fail("ssl.enabled.protocols is empty")
    versions = sorted(_VERSIONS[v] for v in enabled)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))  # type: ignore[arg-type]
        except ssl.SSLError as exc:
            raise fail(f"ssl.cipher.suites: {exc.reason or exc}") from None
    try:
        context.load_cert_chain(str(keystore), password=None if password is None
                                else str(password))
    except FileNotFoundError:
        raise fail(f"ssl.keystore.location {keystore}: no such file") from None
    except ssl.SSLError as exc:  # (an OSError too: caught first)
        raise fail(f"ssl.keystore.location {keystore} is not a usable PEM private key and "
                   f"certificate chain, or ssl.key.password is wrong ({exc.reason or exc})"
                   ) from None
    except OSError as exc:
        raise fail(f"ssl.keystore.location {keystore}: {exc.strerror}") from None
    client_auth = str(get("ssl.client.auth"))
    context.verify_mode = _CLIENT_AUTH[client_auth]
    truststore = get("ssl.truststore.location")
    if truststore:
        try:
            context.load_verify_locations(cafile=str(truststore))
        except FileNotFoundError:
            raise fail(f"ssl.truststore.location {truststore}: no such file") from None
        except (OSError, ssl.SSLError) as exc:
            raise fail(f"ssl.truststore.location {truststore} is not a PEM bundle of CA "
                       f"certificates ({exc})") from None
    elif client_auth != "none":
        raise fail(f"ssl.client.auth={client_auth} needs ssl.truststore.location (the CA "
                   "certificates client certificates are checked against)")
    return context
