"""Configuration declared once: every key's type, default, validator, scope and doc.

Two scopes exist, as in Kafka: broker keys (``log.retention.ms``, ``num.partitions`` …) and
topic keys (``retention.ms`` …). A topic key names its broker synonym; a topic's effective value
is its own override if set, else the broker's value of the synonym, else the default. The
DescribeConfigs handler, ``strom broker --help`` and the docs are all generated from
:data:`BROKER_KEYS` and :data:`TOPIC_KEYS`.

A broker value comes from four layers, highest first (Kafka's KIP-226): the dynamic config of
this broker, the dynamic cluster-wide default, the static config (file / ``--set``), the
built-in default. Only keys declared ``dynamic`` (the keys Kafka lets change at run time, among
those strom implements) may be set dynamically; :func:`validate_dynamic_broker_configs`
refuses the others with Kafka's INVALID_REQUEST message.

Keys declared ``ignored`` are accepted for compatibility with Kafka 3.x and have no effect in
strom (``message.format.version`` and its relatives: strom only stores record batch v2, never
down-converts); :func:`ignored_config_notes` says why, for the warning callers log or print.

Values are kept as Python values (``int``, ``bool``, ``float``, ``str``, ``list[str]``); on the
wire and in files they are strings, converted by :meth:`ConfigKey.parse` / :meth:`ConfigKey.render`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.common.errors import InvalidConfigError, InvalidRequestError, KafkaError

log = logging.getLogger("strom.config")

ConfigValue = int | float | bool | str | list[str] | None


class ConfigType(enum.IntEnum):
    """DescribeConfigs ``config_type`` codes (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


Validator = Callable[[Any], str | None]  # returns an error message, or None when valid


def at_least(low: float) -> Validator:
    return lambda v: None if v is None or v >= low else f"must be at least {low}"


def minus_one_or_at_least(low: float) -> Validator:
    """-1 (Kafka's "no limit") or at least ``low``."""
    return lambda v: None if v is None or v == -1 or v >= low else f"must be -1 or at least {low}"


def between(low: float, high: float) -> Validator:
    return lambda v: None if v is None or low <= v <= high else f"must be in [{low}, {high}]"


def throttled_replicas(v: Any) -> str | None:
    """Kafka's ``*.replication.throttled.replicas``: ``*`` alone, or ``partition:broker``
    entries (decimal ids)."""
    entries = [str(e).strip() for e in (v or [])]
    if entries == ["*"] or all(p.isdigit() and b.isdigit()
                               for p, _, b in (e.partition(":") for e in entries)):
        return None
    return ("must be the literal '*' or a list of replicas as "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def one_of(*choices: str) -> Validator:
    def check(v: Any) -> str | None:
        values = v if isinstance(v, list) else [v]
        bad = [x for x in values if x not in choices]
        return f"must be one of {', '.join(choices)}" if bad else None

    return check


# Kafka's MetadataVersion releases (3.x accepts these as message.format.version): release ->
# its number of inter-broker protocol sub-versions ("IV0", "IV1", …; 0: none, as in "0.8.2").
_KAFKA_RELEASES = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1,
    "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1,
    "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3,
    "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}


def _host_counts(v: Any) -> str | None:
    """``host:count,…`` (max.connections.per.ip.overrides)."""
    for item in filter(None, (part.strip() for part in str(v or "").split(","))):
        host, _, count = item.rpartition(":")
        if not host or not count.isdigit():
            return f"{item!r} is not host:count"
    return None


def zookeeper_connect_string(v: Any) -> str | None:
    """``host:port[,host:port…][/chroot]`` (zookeeper.connect); None (unset) is valid."""
    if v is None:
        return None
    hosts, slash, chroot = str(v).partition("/")
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        return f"the chroot '/{chroot}' is not a ZooKeeper path such as /kafka"
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            return f"{item.strip()!r} is not host:port (expected host:port[,host:port...][/chroot])"
    return None


def kafka_version(v: Any) -> str | None:
    """A Kafka release as ``message.format.version`` takes it: ``2.8``, ``2.8-IV1``,
    ``0.10.2``, ``0.10.2.1`` (``0.x`` releases keep three parts, later ones two)."""
    if v is None:
        return None
    parts = str(v).split(".")
    release = ".".join(parts[: 3 if str(v).startswith("0.") else 2])
    base, _, sub = release.partition("-IV")
    count = _KAFKA_RELEASES.get(base)
    if count is not None and (not sub or (sub.isdigit() and int(sub) < count)):
        return None
    return f"Version {v} is not a valid version"


_INT_RANGES = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key. ``synonym`` links a topic key to its broker key; ``dynamic``
    broker keys may be changed at run time; ``ignored`` says why strom accepts but ignores it."""

    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    validator: Validator | None = None
    synonym: str | None = None
    read_only: bool = False
    sensitive: bool = False
    dynamic: bool = False
    ignored: str | None = None

    def parse(self, raw: object) -> ConfigValue:
        """Convert a string (or typed value) to this key's type; InvalidConfigError if bad."""
        if raw is None:
            value: ConfigValue = None
        else:
            try:
                value = self._convert(raw)
            except (TypeError, ValueError):
                raise InvalidConfigError(
                    f"Invalid value {raw!r} for configuration {self.name}: "
                    f"expected {self.type.name.lower()}"
                ) from None
        if self.validator is not None:
            problem = self.validator(value)
            if problem:
                raise InvalidConfigError(
                    f"Invalid value {raw!r} for configuration {self.name}: {problem}"
                )
        return value

    def _convert(self, raw: object) -> ConfigValue:
        t = self.type
        if t == ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(raw)
            return text == "true"
        if t in _INT_RANGES:
            if isinstance(raw, bool):
                raise ValueError(raw)
            number = int(str(raw).strip()) if not isinstance(raw, int) else raw
            low, high = _INT_RANGES[t]
            if not low <= number <= high:
                raise ValueError(raw)
            return number
        if t == ConfigType.DOUBLE:
            return float(str(raw).strip()) if not isinstance(raw, float) else raw
        if t == ConfigType.LIST:
            if isinstance(raw, list):
                return [str(x) for x in raw]
            text = str(raw).strip()
            return [part.strip() for part in text.split(",") if part.strip()] if text else []
        return str(raw)

    def render(self, value: ConfigValue) -> str | None:
        """The wire / file form of a value."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return ",".join(value)
        return str(value)


#: Kafka's rack-aware replica selector (KIP-392), the one ``replica.selector.class`` strom has.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
#: The values ``replica.selector.class`` accepts: Kafka's class name and a short alias.
REPLICA_SELECTORS = (RACK_AWARE_REPLICA_SELECTOR, "rack-aware")


def _known_replica_selector(value: Any) -> str | None:
    if value is None or value in REPLICA_SELECTORS:
        return None
    return (f"class {value} is not a replica selector strom has (it has "
            f"{RACK_AWARE_REPLICA_SELECTOR}, alias rack-aware)")


def _keys(*keys: ConfigKey) -> dict[str, ConfigKey]:
    return {k.name: k for k in keys}


_DAY_MS = 24 * 60 * 60 * 1000
MAX_LONG = 2**63 - 1

# Why strom ignores the keys Kafka 3.x still accepts (shown in the warning when one is set).
_V2_ONLY = ("strom stores every batch in record format v2 (Kafka 3.0 and later ignore it "
            "too; Kafka 4.0 removes it)")
_NO_DOWNCONVERSION = ("strom never down-converts: clients too old for record format v2 are "
                      "refused (Kafka 4.0 removes it)")
_USE_BEFORE_AFTER = ("deprecated since Kafka 3.6 and not implemented: use "
                     "message.timestamp.before.max.ms and message.timestamp.after.max.ms")

_TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")

#: TLS and SASL keys. Each may also be set for one listener as ``listener.name.<name>.<key>``
#: (and ``sasl.jaas.config`` as ``listener.name.<name>.<mechanism>.sasl.jaas.config``), which
#: wins over the unprefixed key for that listener: :meth:`BrokerConfig.for_listener`.
SECURITY_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("ssl.keystore.location", ConfigType.STRING, None,
              "PEM file with this listener's private key and certificate chain (Kafka's "
              "ssl.keystore.type=PEM). JKS / PKCS12 keystores must be converted: see the "
              "broker README.", read_only=True),
    ConfigKey("ssl.keystore.type", ConfigType.STRING, "PEM",
              "Only PEM is read (strom uses Python's ssl module).", one_of("PEM"),
              read_only=True),
    ConfigKey("ssl.keystore.password", ConfigType.PASSWORD, None,
              "Password of an encrypted private key when ssl.key.password is not set.",
              read_only=True, sensitive=True),
    ConfigKey("ssl.key.password", ConfigType.PASSWORD, None,
              "Password of the encrypted private key in ssl.keystore.location.",
              read_only=True, sensitive=True),
    ConfigKey("ssl.truststore.location", ConfigType.STRING, None,
              "PEM file of the CA certificates client certificates are checked against "
              "(Kafka's ssl.truststore.type=PEM).", read_only=True),
    ConfigKey("ssl.truststore.type", ConfigType.STRING, "PEM",
              "Only PEM is read.", one_of("PEM"), read_only=True),
    ConfigKey("ssl.truststore.password", ConfigType.PASSWORD, None,
              "Not used for PEM trust stores (accepted for Kafka compatibility).",
              read_only=True, sensitive=True),
    ConfigKey("ssl.client.auth", ConfigType.STRING, "none",
              "Client certificates: required (mutual TLS; a client without a trusted "
              "certificate is refused), requested (checked when presented), none.",
              one_of("required", "requested", "none"), read_only=True),
    ConfigKey("ssl.enabled.protocols", ConfigType.LIST, list(_TLS_PROTOCOLS),
              "TLS versions accepted.", one_of(*_TLS_PROTOCOLS), read_only=True),
    ConfigKey("ssl.protocol", ConfigType.STRING, "TLSv1.3",
              "Accepted for Kafka compatibility; ssl.enabled.protocols decides.",
              read_only=True),
    ConfigKey("ssl.cipher.suites", ConfigType.LIST, [],
              "OpenSSL cipher names for TLS 1.2 (empty: OpenSSL's defaults).", read_only=True),
    ConfigKey("ssl.principal.mapping.rules", ConfigType.STRING, "DEFAULT",
              "How a client certificate's subject becomes a principal name: Kafka's rules "
              "(RULE:pattern/replacement/[LU], DEFAULT: the whole RFC 2253 name).",
              read_only=True),
    ConfigKey("ssl.endpoint.identification.algorithm", ConfigType.STRING, "https",
              "https: when this broker connects to the inter-broker listener over TLS, the "
              "other broker's certificate must name the host connected to; empty: not "
              "checked (a broker does not check its clients' host names).",
              read_only=True),
    ConfigKey("sasl.enabled.mechanisms", ConfigType.LIST, ["SCRAM-SHA-256", "SCRAM-SHA-512"],
              "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, "
              "SCRAM-SHA-512, OAUTHBEARER (Kafka's default, GSSAPI, is not implemented).",
              one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"), read_only=True),
    ConfigKey("sasl.jaas.config", ConfigType.PASSWORD, None,
              "JAAS login module configuration; for PLAIN, the users as user_<name>=\"pw\" "
              "options of PlainLoginModule. Usually set per listener and mechanism "
              "(listener.name.<l>.plain.sasl.jaas.config).", read_only=True, sensitive=True),
    ConfigKey("sasl.mechanism.inter.broker.protocol", ConfigType.STRING, "GSSAPI",
              "The SASL mechanism this broker logs in with on a SASL inter-broker listener "
              "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; credentials: the username and password "
              "options of that listener's sasl.jaas.config for the mechanism).",
              read_only=True),
    ConfigKey("connection.failed.authentication.delay.ms", ConfigType.INT, 100,
              "Delay before the answer to a failed authentication (the connection is then "
              "closed), against password guessing.", at_least(0), read_only=True),
    ConfigKey("connections.max.reauth.ms", ConfigType.LONG, 0,
              "SASL sessions last at most this long (KIP-368): the client is told the session "
              "lifetime (the earlier of this and its token's expiry) and must re-authenticate "
              "before it ends, else its next request closes the connection (0: no limit "
              "but the token's expiry). Also per listener and mechanism "
              "(listener.name.<l>.<mechanism>.connections.max.reauth.ms).",
              at_least(0), read_only=True),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", ConfigType.STRING, None,
              "OAUTHBEARER: where the keys that sign tokens are, as a JSON Web Key Set; a "
              "file:// URL (re-read when the file changes). HTTP(S) endpoints are not "
              "fetched by strom.", read_only=True),
    ConfigKey("sasl.oauthbearer.public.keys.location", ConfigType.STRING, None,
              "OAUTHBEARER (strom): a PEM file of public keys or certificates that sign "
              "tokens, instead of or besides a JWKS (re-read when the file changes).",
              read_only=True),
    ConfigKey("sasl.oauthbearer.expected.audience", ConfigType.LIST, [],
              "OAUTHBEARER: a token's aud claim must name one of these (empty: not checked).",
              read_only=True),
    ConfigKey("sasl.oauthbearer.expected.issuer", ConfigType.STRING, None,
              "OAUTHBEARER: a token's iss claim must be this (unset: not checked).",
              read_only=True),
    ConfigKey("sasl.oauthbearer.sub.claim.name", ConfigType.STRING, "sub",
              "OAUTHBEARER: the claim whose value is the principal's name.", read_only=True),
    ConfigKey("sasl.oauthbearer.scope.claim.name", ConfigType.STRING, "scope",
              "OAUTHBEARER: the claim holding the token's scopes.", read_only=True),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", ConfigType.INT, 30,
              "OAUTHBEARER: tolerance for exp, nbf and iat against the broker's clock.",
              at_least(0), read_only=True),
    ConfigKey("sasl.oauthbearer.unsecured.tokens.allowed", ConfigType.BOOLEAN, False,
              "OAUTHBEARER (strom): also accept unsigned tokens (alg none), as Kafka's "
              "OAuthBearerUnsecuredValidatorCallbackHandler does. For development only: "
              "anyone can then claim any principal.", read_only=True),
    ConfigKey("authorizer.class.name", ConfigType.STRING, "",
              "The authorizer: empty (the default) allows everything; acls (or Kafka's "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer / "
              "kafka.security.authorizer.AclAuthorizer) enforces the ACLs stored in the "
              "metadata.", read_only=True),
    ConfigKey("super.users", ConfigType.STRING, "",
              "Principals allowed everything whatever the ACLs, separated by ';' "
              "(User:admin;User:ANONYMOUS).", read_only=True),
    ConfigKey("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, False,
              "With an authorizer, allow an operation on a resource no ACL applies to.",
              read_only=True),
)

BROKER_KEYS: dict[str, ConfigKey] = _keys(
    ConfigKey("node.id", ConfigType.INT, 0, "This broker's id.", at_least(0), read_only=True),
    ConfigKey("broker.id", ConfigType.INT, 0,
              "This broker's id under Kafka's ZooKeeper-era name: a synonym of node.id (set "
              "either; when both are set they must be equal).", at_least(0), read_only=True),
    ConfigKey("zookeeper.connect", ConfigType.STRING, None,
              "ZooKeeper connect string (host:port[,host:port...][/chroot]) of the cluster's "
              "metadata; unset, the broker keeps its metadata in its data directory and needs "
              "no ZooKeeper.", zookeeper_connect_string, read_only=True),
    ConfigKey("zookeeper.session.timeout.ms", ConfigType.INT, 18000,
              "ZooKeeper session timeout: a broker silent this long loses its registration "
              "(and the controllership).", at_least(400), read_only=True),
    ConfigKey("zookeeper.connection.timeout.ms", ConfigType.INT, 18000,
              "How long a ZooKeeper call (and connecting) may take before it fails.",
              at_least(100), read_only=True),
    ConfigKey("controlled.shutdown.enable", ConfigType.BOOLEAN, True,
              "On a clean stop (SIGTERM) in a ZooKeeper cluster, ask the controller to move "
              "this broker's partition leadership elsewhere first.", read_only=True),
    ConfigKey("controlled.shutdown.max.retries", ConfigType.INT, 3,
              "Controlled-shutdown attempts before the broker stops regardless (a clean stop "
              "waits at most max.retries x controller.socket.timeout.ms + (max.retries - 1) "
              "x controlled.shutdown.retry.backoff.ms for them; not at all without a "
              "connected ZooKeeper session).", at_least(1), read_only=True),
    ConfigKey("controlled.shutdown.retry.backoff.ms", ConfigType.LONG, 5000,
              "Wait between controlled-shutdown attempts.", at_least(0), read_only=True),
    ConfigKey("controller.socket.timeout.ms", ConfigType.INT, 30000,
              "How long one controlled-shutdown attempt may take: connecting to the "
              "controller and its answer.", at_least(1), read_only=True),
    ConfigKey("broker.failure.detection.refusals", ConfigType.INT, 3,
              "(strom) In a ZooKeeper cluster, a broker whose inter-broker listener refuses "
              "this many connects in a row (its process is gone: a slow or paused broker "
              "still accepts them) counts as dead at once, without waiting for its ZooKeeper "
              "session to expire: the controller moves its leadership and ISR membership "
              "and removes its registration, and the other brokers depose a dead "
              "controller. 0 turns this off (only session expiry then).", at_least(0),
              read_only=True),
    ConfigKey("broker.failure.detection.interval.ms", ConfigType.INT, 100,
              "(strom) The pause between the connects of broker.failure.detection.refusals.",
              at_least(1), read_only=True),
    ConfigKey("auto.leader.rebalance.enable", ConfigType.BOOLEAN, True,
              "The controller moves leadership back to preferred replicas when a broker's "
              "imbalance exceeds leader.imbalance.per.broker.percentage.", read_only=True),
    ConfigKey("leader.imbalance.check.interval.seconds", ConfigType.LONG, 300,
              "How often the controller checks leader imbalance.", at_least(1),
              read_only=True),
    ConfigKey("leader.imbalance.per.broker.percentage", ConfigType.INT, 10,
              "Share (percent) of a broker's preferred partitions led elsewhere that triggers "
              "a preferred leader election.", at_least(0), read_only=True),
    ConfigKey(
        "listeners", ConfigType.STRING, "PLAINTEXT://127.0.0.1:9092",
        "Where the broker listens: comma-separated NAME://HOST:PORT, one per listener name "
        "(port 0 picks a free one; an empty host listens on every interface). A name's "
        "security protocol comes from listener.security.protocol.map. A bare HOST:PORT is "
        "a PLAINTEXT listener.",
        read_only=True,
    ),
    ConfigKey(
        "advertised.listeners", ConfigType.STRING, None,
        "What clients are told to connect to, per listener name (NAME://HOST:PORT); a "
        "listener not listed advertises its bound address. Metadata answers with the "
        "endpoints of the listener the request came through.",
        read_only=True,
    ),
    ConfigKey(
        "listener.security.protocol.map", ConfigType.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Listener name → security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), as "
        "NAME:PROTOCOL pairs.", read_only=True,
    ),
    ConfigKey(
        "inter.broker.listener.name", ConfigType.STRING, None,
        "The listener brokers use to reach each other (transaction markers); defaults to "
        "the listener named by security.inter.broker.protocol. Any security protocol: the "
        "broker connects with the listener's TLS settings (its keystore as client "
        "certificate) and SASL login (sasl.mechanism.inter.broker.protocol).",
        read_only=True,
    ),
    ConfigKey(
        "security.inter.broker.protocol", ConfigType.STRING, "PLAINTEXT",
        "The security protocol of the inter-broker listener when inter.broker.listener.name "
        "is not set.", one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        read_only=True,
    ),
    *SECURITY_KEYS,
    ConfigKey("log.dirs", ConfigType.STRING, "./strom-data", "The data directory.", read_only=True),
    ConfigKey("num.partitions", ConfigType.INT, 1, "Partitions of auto-created topics.",
              at_least(1)),
    ConfigKey("max.broker.partitions", ConfigType.INT, 100000,
              "The most partition replicas one broker hosts (KIP-578's name; Apache Kafka has "
              "no such bound). A CreateTopics or CreatePartitions (or an auto-creation) that "
              "would place more on some broker is refused for that topic with "
              "POLICY_VIOLATION naming the broker; the internal topics the broker creates "
              "itself are exempt. Independently of it, one request may add at most 10,000 "
              "partitions, as in Kafka.", at_least(1), read_only=True),
    ConfigKey("default.replication.factor", ConfigType.SHORT, 1,
              "Replication factor of auto-created topics.", at_least(1)),
    ConfigKey("auto.create.topics.enable", ConfigType.BOOLEAN, True,
              "Create a missing topic (num.partitions partitions, default.replication.factor "
              "replicas, default configs) when a Metadata request names it and allows "
              "auto-creation (the client's allow.auto.create.topics, on by default for "
              "producers; always for Metadata v0-v3). Produce, Fetch and other requests for a "
              "missing topic create nothing and get UNKNOWN_TOPIC_OR_PARTITION. A name Kafka "
              "refuses (invalid, or colliding with an existing topic once '.' and '_' are "
              "treated alike) gets INVALID_TOPIC_EXCEPTION. __consumer_offsets is created on "
              "first use whatever this says."),
    ConfigKey("delete.topic.enable", ConfigType.BOOLEAN, True, "Allow DeleteTopics."),
    ConfigKey("socket.request.max.bytes", ConfigType.INT, 104857600,
              "The largest request frame accepted; a larger one closes the connection.",
              at_least(1)),
    ConfigKey("queued.max.request.bytes", ConfigType.LONG, 268435456,
              "Bytes of requests being read or processed, across all connections, above which "
              "the broker stops reading new requests until memory frees (-1: no bound, "
              "Kafka's default).", minus_one_or_at_least(1), read_only=True),
    ConfigKey("connections.max.idle.ms", ConfigType.LONG, 600000,
              "Close a connection with no traffic for this long, including one that stopped in "
              "the middle of a request (-1: never).",
              minus_one_or_at_least(1), read_only=True),
    ConfigKey("quota.window.num", ConfigType.INT, 11,
              "Windows a client quota's rate is measured over.", at_least(1), read_only=True),
    ConfigKey("quota.window.size.seconds", ConfigType.INT, 1,
              "The length of one client-quota window.", at_least(1), read_only=True),
    ConfigKey("replication.quota.window.num", ConfigType.INT, 11,
              "Windows a replication throttle's rate is measured over.", at_least(1),
              read_only=True),
    ConfigKey("replication.quota.window.size.seconds", ConfigType.INT, 1,
              "The length of one replication-throttle window.", at_least(1), read_only=True),
    ConfigKey("max.connections", ConfigType.INT, 2147483647,
              "Connections the broker accepts across its listeners; one more is closed at "
              "once (per listener: listener.name.<l>.max.connections).", at_least(0),
              dynamic=True),
    ConfigKey("max.connections.per.ip", ConfigType.INT, 2147483647,
              "Connections accepted from one IP address; one more is closed at once.",
              at_least(0), dynamic=True),
    ConfigKey("max.connections.per.ip.overrides", ConfigType.STRING, "",
              "Per-IP exceptions to max.connections.per.ip: host:count,host:count.",
              _host_counts, dynamic=True),
    ConfigKey("connection.failed.authentication.backoff.budget", ConfigType.INT, 10,
              "Failed SASL PLAIN / SCRAM logins a client address may have for one user (three "
              "times as many for an address across users, and for a user across addresses; "
              "counts decay with a half-life of ten times ...backoff.max.ms) before its logins "
              "are checked at most once per back-off; a login attempted sooner is refused "
              "without its credentials being checked. An address and user that logged in "
              "successfully within a day are exempt until they fail.", at_least(0),
              read_only=True),
    ConfigKey("connection.failed.authentication.backoff.ms", ConfigType.INT, 1000,
              "The first back-off once an address or user has used up "
              "connection.failed.authentication.backoff.budget; it doubles with each further "
              "failure.", at_least(1), read_only=True),
    ConfigKey("connection.failed.authentication.backoff.max.ms", ConfigType.INT, 60000,
              "The longest back-off between credential checks of a failing address or user "
              "(about one check a minute once an attacker has spent the budget); 0 turns the "
              "back-off off (Kafka's behaviour: only connection.failed.authentication.delay.ms).",
              at_least(0), read_only=True),
    ConfigKey("max.connection.creation.rate", ConfigType.INT, 2147483647,
              "New connections the broker accepts per second (measured as client quotas are, "
              "over quota.window.num windows); above it the listener waits before accepting "
              "more, at most one window at a time. Per listener: "
              "listener.name.<l>.max.connection.creation.rate (static; it bounds a listener "
              "on its own, and the inter-broker listener, when it is a listener of its own, "
              "only by it). Per IP address: ip client quotas (connection_creation_rate).",
              at_least(0), dynamic=True),
    ConfigKey("fetch.max.bytes", ConfigType.INT, 57671680,
              "The most bytes one Fetch response returns (the client's own limit may be lower).",
              at_least(1024)),
    ConfigKey("max.incremental.fetch.session.cache.slots", ConfigType.INT, 1000,
              "Incremental fetch sessions (KIP-227) the broker keeps; 0 answers every fetch "
              "without a session.", at_least(0)),
    ConfigKey("min.incremental.fetch.session.eviction.ms", ConfigType.INT, 120000,
              "A fetch session unused this long may be evicted for a new one; a younger one "
              "only by a session with more partitions (or by a follower's).", at_least(0)),
    ConfigKey("message.max.bytes", ConfigType.INT, 1048588,
              "The largest record batch accepted (topic: max.message.bytes).", at_least(0),
              dynamic=True),
    ConfigKey("log.segment.bytes", ConfigType.INT, 1073741824, "Segment size before rolling.",
              at_least(14), dynamic=True),
    ConfigKey("log.roll.ms", ConfigType.LONG, None,
              "Roll a segment after this age (falls back to log.roll.hours).", at_least(1),
              dynamic=True),
    ConfigKey("log.roll.hours", ConfigType.INT, 168, "Roll a segment after this many hours.",
              at_least(1)),
    ConfigKey("log.roll.jitter.ms", ConfigType.LONG, 0, "Random jitter subtracted from roll time.",
              at_least(0), dynamic=True),
    ConfigKey("log.retention.ms", ConfigType.LONG, None,
              "Delete segments older than this (-1: forever; falls back to minutes / hours).",
              at_least(-1), dynamic=True),
    ConfigKey("log.retention.minutes", ConfigType.INT, None, "Retention in minutes.",
              at_least(-1)),
    ConfigKey("log.retention.hours", ConfigType.INT, 168, "Retention in hours.", at_least(-1)),
    ConfigKey("log.retention.bytes", ConfigType.LONG, -1,
              "Delete old segments while a partition is larger than this (-1: no limit).",
              dynamic=True),
    ConfigKey("log.retention.check.interval.ms", ConfigType.LONG, 300000,
              "How often retention runs.", at_least(1)),
    ConfigKey("log.index.interval.bytes", ConfigType.INT, 4096,
              "Bytes between offset-index entries.", at_least(0), dynamic=True),
    ConfigKey("log.index.size.max.bytes", ConfigType.INT, 10485760,
              "Maximum size of an offset index (a full index rolls the segment).", at_least(4),
              dynamic=True),
    ConfigKey("log.flush.interval.messages", ConfigType.LONG, MAX_LONG,
              "fsync after this many records; 1: fsync before acknowledging (group-committed).",
              at_least(1), dynamic=True),
    ConfigKey("log.flush.interval.ms", ConfigType.LONG, None,
              "fsync a partition's log at least this often.", at_least(0), dynamic=True),
    ConfigKey("log.flush.scheduler.interval.ms", ConfigType.LONG, MAX_LONG,
              "How often the time-based flusher checks logs.", at_least(0)),
    ConfigKey("log.segment.delete.delay.ms", ConfigType.LONG, 60000,
              "Delay before deleting a segment file after it left the log.", at_least(0),
              dynamic=True),
    ConfigKey("log.max.open.files", ConfigType.INT, -1,
              "The most segment files (.log) kept open at once; the least recently used idle "
              "ones are closed and reopened on demand, and index files hold no descriptor, so "
              "any number of partitions fits the open-file limit. -1: half of the process's "
              "open-file limit (RLIMIT_NOFILE soft limit, as raised to the hard limit at "
              "start), leaving the rest for connections.",
              lambda v: None if v is None or v == -1 or v >= 4 else "must be -1 or at least 4",
              read_only=True),
    ConfigKey("log.cleanup.policy", ConfigType.LIST, ["delete"], "delete and/or compact.",
              one_of("delete", "compact"), dynamic=True),
    ConfigKey("log.cleaner.enable", ConfigType.BOOLEAN, True,
              "Run the log cleaner (compaction of cleanup.policy=compact topics)."),
    ConfigKey("log.cleaner.backoff.ms", ConfigType.LONG, 15000,
              "How long the cleaner sleeps when no log needs cleaning.", at_least(0), dynamic=True),
    ConfigKey("log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, 1.7976931348623157e308,
              "Cap on the cleaner's read rate (bytes/s).", at_least(1), dynamic=True),
    ConfigKey("log.cleaner.delete.retention.ms", ConfigType.LONG, _DAY_MS,
              "How long tombstones are kept on compacted topics.", at_least(0), dynamic=True),
    ConfigKey("log.cleaner.min.compaction.lag.ms", ConfigType.LONG, 0,
              "Minimum age before a record may be compacted.", at_least(0), dynamic=True),
    ConfigKey("log.cleaner.max.compaction.lag.ms", ConfigType.LONG, MAX_LONG,
              "Maximum age before a record must be compacted.", at_least(1), dynamic=True),
    ConfigKey("log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, 0.5,
              "Dirty ratio that triggers compaction.", between(0, 1), dynamic=True),
    ConfigKey("log.message.timestamp.type", ConfigType.STRING, "CreateTime",
              "CreateTime or LogAppendTime.", one_of("CreateTime", "LogAppendTime"), dynamic=True),
    ConfigKey("log.message.timestamp.before.max.ms", ConfigType.LONG, MAX_LONG,
              "How far in the past a CreateTime timestamp may be.", at_least(0), dynamic=True),
    ConfigKey("log.message.timestamp.after.max.ms", ConfigType.LONG, 3600000,
              "How far in the future a CreateTime timestamp may be.", at_least(0), dynamic=True),
    ConfigKey("log.message.format.version", ConfigType.STRING, "3.0-IV1",
              "Deprecated in Kafka 3.0: accepted and ignored.", kafka_version,
              ignored=_V2_ONLY),
    ConfigKey("log.message.downconversion.enable", ConfigType.BOOLEAN, True,
              "Kafka's down-conversion for old consumers: accepted and ignored.", dynamic=True,
              ignored=_NO_DOWNCONVERSION),
    ConfigKey("log.message.timestamp.difference.max.ms", ConfigType.LONG, MAX_LONG,
              "Deprecated in Kafka 3.6: accepted and ignored.", at_least(0), dynamic=True,
              ignored=_USE_BEFORE_AFTER),
    ConfigKey("log.preallocate", ConfigType.BOOLEAN, False, "Preallocate segment files.",
              dynamic=True),
    ConfigKey("compression.type", ConfigType.STRING, "producer",
              "Compression of stored batches; 'producer' keeps the producer's.",
              one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), dynamic=True),
    ConfigKey("min.insync.replicas", ConfigType.INT, 1,
              "Replicas that must acknowledge an acks=all produce.", at_least(1), dynamic=True),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", ConfigType.LONG, 5000,
              "How often each partition's high watermark is written to "
              "replication-offset-checkpoint.", at_least(1)),
    ConfigKey("replica.lag.time.max.ms", ConfigType.LONG, 30000,
              "A follower that has not caught up with the leader for this long leaves the "
              "ISR.", at_least(1)),
    ConfigKey("replica.fetch.max.bytes", ConfigType.INT, 1048576,
              "Bytes a follower asks for per partition in each fetch.", at_least(0)),
    ConfigKey("replica.fetch.response.max.bytes", ConfigType.INT, 10485760,
              "Bytes a follower asks for per fetch response.", at_least(0)),
    ConfigKey("replica.fetch.wait.max.ms", ConfigType.INT, 500,
              "How long a follower's fetch may wait at the leader for data.", at_least(0)),
    ConfigKey("replica.fetch.min.bytes", ConfigType.INT, 1,
              "Bytes a follower's fetch waits for at the leader.", at_least(1)),
    ConfigKey("replica.fetch.backoff.ms", ConfigType.INT, 1000,
              "Pause of a follower's partition after a fetch error.", at_least(0)),
    ConfigKey("num.replica.fetchers", ConfigType.INT, 1,
              "Fetcher connections per source broker.", at_least(1)),
    ConfigKey("unclean.leader.election.enable", ConfigType.BOOLEAN, False,
              "Allow an out-of-sync replica to become leader.", dynamic=True),
    ConfigKey("group.initial.rebalance.delay.ms", ConfigType.INT, 3000,
              "Delay of the first rebalance of a new group.", at_least(0)),
    ConfigKey("group.min.session.timeout.ms", ConfigType.INT, 6000,
              "The shortest session timeout a group member may ask for.", at_least(0)),
    ConfigKey("group.max.session.timeout.ms", ConfigType.INT, 1800000,
              "The longest session timeout a group member may ask for.", at_least(0)),
    ConfigKey("group.max.size", ConfigType.INT, 2**31 - 1,
              "The most members a consumer group may have.", at_least(1)),
    ConfigKey("group.consumer.session.timeout.ms", ConfigType.INT, 45000,
              "Session timeout of consumer-protocol (KIP-848) group members.", at_least(1)),
    ConfigKey("group.consumer.heartbeat.interval.ms", ConfigType.INT, 5000,
              "Heartbeat interval given to consumer-protocol group members.", at_least(1)),
    ConfigKey("group.consumer.assignors", ConfigType.LIST, ["uniform", "range"],
              "Server-side assignors of consumer-protocol groups, the default first: names "
              "or Kafka's class names of its built-in ones.",
              one_of("uniform", "range", "org.apache.kafka.coordinator.group.assignor."
                     "UniformAssignor", "org.apache.kafka.coordinator.group.assignor."
                     "RangeAssignor"), read_only=True),
    ConfigKey("group.consumer.max.size", ConfigType.INT, 2**31 - 1,
              "The most members a consumer-protocol group may have.", at_least(1)),
    ConfigKey("offsets.topic.num.partitions", ConfigType.INT, 50,
              "Partitions of __consumer_offsets (fixed once the topic exists).", at_least(1),
              read_only=True),
    ConfigKey("offsets.topic.replication.factor", ConfigType.SHORT, 3,
              "Replicas of __consumer_offsets (fewer when fewer brokers are live at its "
              "creation; see strom.controller.internal_topics).", at_least(1),
              read_only=True),
    ConfigKey("offsets.topic.segment.bytes", ConfigType.INT, 104857600,
              "Segment size of __consumer_offsets.", at_least(1), read_only=True),
    ConfigKey("offsets.retention.minutes", ConfigType.INT, 10080,
              "How long committed offsets are kept after a group became empty (or, for "
              "standalone consumers, after the commit).", at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", ConfigType.LONG, 600000,
              "How often expired offsets are removed.", at_least(1)),
    ConfigKey("offset.metadata.max.bytes", ConfigType.INT, 4096,
              "The largest metadata string an offset commit may carry.", at_least(0)),
    ConfigKey("transactional.id.expiration.ms", ConfigType.INT, 604800000,
              "Expiry of idle transactional ids.", at_least(1)),
    ConfigKey("transaction.state.log.num.partitions", ConfigType.INT, 50,
              "Partitions of __transaction_state (fixed once the topic exists).", at_least(1),
              read_only=True),
    ConfigKey("transaction.state.log.replication.factor", ConfigType.SHORT, 3,
              "Replicas of __transaction_state (fewer when fewer brokers are live at its "
              "creation; see strom.controller.internal_topics).", at_least(1),
              read_only=True),
    ConfigKey("transaction.state.log.min.isr", ConfigType.INT, 2,
              "min.insync.replicas of __transaction_state, set on the topic at its creation "
              "(at most its replication factor; see strom.controller.internal_topics).",
              at_least(1), read_only=True),
    ConfigKey("transaction.state.log.segment.bytes", ConfigType.INT, 104857600,
              "Segment size of __transaction_state.", at_least(1), read_only=True),
    ConfigKey("transaction.max.timeout.ms", ConfigType.INT, 900000,
              "The longest transaction.timeout.ms a producer may ask for.", at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", ConfigType.INT,
              10000, "How often transactions past their timeout are aborted.", at_least(1)),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", ConfigType.INT,
              3600000, "How often expired transactional ids are removed.", at_least(1)),
    ConfigKey("producer.id.expiration.ms", ConfigType.INT, _DAY_MS,
              "Expiry of idle idempotent producers' state.", at_least(1), dynamic=True),
    ConfigKey("transaction.partition.verification.enable", ConfigType.BOOLEAN, True,
              "KIP-890: a transactional producer's first batch in a partition (Produce) and "
              "its first offsets in a group's partition (TxnOffsetCommit) are written only "
              "once its transaction coordinator confirms the partition is in its ongoing "
              "transaction, and only if that transaction has not ended since.",
              dynamic=True),
    ConfigKey("leader.replication.throttled.rate", ConfigType.LONG, MAX_LONG,
              "Bytes/s a leader sends to the replicas its topics list in "
              "leader.replication.throttled.replicas.", at_least(0), dynamic=True),
    ConfigKey("follower.replication.throttled.rate", ConfigType.LONG, MAX_LONG,
              "Bytes/s a follower fetches for the replicas its topics list in "
              "follower.replication.throttled.replicas.", at_least(0), dynamic=True),
    ConfigKey("broker.rack", ConfigType.STRING, None, "This broker's rack.", read_only=True),
    ConfigKey("replica.selector.class", ConfigType.CLASS, None,
              "Which replica a consumer (Fetch v11+) is sent to read from (KIP-392): unset, "
              "the leader; " + RACK_AWARE_REPLICA_SELECTOR + " (or rack-aware), an in-sync "
              "replica in the consumer's client.rack.", _known_replica_selector,
              read_only=True),
    ConfigKey("cluster.id", ConfigType.STRING, None,
              "The cluster id (generated and stored in meta.properties when absent).",
              read_only=True),
)

TOPIC_KEYS: dict[str, ConfigKey] = _keys(
    ConfigKey("cleanup.policy", ConfigType.LIST, ["delete"], "delete and/or compact.",
              one_of("delete", "compact"), synonym="log.cleanup.policy"),
    ConfigKey("compression.type", ConfigType.STRING, "producer",
              "Compression of stored batches; 'producer' keeps the producer's.",
              one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
              synonym="compression.type"),
    ConfigKey("delete.retention.ms", ConfigType.LONG, _DAY_MS, "Tombstone retention.",
              at_least(0), synonym="log.cleaner.delete.retention.ms"),
    ConfigKey("file.delete.delay.ms", ConfigType.LONG, 60000, "Delay before deleting a file.",
              at_least(0), synonym="log.segment.delete.delay.ms"),
    ConfigKey("flush.messages", ConfigType.LONG, MAX_LONG,
              "fsync after this many records (1: before acknowledging, group-committed).",
              at_least(1), synonym="log.flush.interval.messages"),
    ConfigKey("flush.ms", ConfigType.LONG, MAX_LONG, "fsync at least this often.", at_least(0),
              synonym="log.flush.interval.ms"),
    ConfigKey("index.interval.bytes", ConfigType.INT, 4096, "Bytes between index entries.",
              at_least(0), synonym="log.index.interval.bytes"),
    ConfigKey("max.compaction.lag.ms", ConfigType.LONG, MAX_LONG, "Max age before compaction.",
              at_least(1), synonym="log.cleaner.max.compaction.lag.ms"),
    ConfigKey("max.message.bytes", ConfigType.INT, 1048588, "Largest record batch accepted.",
              at_least(0), synonym="message.max.bytes"),
    ConfigKey("message.timestamp.type", ConfigType.STRING, "CreateTime",
              "CreateTime or LogAppendTime.", one_of("CreateTime", "LogAppendTime"),
              synonym="log.message.timestamp.type"),
    ConfigKey("message.timestamp.before.max.ms", ConfigType.LONG, MAX_LONG,
              "How far in the past a CreateTime timestamp may be.", at_least(0),
              synonym="log.message.timestamp.before.max.ms"),
    ConfigKey("message.timestamp.after.max.ms", ConfigType.LONG, 3600000,
              "How far in the future a CreateTime timestamp may be.", at_least(0),
              synonym="log.message.timestamp.after.max.ms"),
    ConfigKey("message.format.version", ConfigType.STRING, "3.0-IV1",
              "Deprecated in Kafka 3.0: accepted and ignored.", kafka_version,
              synonym="log.message.format.version", ignored=_V2_ONLY),
    ConfigKey("message.downconversion.enable", ConfigType.BOOLEAN, True,
              "Kafka's down-conversion for old consumers: accepted and ignored.",
              synonym="log.message.downconversion.enable", ignored=_NO_DOWNCONVERSION),
    ConfigKey("message.timestamp.difference.max.ms", ConfigType.LONG, MAX_LONG,
              "Deprecated in Kafka 3.6: accepted and ignored.", at_least(0),
              synonym="log.message.timestamp.difference.max.ms", ignored=_USE_BEFORE_AFTER),
    ConfigKey("min.cleanable.dirty.ratio", ConfigType.DOUBLE, 0.5, "Dirty ratio for compaction.",
              between(0, 1), synonym="log.cleaner.min.cleanable.ratio"),
    ConfigKey("min.compaction.lag.ms", ConfigType.LONG, 0, "Min age before compaction.",
              at_least(0), synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigKey("min.insync.replicas", ConfigType.INT, 1, "Replicas needed for acks=all.",
              at_least(1), synonym="min.insync.replicas"),
    ConfigKey("preallocate", ConfigType.BOOLEAN, False, "Preallocate segment files.",
              synonym="log.preallocate"),
    ConfigKey("retention.bytes", ConfigType.LONG, -1, "Size limit of a partition (-1: none).",
              synonym="log.retention.bytes"),
    ConfigKey("retention.ms", ConfigType.LONG, 7 * _DAY_MS, "Age limit of segments (-1: none).",
              at_least(-1), synonym="log.retention.ms"),
    ConfigKey("segment.bytes", ConfigType.INT, 1073741824, "Segment size before rolling.",
              at_least(14), synonym="log.segment.bytes"),
    ConfigKey("segment.index.bytes", ConfigType.INT, 10485760, "Max offset-index size.",
              at_least(4), synonym="log.index.size.max.bytes"),
    ConfigKey("segment.jitter.ms", ConfigType.LONG, 0, "Roll jitter.", at_least(0),
              synonym="log.roll.jitter.ms"),
    ConfigKey("segment.ms", ConfigType.LONG, 7 * _DAY_MS, "Roll a segment after this age.",
              at_least(1), synonym="log.roll.ms"),
    ConfigKey("unclean.leader.election.enable", ConfigType.BOOLEAN, False,
              "Allow unclean leader election.", synonym="unclean.leader.election.enable"),
    # no broker-level synonym, as in Kafka
    ConfigKey("leader.replication.throttled.replicas", ConfigType.LIST, [],
              "Replicas (partition:broker, or *) throttled on the leader side "
              "(leader.replication.throttled.rate).", throttled_replicas),
    ConfigKey("follower.replication.throttled.replicas", ConfigType.LIST, [],
              "Replicas (partition:broker, or *) throttled on the follower side "
              "(follower.replication.throttled.rate).", throttled_replicas),
)

# Broker keys whose value derives from a coarser unit key when unset.
_UNIT_FALLBACK: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.flush.interval.ms": (("log.flush.scheduler.interval.ms", 1),),
}

# Keys that set the same value in other units (Kafka's broker config synonyms), by precedence.
_SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    **{name: group for group in (("log.retention.ms", "log.retention.minutes",
                                  "log.retention.hours"), ("log.roll.ms", "log.roll.hours"))
       for name in group},
}

# The layers of a broker value, highest precedence first (DEFAULT_CONFIG is the key's default).
BROKER_LAYERS = (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                 ConfigSource.STATIC_BROKER_CONFIG)


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One place a value is set: DescribeConfigs' synonyms, in precedence order."""

    name: str
    value: ConfigValue
    source: ConfigSource


def broker_synonym_names(name: str) -> tuple[str, ...]:
    """The broker keys that set ``name``'s value, by precedence (``name`` alone for most)."""
    return _SYNONYM_GROUPS.get(name, (name,))


LISTENER_PREFIX = "listener.name."
_SECURITY_NAMES = frozenset(k.name for k in SECURITY_KEYS)
_PER_MECHANISM_NAMES = frozenset(
    name for name in _SECURITY_NAMES
    if name == "connections.max.reauth.ms" or name.startswith("sasl.oauthbearer.")
) | {"sasl.jaas.config"}
_PER_LISTENER_LIMITS = frozenset({"max.connections", "max.connection.creation.rate"})


def listener_key(name: str) -> ConfigKey:
    """The key behind a per-listener name: ``listener.name.<listener>.<security key>`` or
    ``listener.name.<listener>.<mechanism>.<key>`` for ``sasl.jaas.config``,
    ``connections.max.reauth.ms`` and ``sasl.oauthbearer.*``; InvalidConfigError otherwise."""
    rest = name[len(LISTENER_PREFIX):].split(".", 1)
    if len(rest) == 2 and rest[0]:
        key = rest[1]
        if key in _SECURITY_NAMES or key in _PER_LISTENER_LIMITS:
            return BROKER_KEYS[key]
        mechanism, _, per_mechanism = key.partition(".")
        if mechanism and per_mechanism in _PER_MECHANISM_NAMES:
            return BROKER_KEYS[per_mechanism]
    raise InvalidConfigError(
        f"Unknown broker configuration key {name!r} (per-listener keys are "
        "listener.name.<listener>.<ssl.* or sasl.* key, max.connections or "
        "max.connection.creation.rate>)")


def _same_broker_id(static: dict[str, ConfigValue]) -> None:
    """``broker.id`` and ``node.id`` name one value (Kafka accepts either): copy the one set
    to the other; InvalidConfigError when both are set to different ids."""
    node_id, broker_id = static.get("node.id"), static.get("broker.id")
    if node_id is not None and broker_id is not None and node_id != broker_id:
        raise InvalidConfigError(
            f"broker.id ({broker_id}) and node.id ({node_id}) must be equal when both are set")
    if node_id is not None or broker_id is not None:
        static["node.id"] = static["broker.id"] = node_id if node_id is not None else broker_id


class BrokerConfig:
    """The broker's configuration: defaults, then the static config (a config file, then
    ``--set`` flags), then the dynamic cluster-wide default, then this broker's dynamic config.

    Immutable: :meth:`with_dynamic` and :meth:`with_overrides` return new objects; lookups by
    key name.
    """

    def __init__(self, values: Mapping[str, object] | None = None, *,
                 _dynamic: Mapping[ConfigSource, dict[str, ConfigValue]] | None = None) -> None:
        static: dict[str, ConfigValue] = {}
        self._per_listener: dict[str, ConfigValue] = {}
        for name, raw in (values or {}).items():
            if name.startswith(LISTENER_PREFIX):
                self._per_listener[name.lower()] = listener_key(name).parse(raw)
                continue
            key = BROKER_KEYS.get(name)
            if key is None:
                raise InvalidConfigError(f"Unknown broker configuration key {name!r}")
            static[name] = key.parse(raw)
        _same_broker_id(static)
        self._layers: dict[ConfigSource, dict[str, ConfigValue]] = {
            source: dict((_dynamic or {}).get(source, {})) for source in BROKER_LAYERS}
        self._layers[ConfigSource.STATIC_BROKER_CONFIG] = static
        self._explicit: dict[str, ConfigValue] = {}
        for source in reversed(BROKER_LAYERS):
            self._explicit.update(self._layers[source])

    def for_listener(self, listener: str, name: str, mechanism: str | None = None) -> Any:
        """``name``'s value for one listener: ``listener.name.<listener>.[<mechanism>.]<name>``
        when set (listener and mechanism in lower case, as Kafka writes them), else the
        broker-wide value."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        if mechanism is not None:
            value = self._per_listener.get(f"{prefix}{mechanism.lower()}.{name}")
            if value is not None:
                return value
        value = self._per_listener.get(prefix + name)
        return self.get(name) if value is None else value

    def with_overrides(self, values: Mapping[str, object]) -> BrokerConfig:
        """More static values (the dynamic layers are not carried over)."""
        merged: dict[str, object] = dict(self._layers[ConfigSource.STATIC_BROKER_CONFIG])
        merged.update(self._per_listener)
        merged.update(values)
        return BrokerConfig(merged)

    def with_dynamic(self, cluster_default: Mapping[str, str],
                     this_broker: Mapping[str, str]) -> BrokerConfig:
        """This static config under the given dynamic configs (raw strings, as stored).

        Entries that are not valid dynamic configs are left out and logged, as Kafka does
        with a stored dynamic config it cannot apply."""
        static: dict[str, object] = dict(self._layers[ConfigSource.STATIC_BROKER_CONFIG])
        static.update(self._per_listener)
        return BrokerConfig(static, _dynamic={
            ConfigSource.DYNAMIC_BROKER_CONFIG: _valid_dynamic(this_broker, "broker"),
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: _valid_dynamic(
                cluster_default, "default cluster"),
        })

    def is_set(self, name: str) -> bool:
        return self._explicit.get(name) is not None

    def get(self, name: str) -> Any:
        """A broker key's effective value (unit fallbacks such as log.retention.hours applied)."""
        value = self._explicit.get(name)
        if value is not None:
            return value
        for fallback, factor in _UNIT_FALLBACK.get(name, ()):
            raw = self._explicit.get(fallback)
            if raw is not None:
                return int(raw) * factor  # type: ignore[arg-type]
        for fallback, factor in _UNIT_FALLBACK.get(name, ()):
            default = BROKER_KEYS[fallback].default
            if default is not None:
                return int(default) * factor  # type: ignore[arg-type]
        return BROKER_KEYS[name].default

    def explicit(self) -> dict[str, ConfigValue]:
        """Every value set in some layer (the highest layer's value for each key)."""
        return dict(self._explicit)

    def layer(self, source: ConfigSource) -> dict[str, ConfigValue]:
        """The values one layer sets (one of :data:`BROKER_LAYERS`)."""
        return dict(self._layers[source])

    def synonyms(self, names: Iterable[str]) -> list[ConfigSynonym]:
        """Where each of ``names`` is set, by layer then by name, ending with the non-null
        built-in defaults: Kafka's synonym order."""
        names = list(names)
        out = [ConfigSynonym(n, layer[n], source)
               for source, layer in ((s, self._layers[s]) for s in BROKER_LAYERS)
               for n in names if layer.get(n) is not None]
        out += [ConfigSynonym(n, BROKER_KEYS[n].default, ConfigSource.DEFAULT_CONFIG)
                for n in names if BROKER_KEYS[n].default is not None]
        return out

    def topic_defaults(self) -> Mapping[str, Any]:
        """Every topic key's broker-level value (:meth:`topic_default`), computed once per
        config (it is immutable): a topic's config is then a copy and its overrides, not
        ~40 lookups — creating thousands of partitions builds one per partition."""
        cached: dict[str, Any] | None = self.__dict__.get("_topic_defaults")
        if cached is None:
            cached = {name: self.topic_default(name) for name in TOPIC_KEYS}
            self.__dict__["_topic_defaults"] = cached
        return cached

    def topic_default(self, topic_key: str) -> Any:
        """The broker-level value a topic key falls back to."""
        key = TOPIC_KEYS[topic_key]
        if key.synonym is not None and key.synonym in BROKER_KEYS:
            value = self.get(key.synonym)
            if value is not None:
                return value
        return key.default

    def topic_default_source(self, topic_key: str) -> tuple[ConfigSource, str | None]:
        """Where the topic-level default comes from: a broker layer and key, or the built-in
        default."""
        key = TOPIC_KEYS[topic_key]
        if key.synonym is not None:
            for synonym in self.synonyms(broker_synonym_names(key.synonym)):
                if synonym.source != ConfigSource.DEFAULT_CONFIG:
                    return synonym.source, synonym.name
        return ConfigSource.DEFAULT_CONFIG, None


def _valid_dynamic(raw: Mapping[str, str], level: str) -> dict[str, ConfigValue]:
    parsed: dict[str, ConfigValue] = {}
    for name, value in raw.items():
        try:
            parsed.update(validate_dynamic_broker_configs({name: value}))
        except KafkaError as exc:
            log.error("dynamic %s config %s=%r is ignored: %s", level, name, value, exc.message)
    return parsed


def validate_dynamic_broker_configs(raw: Mapping[str, str]) -> dict[str, ConfigValue]:
    """Parse dynamic broker configs; INVALID_REQUEST (Kafka's error and message) when a key
    cannot change at run time or a value is invalid."""
    refused = sorted(n for n in raw if not getattr(BROKER_KEYS.get(n), "dynamic", False))
    if refused:
        raise InvalidRequestError(
            f"Cannot update these configs dynamically: Set({', '.join(refused)})")
    parsed: dict[str, ConfigValue] = {}
    for name, value in raw.items():
        try:
            parsed[name] = BROKER_KEYS[name].parse(value)
        except KafkaError as exc:
            raise InvalidRequestError(exc.message) from None
    return parsed


def validate_topic_configs(raw: Mapping[str, str | None]) -> dict[str, ConfigValue]:
    """Parse and validate topic overrides; InvalidConfigError names the first bad key."""
    parsed: dict[str, ConfigValue] = {}
    for name, value in raw.items():
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        parsed[name] = key.parse(value)
    return parsed


def ignored_config_notes(keys: Mapping[str, ConfigKey], names: Iterable[str]) -> list[str]:
    """One warning for each of ``names`` that strom accepts but ignores (see module doc)."""
    return [f"Configuration {name} is accepted but ignored: {key.ignored}."
            for name in names if (key := keys.get(name)) is not None and key.ignored]


class TopicConfig:
    """A topic's effective configuration: its overrides over the broker's defaults.

    Attribute-style helpers expose the values the storage layer reads on hot paths.
    """

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, ConfigValue]) -> None:
        self.broker = broker
        self.overrides: dict[str, ConfigValue] = dict(overrides)
        self._effective = dict(broker.topic_defaults())
        self._effective.update((name, value) for name, value in self.overrides.items()
                               if value is not None and name in TOPIC_KEYS)

    def get(self, name: str) -> Any:
        return self._effective[name]

    def items(self) -> Iterable[tuple[str, Any]]:
        return self._effective.items()

    @property
    def segment_bytes(self) -> int:
        return int(self._effective["segment.bytes"])

    @property
    def segment_ms(self) -> int:
        return int(self._effective["segment.ms"])

    @property
    def retention_ms(self) -> int:
        return int(self._effective["retention.ms"])

    @property
    def retention_bytes(self) -> int:
        return int(self._effective["retention.bytes"])

    @property
    def index_interval_bytes(self) -> int:
        return int(self._effective["index.interval.bytes"])

    @property
    def segment_index_bytes(self) -> int:
        return int(self._effective["segment.index.bytes"])

    @property
    def max_message_bytes(self) -> int:
        return int(self._effective["max.message.bytes"])

    @property
    def flush_messages(self) -> int:
        return int(self._effective["flush.messages"])

    @property
    def flush_ms(self) -> int:
        return int(self._effective["flush.ms"])

    @property
    def log_append_time(self) -> bool:
        return bool(self._effective["message.timestamp.type"] == "LogAppendTime")

    @property
    def cleanup_policy(self) -> list[str]:
        return list(self._effective["cleanup.policy"])
