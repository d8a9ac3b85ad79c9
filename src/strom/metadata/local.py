"""Single-node metadata store: the embedded default, one JSON file in the data directory.

File ``<data-dir>/strom-metadata.json``, format version 5 (written atomically: temp file, fsync,
rename, fsync of the directory)::

    {"version": 5, "cluster_id": "...", "epoch": N, "next_producer_id": M,
     "topics": {"<name>": {"id": "<uuid>", "internal": false, "configs": {"k": "v"},
                           "partitions": [{"replicas": [0], "leader": 0, "leader_epoch": 0,
                                           "isr": [0]}, ...]}},  (+ "adding_replicas",
                                           "removing_replicas" while reassigning)
     "broker_configs": {"": {"k": "v"}, "<broker id>": {"k": "v"}},
     "scram_credentials": {"<user>": {"SCRAM-SHA-256": "salt=…,stored_key=…,server_key=…,
                                                       iterations=4096"}},
     "acls": [{"resource_type": "TOPIC", "name": "orders", "pattern_type": "PREFIXED",
               "entries": [{"principal": "User:alice", "host": "*", "operation": "READ",
                            "permission": "ALLOW"}]}],
     "client_quotas": [{"entity": {"user": "alice", "client-id": null},
                        "quotas": {"producer_byte_rate": 1048576.0}}]}

Partition ``i`` is entry ``i`` of ``partitions``; its ``adding_replicas`` /
``removing_replicas`` lists are written only while a reassignment is in progress (absent:
empty, so files written before reassignments existed read unchanged).
``next_producer_id`` is the lowest producer id never reserved. ``broker_configs`` holds the
dynamic broker configs: ``""`` the cluster-wide default, a broker id that broker's own.
Brokers are not stored: like Kafka's ephemeral registrations they come from the running
broker (its node id and listener).
``scram_credentials`` (optional, absent when no user has one) holds each user's salted SCRAM
credentials in Kafka's text form (:mod:`strom.common.scram`) — never a password.
``acls`` (optional, absent without ACLs) holds the ACLs per resource pattern, with Kafka's
enum names (:mod:`strom.common.acl`).
``client_quotas`` (optional, absent when none is set) holds each client-quota entity's values:
``entity`` maps the entity types it names (``user``, ``client-id``; or ``ip`` alone) to a
name, null for the default entity (Kafka's ``<default>``).

Older files are read and rewritten as version 5 when the store opens. Version 4 files are
version 5 without ``client_quotas``. Version 3 files are version 4 without ``acls`` (none
set). Version 2 files are
version 3 without ``broker_configs`` (none set). Version 1 files (``"partitions": <count>``, no
producer ids) are read as partitions led by this node at leader epoch 0 with ISR = replicas =
[this node]. The producer-id reservation that version 1 brokers kept in
``<data-dir>/producer-id-block`` (one line: the next unreserved id; a leftover ``.tmp`` beside
it counts too, as its rename was not made durable) is folded into ``next_producer_id`` and the
old file is deleted once the new one is durable, so no id is handed out twice across the
upgrade. A version 5 file cannot be read by older strom versions.

Every change is persisted first and then becomes the current image, so a crash leaves either
the old or the new state; a write that fails (a full disk) changes nothing, is reported through
the data directory's :class:`~strom.storage.health.LogDirHealth` and raises
KafkaStorageError. Broker registration bumps (and persists) the epoch as well, so
epochs never repeat across restarts. Owned by the event-loop thread.

The previous copy: before each write the current file is hard-linked as
``strom-metadata.json.prev`` (the state one write earlier; already durable, and the write's
directory fsync makes the link durable). A current file that cannot be read (truncated,
garbled) or is missing beside a previous copy is recovered from that copy with a WARNING, and
rewritten; the store then reports :attr:`LocalMetadataStore.recovered_from_previous`. The
copy may lack the last change, so recovery moves the epoch and the next producer id past
anything that change can have used (:data:`RECOVERY_PRODUCER_ID_SKIP`); topics whose logs
are on disk but not in the copy are for the broker to restore. When neither file is readable
the store refuses to open, naming both.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from strom.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.scram import format_credential, parse_credential
from strom.metadata.image import (
    BrokerInfo,
    MetadataImage,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TopicInfo,
)
from strom.metadata.store import ImageStore
from strom.storage.files import TMP_SUFFIX, atomic_write, fsync_dir, unlink_quietly
from strom.storage.health import LogDirHealth

log = logging.getLogger("strom.metadata.local")

FILE_NAME = "strom-metadata.json"
PREVIOUS_SUFFIX = ".prev"
#: errno values of a file system that has no hard links (the previous copy is then copied).
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})
FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, FORMAT_VERSION)
LEGACY_PRODUCER_ID_FILE = "producer-id-block"
# Larger than any producer-id block a single lost write can have reserved (blocks are 1000).
RECOVERY_PRODUCER_ID_SKIP = 1 << 20


def new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalMetadataStore(ImageStore):
    """File-backed :class:`~strom.metadata.store.MetadataStore` for a single broker.

    Raises ``ValueError`` at construction when the file cannot be read (bad JSON, an unknown
    format version, a malformed entry)."""

    def __init__(self, data_dir: Path, broker: BrokerInfo, cluster_id: str | None = None,
                 *, health: LogDirHealth | None = None) -> None:
        self._dir = data_dir
        self._path = data_dir / FILE_NAME
        self._previous = data_dir / (FILE_NAME + PREVIOUS_SUFFIX)
        self._broker = broker
        #: Why the current file was unusable, when the store was recovered from the
        #: previous copy at open (else None).
        self.recovered_from_previous: str | None = None
        self._health = health or LogDirHealth(data_dir)
        loaded = self._read_or_recover()
        legacy_next = self._read_legacy_producer_ids()
        if loaded is None:
            image = MetadataImage(cluster_id or new_cluster_id(), 0, broker.node_id,
                                  {broker.node_id: broker}, {})
            version, next_pid = None, 0
        else:
            image, next_pid, version = loaded
        super().__init__(image, max(next_pid, legacy_next or 0))
        if self.recovered_from_previous is not None:
            self._store(self._image, self._next_producer_id, keep_previous=False)
        if version != FORMAT_VERSION or legacy_next is not None:
            self._store(self._image, self._next_producer_id)
            self._remove_legacy_producer_ids()

    def register_broker(self, broker: BrokerInfo) -> None:
        """Update this broker's advertised address and rack (known once the listener is bound).

        Raises ``ValueError`` for another node id: this store holds a single broker."""
        if broker.node_id != self._broker.node_id:
            raise ValueError(f"single-node metadata store of broker {self._broker.node_id} "
                             f"cannot register broker {broker.node_id}")
        image = dataclasses.replace(self._image, epoch=self._image.epoch + 1,
                                    controller_id=broker.node_id,
                                    brokers={broker.node_id: broker})
        self._store(image, self._next_producer_id)
        self._broker = broker
        self._set_image(image)

    # -- the file ---------------------------------------------------------------------------
    def _read_or_recover(self) -> tuple[MetadataImage, int, int] | None:
        """The current file's state; else the previous copy's, moved past the lost write
        (then :attr:`recovered_from_previous` says why); None on a new data directory."""
        try:
            loaded = self._read(self._path)
        except ValueError as exc:
            problem = str(exc)
        else:
            if loaded is not None or not self._previous.exists():
                return loaded
            problem = f"{self._path} is missing"
        try:
            recovered = self._read(self._previous)
        except ValueError as exc:
            raise ValueError(f"{problem}; the previous copy is unreadable too ({exc}). "
                             "Restore either file from a backup") from None
        if recovered is None:
            raise ValueError(f"{problem}, and there is no previous copy "
                             f"({self._previous.name}) to recover from. Restore it from a "
                             "backup") from None
        image, next_pid, version = recovered
        log.warning("%s; recovered the metadata from the previous copy %s (epoch %d): the "
                    "last metadata change before the damage may be lost", problem,
                    self._previous, image.epoch)
        self.recovered_from_previous = problem
        moved = dataclasses.replace(image, epoch=image.epoch + 1)
        return moved, next_pid + RECOVERY_PRODUCER_ID_SKIP, version

    def _read(self, path: Path) -> tuple[MetadataImage, int, int] | None:
        """(image, next producer id, format version) from ``path``, or None if absent;
        ValueError when it cannot be read."""
        try:
            raw = path.read_text("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: {exc}") from None
        try:
            state = json.loads(raw)
        except ValueError as exc:
            what = "empty" if not raw.strip() else f"not valid JSON ({exc})"
            raise ValueError(f"{path} is {what}") from None
        version = state.get("version") if isinstance(state, dict) else None
        if version not in READABLE_VERSIONS:
            raise ValueError(f"{path}: unsupported metadata format {version}")
        try:
            image, next_pid = self._decode(state, version)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}: malformed metadata ({exc!r})") from exc
        return image, next_pid, version

    def _decode(self, state: dict[str, Any], version: int) -> tuple[MetadataImage, int]:
        node = self._broker.node_id
        topics: dict[str, TopicInfo] = {}
        for name, entry in state["topics"].items():
            if version == 1:
                parts = tuple(PartitionInfo(i, node, 0, (node,), (node,))
                              for i in range(int(entry["partitions"])))
            else:
                parts = tuple(
                    PartitionInfo(i, int(p["leader"]), int(p["leader_epoch"]),
                                  tuple(int(r) for r in p["replicas"]),
                                  tuple(int(r) for r in p["isr"]),
                                  tuple(int(r) for r in p.get("adding_replicas", ())),
                                  tuple(int(r) for r in p.get("removing_replicas", ())))
                    for i, p in enumerate(entry["partitions"]))
            topics[name] = TopicInfo(
                name=name,
                topic_id=uuid.UUID(entry["id"]),
                partitions=parts,
                configs={str(k): str(v) for k, v in entry.get("configs", {}).items()},
                internal=bool(entry.get("internal", False)),
            )
        broker_configs = {
            str(resource): {str(k): str(v) for k, v in configs.items()}
            for resource, configs in state.get("broker_configs", {}).items() if configs}
        scram = {
            str(user): {str(mech): ScramCredential(*parse_credential(str(text)))
                        for mech, text in creds.items()}
            for user, creds in state.get("scram_credentials", {}).items() if creds}
        quotas: dict[QuotaEntity, dict[str, float]] = {}
        for entry in state.get("client_quotas", []):
            entity = tuple(sorted((str(t), None if n is None else str(n))
                                  for t, n in entry["entity"].items()))
            quotas[entity] = {str(k): float(v) for k, v in entry["quotas"].items()}
        image = MetadataImage(str(state["cluster_id"]), int(state["epoch"]), node,
                              {node: self._broker}, topics, broker_configs, scram,
                              _decode_acls(state.get("acls", [])), quotas)
        return image, int(state.get("next_producer_id", 0))

    @staticmethod
    def _encode(image: MetadataImage, next_producer_id: int) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "cluster_id": image.cluster_id,
            "epoch": image.epoch,
            "next_producer_id": next_producer_id,
            "topics": {
                t.name: {
                    "id": str(t.topic_id),
                    "internal": t.internal,
                    "configs": dict(t.configs),
                    "partitions": [_encode_partition(p) for p in t.partitions],
                }
                for t in image.topics.values()
            },
            "broker_configs": {r: dict(c) for r, c in image.broker_configs.items()},
            **({"scram_credentials": {
                user: {mech: format_credential(c.salt, c.stored_key, c.server_key, c.iterations)
                       for mech, c in creds.items()}
                for user, creds in image.scram_credentials.items()}}
               if image.scram_credentials else {}),
            **({"acls": _encode_acls(image.acls)} if image.acls else {}),
            **({"client_quotas": [
                {"entity": dict(entity), "quotas": dict(values)}
                for entity, values in image.client_quotas.items()]}
               if image.client_quotas else {}),
        }

    def _store(self, image: MetadataImage, next_producer_id: int, *,
               keep_previous: bool = True) -> None:
        """Write the whole state durably; the current state is untouched if this raises (a
        failure is reported through the data directory's health and raised as
        KafkaStorageError).

        With ``keep_previous`` the file being replaced becomes the previous copy first (not
        when it is the unreadable file being recovered)."""
        text = json.dumps(self._encode(image, next_producer_id), indent=1, sort_keys=True)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            if keep_previous:
                self._keep_previous()
            atomic_write(self._path, text.encode("utf-8"))
        except OSError as exc:
            raise self._health.failure(exc, f"writing {FILE_NAME}") from exc
        self._health.succeeded()

    def _keep_previous(self) -> None:
        """Hard-link the current file as the previous copy (link, then rename over the old
        copy, so a readable copy exists at every moment)."""
        staged = self._previous.with_name(self._previous.name + TMP_SUFFIX)
        unlink_quietly(staged)
        try:
            if os.path.samefile(self._path, self._previous):
                # Already the previous copy (the last write failed). rename() of two links
                # to one file does nothing and would leave the staged link behind.
                return
        except FileNotFoundError:
            pass
        try:
            os.link(self._path, staged)
        except FileNotFoundError:
            return  # first write: nothing to keep
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            atomic_write(self._previous, self._path.read_bytes())  # copy instead
            return
        try:
            os.replace(staged, self._previous)
        except BaseException:
            unlink_quietly(staged)
            raise

    def _legacy_producer_id_files(self) -> list[Path]:
        legacy = self._dir / LEGACY_PRODUCER_ID_FILE
        return [legacy, legacy.with_suffix(".tmp")]

    def _read_legacy_producer_ids(self) -> int | None:
        """The highest next-unreserved id in the version 1 files, or None without any."""
        found: int | None = None
        for path in self._legacy_producer_id_files():
            try:
                text = path.read_text().strip()
            except FileNotFoundError:
                continue
            try:
                value = int(text or 0)
            except ValueError:
                if path.suffix == ".tmp":
                    continue  # torn before its fsync: none of its ids were handed out
                raise ValueError(f"{path}: not a producer id ({text!r})") from None
            found = value if found is None else max(found, value)
        return found

    def _remove_legacy_producer_ids(self) -> None:
        removed = False
        for path in self._legacy_producer_id_files():
            try:
                path.unlink()
                removed = True
            except FileNotFoundError:
                pass
        if removed:
            fsync_dir(self._dir)


def _encode_acls(acls: dict[ResourcePattern, frozenset[AccessControlEntry]]
                 ) -> list[dict[str, Any]]:
    return [
        {"resource_type": pattern.resource_type.name, "name": pattern.name,
         "pattern_type": pattern.pattern_type.name,
         "entries": [{"principal": e.principal, "host": e.host,
                      "operation": e.operation.name, "permission": e.permission.name}
                     for e in sorted(entries)]}
        for pattern, entries in sorted(acls.items())]


def _decode_acls(raw: list[dict[str, Any]]
                 ) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for item in raw:
        pattern = ResourcePattern(ResourceType[item["resource_type"]], str(item["name"]),
                                  PatternType[item["pattern_type"]])
        entries = frozenset(
            AccessControlEntry(str(e["principal"]), str(e["host"]),
                               AclOperation[e["operation"]],
                               AclPermissionType[e["permission"]])
            for e in item["entries"])
        if entries:
            acls[pattern] = entries
    return acls


def _encode_partition(p: PartitionInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"replicas": list(p.replicas), "leader": p.leader,
                             "leader_epoch": p.leader_epoch, "isr": list(p.isr)}
    if p.adding_replicas:
        entry["adding_replicas"] = list(p.adding_replicas)
    if p.removing_replicas:
        entry["removing_replicas"] = list(p.removing_replicas)
    return entry
