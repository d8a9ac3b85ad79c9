"""Single-node metadata store: the embedded default, one JSON file in the data directory.

File ``<data-dir>/strom-metadata.json``, format version 6 (written atomically: temp file, fsync,
rename, fsync of the directory), with ``strom-metadata.journal`` beside it
(:mod:`strom.metadata.local_journal`)::

    {"version": 6, "cluster_id": "...", "epoch": N, "next_producer_id": M, "journal_seq": J,
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

A write costs what it changes: while the file is small (below
:data:`SMALL_SNAPSHOT_BYTES`) each write rewrites it whole, as before; above that the write is
one line appended to the journal (the topics it changed, and any other section it changed),
and the file is rewritten — the journal's lines folded in, ``journal_seq`` the last of them,
the journal emptied — once the journal has grown as large as the file (and at least
:data:`JOURNAL_MIN_BYTES`), so rewriting costs a bounded share of each write however much
metadata there is. At open the file is read and the
journal's lines after ``journal_seq`` applied in order.

Older files are read and rewritten as version 6 when the store opens. Version 5 files are
version 6 without ``journal_seq`` (and without a journal). Version 4 files are
version 5 without ``client_quotas``. Version 3 files are version 4 without ``acls`` (none
set). Version 2 files are
version 3 without ``broker_configs`` (none set). Version 1 files (``"partitions": <count>``, no
producer ids) are read as partitions led by this node at leader epoch 0 with ISR = replicas =
[this node]. The producer-id reservation that version 1 brokers kept in
``<data-dir>/producer-id-block`` (one line: the next unreserved id; a leftover ``.tmp`` beside
it counts too, as its rename was not made durable) is folded into ``next_producer_id`` and the
old file is deleted once the new one is durable, so no id is handed out twice across the
upgrade. A version 6 file cannot be read by older strom versions (they would not see the
journal).

Writes that must not hold the event loop (the topic writes) use :meth:`write_async`: the
changes are applied and the bytes encoded on the loop in slices (:mod:`strom.common.slices`),
then written and fsynced on a worker thread (one for the process, system calls only); a
write of any other kind made meanwhile first waits for those bytes.

Every change is persisted first and then becomes the current image, so a crash leaves either
the old or the new state; a write that fails (a full disk) changes nothing, is reported through
the data directory's :class:`~strom.storage.health.LogDirHealth` and raises
KafkaStorageError. Broker registration bumps (and persists) the epoch as well, so
epochs never repeat across restarts. Owned by the event-loop thread.

The previous copy: before each rewrite the current file is hard-linked as
``strom-metadata.json.prev`` (the state one rewrite earlier; already durable, and the write's
directory fsync makes the link durable). A current file that cannot be read (truncated,
garbled) or is missing beside a previous copy is recovered from that copy with a WARNING, and
rewritten (the journal, which continues the damaged file, is applied to the copy); the store
then reports :attr:`LocalMetadataStore.recovered_from_previous`. The copy may lack the changes
since it was written, so recovery moves the epoch and the next producer id past anything a
lost change can have used (:data:`RECOVERY_PRODUCER_ID_SKIP`); topics whose logs
are on disk but not in the copy are for the broker to restore. When neither file is readable
the store refuses to open, naming both.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import errno
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
from strom.common.slices import Steps, run_at_once, run_in_slices
from strom.metadata.changes import MetadataChange, apply_changes_steps
from strom.metadata.image import (
    BrokerInfo,
    MetadataImage,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TopicInfo,
)
from strom.metadata.local_journal import JOURNAL_NAME, append_journal, cut_journal, read_journal
from strom.metadata.store import ImageStore, StaleMetadataError
from strom.storage.files import TMP_SUFFIX, atomic_write, fsync_dir, unlink_quietly
from strom.storage.health import LogDirHealth

log = logging.getLogger("strom.metadata.local")

FILE_NAME = "strom-metadata.json"
PREVIOUS_SUFFIX = ".prev"
#: errno values of a file system that has no hard links (the previous copy is then copied).
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})
FORMAT_VERSION = 6
READABLE_VERSIONS = (1, 2, 3, 4, 5, FORMAT_VERSION)
#: Below this size the file is rewritten at every write; above it writes go to the journal.
SMALL_SNAPSHOT_BYTES = 64 * 1024
#: The journal is folded into the file once it is as large as the file and at least this.
JOURNAL_MIN_BYTES = 1024 * 1024
LEGACY_PRODUCER_ID_FILE = "producer-id-block"
# More than the writes lost with a damaged file can have reserved: those between two
# rewrites of the file (its journal interval: at most a few million lines of 1,000-id blocks).
RECOVERY_PRODUCER_ID_SKIP = 1 << 32


@dataclass(slots=True)
class _Persist:
    """One write's bytes: a journal line (``seq``) or the whole file (``rewrite``)."""

    image: MetadataImage
    next_producer_id: int
    data: list[bytes]  # chunks, written one after another
    rewrite: bool = False
    seq: int = 0
    cut_journal: bool = False     # (rewrite) the journal has lines to empty
    keep_previous: bool = True    # (rewrite) the replaced file becomes the previous copy
    error: Exception | None = None  # (write_async) why it failed

    @property
    def file(self) -> str:
        return FILE_NAME if self.rewrite else JOURNAL_NAME


