"""How a client connects: TLS and SASL settings (Kafka's client keys, librdkafka's and Java's
names for the same files).

:class:`ClientSecurity` is immutable and shared by every connection of a client. Kafka
properties map as follows (PEM files only; JKS / PKCS12 stores must be converted, as for the
broker):

=================================  =========================================================
``security.protocol``              PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
``ssl.ca.location``                CA certificates (PEM) the broker's certificate is checked
 / ``ssl.truststore.location``     against; unset: the system's default CAs
``ssl.certificate.location``       client certificate (PEM) for mutual TLS
``ssl.key.location``               its private key (PEM)
 / ``ssl.keystore.location``       (Java: one PEM with key and certificate chain)
``ssl.key.password``               password of an encrypted key
 / ``ssl.keystore.password``
``ssl.endpoint.identification``    ``https`` (default): the broker's certificate must name
``.algorithm``                     the host connected to; empty / ``none``: not checked
``sasl.mechanism``                 PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER
``sasl.username`` /                the user and password (PLAIN, SCRAM); or Java's
``sasl.password``                  ``sasl.jaas.config`` with ``username="…" password="…"``
=================================  =========================================================

An OAUTHBEARER token comes from ``oauth_token``, a callable (plain or async) returning the
token, called for each new connection (the Python API only).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from strom.client.records import ClientConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
TokenSource = Callable[[], str | Awaitable[str]]

#: The Kafka property keys :meth:`ClientSecurity.from_properties` honours.
PROPERTY_KEYS = (
    "security.protocol", "ssl.ca.location", "ssl.truststore.location",
    "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
    "ssl.key.password", "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
    "ssl.truststore.type", "ssl.keystore.type", "sasl.mechanism", "sasl.username",
    "sasl.password", "sasl.jaas.config",
)
_JAAS_OPTION = re.compile(r'(username|password)\s*=\s*"((?:\\.|[^"\\])*)"')


@dataclass(frozen=True)
class ClientSecurity:
    """TLS and SASL settings of one client; ``ssl_context`` is set for SSL / SASL_SSL."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    oauth_token: TokenSource | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ClientConfigError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, "
                                    f"got {self.protocol!r}")
        uses_tls, uses_sasl = self.protocol.endswith("SSL"), self.protocol.startswith("SASL")
        if uses_tls and self.ssl_context is None:
            raise ClientConfigError(f"security.protocol={self.protocol} needs an SSL context")
        if not uses_sasl:
            return
        if self.sasl_mechanism not in MECHANISMS:
            raise ClientConfigError(f"sasl.mechanism must be one of {', '.join(MECHANISMS)}, "
                                    f"got {self.sasl_mechanism!r}")
        if self.sasl_mechanism == "OAUTHBEARER":
            if self.oauth_token is None:
                raise ClientConfigError("sasl.mechanism=OAUTHBEARER needs oauth_token (a "
                                        "callable returning the token)")
        elif not self.username or self.password is None:
            raise ClientConfigError(f"sasl.mechanism={self.sasl_mechanism} needs "
                                    "sasl.username and sasl.password")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str],
                        oauth_token: TokenSource | None = None) -> ClientSecurity:
        """From Kafka client properties (keys in :data:`PROPERTY_KEYS`)."""
        props = {k: v.strip() for k, v in properties.items()}
        unknown = sorted(set(props) - set(PROPERTY_KEYS))
        if unknown:
            raise ClientConfigError(f"unsupported security properties {', '.join(unknown)}; "
                                    f"supported: {', '.join(PROPERTY_KEYS)}")
        for kind in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(kind, "PEM").upper() != "PEM":
                raise ClientConfigError(f"{kind}={props[kind]}: only PEM files are read")
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        context = None
        if protocol.endswith("SSL"):
            context = client_context(
                ca=props.get("ssl.ca.location") or props.get("ssl.truststore.location"),
                certificate=props.get("ssl.certificate.location"),
                key=props.get("ssl.key.location") or props.get("ssl.keystore.location"),
                password=props.get("ssl.key.password") or props.get("ssl.keystore.password"),
                check_hostname=props.get("ssl.endpoint.identification.algorithm", "https")
                .lower() not in ("", "none"))
        username, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas and username is None:
            options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}
            username, password = options.get("username"), options.get("password")
        mechanism = props.get("sasl.mechanism", "GSSAPI" if protocol.startswith("SASL")
                              else None)
        return cls(protocol, context, mechanism and mechanism.upper(), username, password,
                   oauth_token)


def client_context(*, ca: str | None = None, certificate: str | None = None,
                   key: str | None = None, password: str | None = None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A TLS client context from PEM files; ClientConfigError naming the file on a problem.
    ``key`` alone may hold both the key and the certificate chain (Java's PEM keystore)."""
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ClientConfigError(f"ssl.ca.location {ca}: not a readable PEM bundle of CA "
                                f"certificates ({exc})") from None
    context.check_hostname = check_hostname
    if certificate or key:
        try:
            context.load_cert_chain(certificate or str(key), key if certificate else None,
                                    password)
        except (OSError, ssl.SSLError) as exc:
            raise ClientConfigError(
                f"ssl.certificate.location {certificate} / ssl.key.location {key}: not a "
                f"usable PEM certificate and key, or a wrong ssl.key.password ({exc})"
            ) from None
    return context