_io_lock = threading.Lock()
_io: ThreadPoolExecutor | None = None


def _metadata_io() -> ThreadPoolExecutor:
    """The worker thread that writes and fsyncs metadata (one for the process: writes are
    a few per second, and one thread keeps them in order)."""
    global _io
    with _io_lock:
        if _io is None:
            _io = ThreadPoolExecutor(1, thread_name_prefix="strom-metadata-io")
        return _io


#: Topics encoded into one chunk of a write's bytes (~40 KB): joining all of them on the
#: loop at once was one 11 ms step at 15,000 topics.
CHUNK_TOPICS = 256


def _dumps_steps(head: dict[str, Any], topics: Iterable[tuple[str, TopicInfo | None]]
                 ) -> Steps[list[bytes]]:
    """``head`` with ``"topics"`` (each topic's entry, or null: removed) as compact UTF-8
    JSON in chunks, keys sorted except the topics' names (in the given order); a step per
    topic. ``head`` has no ``"topics"``."""
    fields = [json.dumps(key) + ":" + _dumps(value) for key, value in sorted(head.items())]
    at = sum(1 for key in head if key < "topics")
    chunks = [("{" + "".join(f + "," for f in fields[:at]) + '"topics":{').encode()]
    group: list[str] = []
    for name, topic in topics:
        group.append(json.dumps(name) + ":" + (
            "null" if topic is None else _dumps(_encode_topic(topic))))
        if len(group) == CHUNK_TOPICS:
            chunks.append((("," if len(chunks) > 1 else "") + ",".join(group)).encode())
            group = []
        yield
    if group:
        chunks.append((("," if len(chunks) > 1 else "") + ",".join(group)).encode())
    chunks.append(("}" + "".join("," + f for f in fields[at:]) + "}").encode())
    return chunks


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


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
        self._journal = data_dir / JOURNAL_NAME
        self._journal_seq = 0     # the last line written (or folded into the file)
        self._journal_bytes = 0
        self._snapshot_bytes = 0  # the size of the file as last written or read
        self._writes = 0          # writes made durable (a write_async encoding checks it)
        #: The write_async whose bytes a worker thread is writing, and what it writes.
        self._pending: tuple[Future[None], _Persist] | None = None
        loaded = self._read_or_recover()
        legacy_next = self._read_legacy_producer_ids()
        if loaded is None:
            image = MetadataImage(cluster_id or new_cluster_id(), 0, broker.node_id,
                                  {broker.node_id: broker}, {})
            version, next_pid = None, 0
        else:
            image, next_pid, version = loaded
            image, next_pid = self._replay_journal(image, next_pid)
        super().__init__(image, max(next_pid, legacy_next or 0))
        #: What the file and the journal hold (journal lines are differences from it).
        self._persisted = self._image
        if self.recovered_from_previous is not None:
            self._rewrite(self._image, self._next_producer_id, keep_previous=False)
        if version != FORMAT_VERSION or legacy_next is not None:
            self._rewrite(self._image, self._next_producer_id)
            self._remove_legacy_producer_ids()

    def register_broker(self, broker: BrokerInfo) -> None:
        """Update this broker's advertised address and rack (known once the listener is bound).

        Raises ``ValueError`` for another node id: this store holds a single broker."""
        if broker.node_id != self._broker.node_id:
            raise ValueError(f"single-node metadata store of broker {self._broker.node_id} "
                             f"cannot register broker {broker.node_id}")
        self._finish_pending()
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
            self._journal_seq = int(state.get("journal_seq", 0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}: malformed metadata ({exc!r})") from exc
        self._snapshot_bytes = len(raw)
        return image, next_pid, version

    def _replay_journal(self, image: MetadataImage, next_pid: int
                        ) -> tuple[MetadataImage, int]:
        """Apply the journal's lines after the file's ``journal_seq``; cut a torn tail.

        After a recovery from the previous copy every line is applied (they continue the
        damaged file; each holds whole topics and sections, so the copy stays well-formed)."""
        after = 0 if self.recovered_from_previous is not None else self._journal_seq
        entries, last_seq, sound = read_journal(self._journal, after)
        cut_journal(self._journal, sound)
        self._journal_bytes = sound
        self._journal_seq = max(last_seq, self._journal_seq)
        node = self._broker.node_id
        for entry in entries:
            try:
                image, next_pid = _apply_entry(image, entry.state, node)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise ValueError(f"{self._journal}: malformed line {entry.seq} ({exc!r})"
                                 ) from exc
        return image, next_pid

    def _decode(self, state: dict[str, Any], version: int) -> tuple[MetadataImage, int]:
        node = self._broker.node_id
        topics = {name: _decode_topic(name, entry, version, node)
                  for name, entry in state["topics"].items()}
        image = MetadataImage(str(state["cluster_id"]), int(state["epoch"]), node,
                              {node: self._broker}, topics, **_decode_sections(state))
        return image, int(state.get("next_producer_id", 0))

    def _store(self, image: MetadataImage, next_producer_id: int) -> None:
        """Persist the state durably — one journal line, or the whole file while it is small
        or once the journal has grown as large as it; the current state is untouched if this
        raises (a failure is reported through the data directory's health and raised as
        KafkaStorageError)."""
        self._persist_now(run_at_once(self._encode_steps(image, next_producer_id)))

    def _rewrite(self, image: MetadataImage, next_producer_id: int, *,
                 keep_previous: bool = True) -> None:
        """Write the whole state as the file (folding the journal in) and empty the journal.

        With ``keep_previous`` the file being replaced becomes the previous copy first (not
        when it is the unreadable file being recovered)."""
        persist = run_at_once(self._encode_steps(image, next_producer_id, rewrite=True))
        persist.keep_previous = keep_previous
        self._persist_now(persist)

    def _persist_now(self, persist: _Persist) -> None:
        """Write ``persist`` on this thread; a failure is reported through the data
        directory's health and raised as KafkaStorageError, changing nothing."""
        try:
            self._write_out(persist)
        except OSError as exc:
            raise self._health.failure(exc, f"writing {persist.file}") from exc
        self._persisted_as(persist)

    # -- writes off the event loop ---------------------------------------------------------
    async def write_async(self, expected_epoch: int, changes: Sequence[MetadataChange]
                          ) -> MetadataImage:
        """:meth:`write` without holding the event loop: the changes are applied and the
        journal line (or the file) encoded on the loop in slices (:mod:`strom.common.slices`),
        and written and fsynced on a worker thread (system calls only). The image stays the
        old one until the bytes are durable, then the new one is installed and the
        listeners called, as with :meth:`write`.

        One write at a time: a synchronous write (or producer-id reservation, broker
        registration) made while this one's bytes are being written first waits for them
        and installs this image; one made while this one is encoding makes this one stale
        (StaleMetadataError, when the image moved; else it is encoded again). Cancelled
        while its bytes are being written, the write still completes (and is installed)
        before the cancellation propagates."""
        self._finish_pending()
        base = self._image
        if expected_epoch != base.epoch:
            raise StaleMetadataError(expected_epoch, base.epoch)
        if not changes:
            return base
        image = await run_in_slices(apply_changes_steps(base, changes))
        while True:
            written = self._writes
            persist = await run_in_slices(self._encode_steps(image, self._next_producer_id))
            if self._image is not base or self._pending is not None:
                raise StaleMetadataError(expected_epoch, self._image.epoch)
            if self._writes == written:
                break  # else a producer-id reservation got in between: encode again
        job = _metadata_io().submit(self._write_out, persist)
        self._pending = (job, persist)
        try:
            await asyncio.shield(asyncio.wrap_future(job))
        except asyncio.CancelledError:
            if self._pending is not None and self._pending[1] is persist:
                self._finish_pending()
            raise
        except Exception:  # _finish_pending reports it (an OSError) or raises it here
            pass
        if self._pending is not None and self._pending[1] is persist:
            self._finish_pending()
        if persist.error is not None:
            raise persist.error
        return image

    def _finish_pending(self) -> None:
        """Complete the write in progress on the worker thread, if any (waiting for it):
        install its image, or report its failure (kept for its writer)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        job, persist = pending
        try:
            job.result()
        except OSError as exc:
            persist.error = self._health.failure(exc, f"writing {persist.file}")
            return
        self._persisted_as(persist)
        self._set_image(persist.image)

    def _encode_steps(self, image: MetadataImage, next_producer_id: int, *,
                      rewrite: bool = False) -> Steps[_Persist]:
        """What persisting ``image`` writes (a step per topic encoded): one journal line,
        or the whole file while it is small or once the journal has grown as large."""
        rewrite = rewrite or (self._snapshot_bytes <= SMALL_SNAPSHOT_BYTES
                              or self._journal_bytes >= max(self._snapshot_bytes,
                                                            JOURNAL_MIN_BYTES))
        if rewrite:
            state = self._encode_head(image, next_producer_id)
            data = yield from _dumps_steps(state, image.topics.items())
            return _Persist(image, next_producer_id, data, rewrite=True,
                            cut_journal=self._journal_bytes > 0)
        old = self._persisted
        changed: list[tuple[str, TopicInfo | None]] = []
        for i, (name, topic) in enumerate(image.topics.items()):
            if old.topics.get(name) is not topic:
                changed.append((name, topic))
            if i % 1000 == 999:
                yield
        changed += [(name, None) for name in old.topics if name not in image.topics]
        seq = self._journal_seq + 1
        head: dict[str, Any] = {"seq": seq, "epoch": image.epoch,
                                "next_producer_id": next_producer_id}
        for key in _SECTIONS:
            if getattr(old, key) != getattr(image, key):
                head[key] = _encode_section(image, key)
        data = yield from _dumps_steps(head, changed)
        return _Persist(image, next_producer_id, [*data, b"\n"], seq=seq)

    def _encode_head(self, image: MetadataImage, next_producer_id: int) -> dict[str, Any]:
        """The file's state without its topics."""
        return {
            "version": FORMAT_VERSION,
            "cluster_id": image.cluster_id,
            "epoch": image.epoch,
            "next_producer_id": next_producer_id,
            "journal_seq": self._journal_seq,
            "broker_configs": _encode_section(image, "broker_configs"),
            **{key: _encode_section(image, key) for key in _OPTIONAL_SECTIONS
               if getattr(image, key)},
        }

    def _write_out(self, persist: _Persist) -> None:
        """Write ``persist``'s bytes durably: system calls only (also on a worker thread).
        Raises OSError, leaving the file and journal as they were."""
        if not persist.rewrite:
            append_journal(self._journal, persist.data)
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        if persist.keep_previous:
            self._keep_previous()
        atomic_write(self._path, persist.data)
        if persist.cut_journal:
            cut_journal(self._journal, 0)

    def _persisted_as(self, persist: _Persist) -> None:
        """``persist`` is durable: the file and the journal hold its image now."""
        size = sum(len(chunk) for chunk in persist.data)
        if persist.rewrite:
            self._snapshot_bytes = size
            self._journal_bytes = 0
        else:
            self._journal_bytes += size
            self._journal_seq = persist.seq
        self._writes += 1
        self._persisted = persist.image
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


_OPTIONAL_SECTIONS = ("scram_credentials", "acls", "client_quotas")


def _encode_topic(t: TopicInfo) -> dict[str, Any]:
    return {"id": str(t.topic_id), "internal": t.internal, "configs": dict(t.configs),
            "partitions": [_encode_partition(p) for p in t.partitions]}


def _decode_topic(name: str, entry: dict[str, Any], version: int, node: int) -> TopicInfo:
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
    return TopicInfo(
        name=name,
        topic_id=uuid.UUID(entry["id"]),
        partitions=parts,
        configs={str(k): str(v) for k, v in entry.get("configs", {}).items()},
        internal=bool(entry.get("internal", False)),
    )


def _encode_section(image: MetadataImage, key: str) -> Any:
    """One non-topic section of the state, as the file holds it."""
    if key == "broker_configs":
        return {r: dict(c) for r, c in image.broker_configs.items()}
    if key == "scram_credentials":
        return {user: {mech: format_credential(c.salt, c.stored_key, c.server_key,
                                               c.iterations)
                       for mech, c in creds.items()}
                for user, creds in image.scram_credentials.items()}
    if key == "acls":
        return _encode_acls(image.acls)
    assert key == "client_quotas"
    return [{"entity": dict(entity), "quotas": dict(values)}
            for entity, values in image.client_quotas.items()]


def _decode_sections(state: dict[str, Any]) -> dict[str, Any]:
    """The non-topic sections present in ``state`` (absent ones: empty), as image fields."""
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
    return {"broker_configs": broker_configs, "scram_credentials": scram,
            "acls": _decode_acls(state.get("acls", [])), "client_quotas": quotas}


_SECTIONS = ("broker_configs", *_OPTIONAL_SECTIONS)


def _apply_entry(image: MetadataImage, state: dict[str, Any], node: int
                 ) -> tuple[MetadataImage, int]:
    """``image`` after one journal line."""
    topics = dict(image.topics)
    for name, entry in state["topics"].items():
        if entry is None:
            topics.pop(name, None)
        else:
            topics[name] = _decode_topic(name, entry, FORMAT_VERSION, node)
    sections = {k: v for k, v in _decode_sections(state).items() if k in state}
    return (dataclasses.replace(image, epoch=int(state["epoch"]), topics=topics, **sections),
            int(state["next_producer_id"]))


def _encode_partition(p: PartitionInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"replicas": list(p.replicas), "leader": p.leader,
                             "leader_epoch": p.leader_epoch, "isr": list(p.isr)}
    if p.adding_replicas:
        entry["adding_replicas"] = list(p.adding_replicas)
    if p.removing_replicas:
        entry["removing_replicas"] = list(p.removing_replicas)
    return entry
