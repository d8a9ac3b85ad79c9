"""``ZooKeeperMetadataStore``: the :class:`~strom.metadata.store.MetadataStore` of a cluster,
kept in ZooKeeper in Kafka's znode layout (:mod:`strom.metadata.zk_layout`).

    store = ZooKeeperMetadataStore("zk1:2181,zk2:2181/strom")   # the chroot is created
    store.register_broker(BrokerInfo(1, "10.0.0.1", 9092, rack="r1"))

Image and epochs: the image is built from the znodes. Every metadata write is one multi-op
that sets ``/strom/metadata_epoch`` with the znode version the writer's image was built from
(the *data version*), so of two writers racing from the same image one commits and the other
gets :class:`StaleMetadataError` — never a lost update. The image's ``epoch`` is this store's
own counter (+1 for every image it installs: its own writes, other writers' changes, brokers
and controller coming and going); the data version behind it is what is checked in ZooKeeper.
Two brokers may number the same state differently.

Watches: ``/strom/metadata_epoch`` (data), ``/brokers/ids`` (children) and each broker znode,
and ``/controller`` wake a refresh on the session's worker thread, which re-reads what changed
and installs a new image (listeners are notified there). A snapshot of the data znodes is
consistent because all of them are written together with the epoch znode: the data is read
between two reads of the epoch znode that see the same version.

Threads: the owner calls the methods; refreshes and re-registration run on the session's
worker thread, or on the owner's event loop when the store is opened with
``run=loop.call_soon_threadsafe`` (then everything runs on that one thread, as the contract
wants). One re-entrant lock serialises them, so listeners run with it held, and may write.
A broker opens it with ``install=loop.call_soon_threadsafe`` instead: ZooKeeper is then read
on the worker thread only — a slow or unreachable ZooKeeper never stalls the loop's
produce / fetch — and each image read there is handed to ``install`` and installed (listeners
notified) on the loop, in the order the reads began. Every read is a :class:`_Snapshot`
numbered when it begins; installing one takes its data only if newer than the image's (data
version) and its brokers and controller only if no later-begun read was installed, so a
read that finishes late never moves the image back (a change after a read re-arms a watch,
so a newer read always follows). In this mode the worker holds the lock only to install.

Every ZooKeeper call waits at most ``timeout`` seconds and then raises
:class:`~strom.metadata.zk_session.ZooKeeperUnavailableError`; the store never blocks forever.
A write that fails so has an unknown outcome (ZooKeeper may still commit it, e.g. a proposal
the old leader of an ensemble had logged): the caller re-reads and retries, and the epoch
check makes the retry safe — it is refused as stale if the first attempt landed.

Broker registrations are ephemeral znodes of this store's session, re-created when a new
session replaces an expired one; registering an id another session holds fails with
:class:`BrokerIdAlreadyRegisteredError`. A registration deleted while the session lives (the
controller found the broker dead, :mod:`strom.controller.election`: a wrong verdict, or a race
with a restart) is re-created when a refresh notices, with a new czxid — a new broker epoch —
until :meth:`ZooKeeperMetadataStore.retire` (a stopping broker lets it go). Producer-id
blocks are a compare-and-set on ``/latest_producer_id_block``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent

from strom.common.acl import AccessControlEntry, ResourcePattern
from strom.common.errors import StromError, error_class
from strom.metadata import zk_layout as zk
from strom.metadata.changes import MetadataChange, apply_changes
from strom.metadata.image import (
    BrokerInfo,
    MetadataImage,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TopicInfo,
)
from strom.metadata.local import new_cluster_id
from strom.metadata.store import (
    Listeners,
    MetadataListener,
    ProducerIdBlock,
    StaleMetadataError,
    next_producer_id_block,
)
from strom.metadata.zk_session import (
    DEFAULT_SESSION_TIMEOUT,
    DEFAULT_TIMEOUT,
    TransactionFailedError,
    ZkSession,
    ZooKeeperUnavailableError,
)

log = logging.getLogger("strom.metadata.zookeeper")
K = TypeVar("K")
V = TypeVar("V")

#: Kafka's answer to a request that reached a broker which is no longer the controller.
NotControllerError = error_class("NOT_CONTROLLER")


class BrokerIdAlreadyRegisteredError(StromError):
    """Another live session holds ``/brokers/ids/<id>`` (a second broker with the same id)."""


class MetadataWriteRefusedError(StromError):
    """ZooKeeper refused a metadata multi-op for a reason other than a stale image or a
    fenced controller (a znode changed behind strom's back)."""


@dataclass(frozen=True, slots=True)
class ControllerFence:
    """A controller's claim: its ``epoch`` and the version of ``/controller_epoch`` it
    wrote. A write carrying it commits only while that version is current."""

    epoch: int
    zk_version: int


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """One refresh's reads: ``seq`` numbers it by when it began; ``data`` None when the data
    version had not moved past the one the read started from."""

    seq: int
    data: _Data | None
    brokers: dict[int, BrokerInfo]
    controller: int


@dataclass(frozen=True, slots=True)
class _Data:
    """What the data znodes say, at one data version."""

    version: int
    topics: dict[str, TopicInfo]
    broker_configs: dict[str, dict[str, str]]
    scram: dict[str, dict[str, ScramCredential]]
    acls: dict[ResourcePattern, frozenset[AccessControlEntry]]
    quotas: dict[QuotaEntity, dict[str, float]]
    #: The change hints of the epoch znode at ``version`` (:mod:`.zk_layout`).
    hints: list[zk.ChangeHint]

    @classmethod
    def of(cls, image: MetadataImage, version: int, hints: list[zk.ChangeHint]) -> _Data:
        return cls(version, image.topics, image.broker_configs, image.scram_credentials,
                   image.acls, image.client_quotas, hints)


class ZooKeeperMetadataStore:
    """Cluster metadata in ZooKeeper; see the module doc. :meth:`close` ends the session."""

    #: Only the file-backed store recovers from a previous copy; ZooKeeper keeps no local one.
    recovered_from_previous = False

    def __init__(self, connect: str, *, timeout: float = DEFAULT_TIMEOUT,
                 session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                 run: Callable[[Callable[[], None]], object] | None = None,
                 install: Callable[[Callable[[], None]], object] | None = None) -> None:
        if run is not None and install is not None:
            raise ValueError("run and install exclude each other")
        self.session = ZkSession(connect, timeout=timeout, session_timeout=session_timeout,
                                 run=run)
        self._install = install
        self._lock = threading.RLock()
        self._seq_lock = threading.Lock()
        self._next_seq = 1
        self._live_seq = 0  # the snapshot whose brokers and controller the image holds
        self._listeners = Listeners()
        self._registrations: dict[int, BrokerInfo] = {}
        self._keep_registered = True
        self._refresh_pending = False
        try:
            self._cluster_id = self._init_tree()
            data = self._read_data(None)
            assert data is not None
            brokers, controller = self._read_live()
        except BaseException:
            self.session.close()
            raise
        #: The data of the installed image, at its data version (incremental reads start
        #: from it).
        self._data = data
        self._image = MetadataImage(self._cluster_id, 0, controller, brokers, data.topics,
                                    data.broker_configs, data.scram, data.acls, data.quotas)
        self.session.on_new_session(self._reregister)
        self.session.on_connected(self._schedule_refresh)

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        return self._listeners.subscribe(listener)

    def close(self) -> None:
        """End the session (its ephemeral znodes go at once) and the worker thread."""
        self.session.close()

    # -- writes ---------------------------------------------------------------------------

    def write(self, expected_epoch: int, changes: Sequence[MetadataChange], *,
              fence: ControllerFence | None = None) -> MetadataImage:
        """The contract's conditional write; with ``fence``, also conditional on the
        controller epoch (``NOT_CONTROLLER`` when another controller was elected since)."""
        with self._lock:
            image = self._image
            if expected_epoch != image.epoch:
                raise StaleMetadataError(expected_epoch, image.epoch)
            if not changes:
                return image
            new = apply_changes(image, changes)
            base = self._data
            try:
                hints = self._commit(image, new, base, fence)
            except StaleMetadataError:
                self._refresh_locked()
                raise StaleMetadataError(expected_epoch, self._image.epoch) from None
            self._data = _Data.of(new, base.version + 1, hints)
            self._set_image(new)
            return new

    def commit(self, expected_epoch: int, changes: Sequence[MetadataChange], *,
               fence: ControllerFence | None = None) -> None:
        """:meth:`write` for a thread other than the owner's (the controller's writer, so
        the event loop never waits on ZooKeeper): the same conditional multi-op, but the new
        image is installed by the owner's refresh (the epoch znode's watch), not here.
        :class:`StaleMetadataError` when the image moved on (a refresh is on its way).
        A broker's store (``install``) hands the written data to the owner at once, as a
        refresh would, so the writer's own broker need not wait for the watch."""
        with self._lock:
            image, base = self._image, self._data
        if expected_epoch != image.epoch:
            raise StaleMetadataError(expected_epoch, image.epoch)
        if changes:
            new = apply_changes(image, changes)
            hints = self._commit(image, new, base, fence)
            if self._install is not None:
                self._deliver(_Snapshot(0, _Data.of(new, base.version + 1, hints), {}, -1))

    def _commit(self, image: MetadataImage, new: MetadataImage, base: _Data,
                fence: ControllerFence | None) -> list[zk.ChangeHint]:
        """One multi-op turning ``image``'s znodes into ``new``'s, conditional on the data
        version (and the controller epoch's znode version, with ``fence``); returns the
        change hints it wrote."""
        version = base.version + 1
        topics, other = _changed_sections(image, new)
        data, hints = zk.encode_change_hints(base.hints, version, other, topics)
        controller_epoch = fence.epoch if fence is not None else 0
        delta = (zk.encode_delta(version, {n: new.topics.get(n) for n in topics},
                                 controller_epoch) if topics else None)
        for attempt in (1, 2):
            tx = self.session.transaction()
            tx.set_data(zk.METADATA_EPOCH, data, version=base.version)
            if fence is not None:
                tx.check(zk.CONTROLLER_EPOCH, fence.zk_version)
            _diff_ops(tx, image, new, controller_epoch)
            size = _request_bytes(tx)
            if size > zk.REQUEST_BYTES:  # ZooKeeper would close the connection
                raise MetadataWriteRefusedError(
                    f"the metadata write is about {size} bytes, over ZooKeeper's request "
                    f"bound ({zk.REQUEST_BYTES}): write fewer topics or partitions at once")
            if delta is not None and size + len(delta) + 100 > zk.REQUEST_BYTES:
                delta = None  # the write alone fits ZooKeeper's bound: its readers read
            if delta is not None:
                tx.create(zk.delta_path(version), delta)
            try:
                self.session.commit(tx, "a metadata write")
                break
            except TransactionFailedError as e:
                if e.index == 0 and isinstance(e.error, BadVersionError):
                    raise StaleMetadataError(image.epoch, image.epoch + 1) from None
                if fence is not None and e.index == 1:
                    raise NotControllerError(
                        f"controller epoch {fence.epoch} is no longer current: another "
                        "controller was elected") from None
                if (delta is not None and attempt == 1 and e.index == len(tx.operations) - 1
                        and isinstance(e.error, NodeExistsError)):
                    # a delta left by a tree whose epoch znode was made anew: not this write's
                    self.session.wait(self.session.client.delete_async(zk.delta_path(version)),
                                      "delete a stale metadata delta")
                    continue
                raise MetadataWriteRefusedError(str(e)) from e
        if version % zk.DELTA_KEEP == 0:
            self._trim_deltas(version - zk.DELTA_KEEP)
        return hints

    def _trim_deltas(self, below: int) -> None:
        """Delete the topic deltas of data versions before ``below`` (in the background: a
        delta nobody deletes only costs ZooKeeper memory until a later trim)."""
        client = self.session.client

        def trim(listed: IAsyncResult) -> None:
            if not listed.successful():
                return
            for name in listed.value:
                if name.isdigit() and int(name) < below:
                    client.delete_async(f"{zk.METADATA_DELTAS}/{name}")
        client.get_children_async(zk.METADATA_DELTAS).rawlink(trim)

    def register_broker(self, broker: BrokerInfo) -> None:
        """Register (or update) ``broker`` as an ephemeral znode of this store's session
        (the image has it on return; ZooKeeper is called on the caller's thread)."""
        with self._lock:
            path = zk.broker_path(broker.node_id)
            data = zk.encode_broker(broker)
            if broker.node_id in self._registrations:
                self.session.wait(self.session.client.set_async(path, data), f"update {path}")
            else:
                self._create_registration(broker.node_id, data)
            self._registrations[broker.node_id] = broker
            self._refresh_locked()

    def retire(self) -> None:
        """The broker is stopping: a registration deleted from now on is not re-created."""
        self._keep_registered = False

    def allocate_producer_id_block(self, size: int) -> ProducerIdBlock:
        """Compare-and-set on ``/latest_producer_id_block`` (retried while others win)."""
        owner = min(self._registrations, default=-1)
        deadline = time.monotonic() + self.session.timeout
        while True:
            current = self.session.get_or_none(zk.PRODUCER_ID_BLOCK)
            first = 0 if current is None else zk.decode_producer_id_block_end(current[0]) + 1
            block = next_producer_id_block(first, size)
            data = zk.encode_producer_id_block(owner, block.first, block.last)
            client = self.session.client
            try:
                if current is None:
                    self.session.wait(client.create_async(zk.PRODUCER_ID_BLOCK, data),
                                      "reserve producer ids")
                else:
                    self.session.wait(client.set_async(zk.PRODUCER_ID_BLOCK, data,
                                                       version=current[1].version),
                                      "reserve producer ids")
                return block
            except (BadVersionError, NodeExistsError):
                if time.monotonic() > deadline:
                    raise ZooKeeperUnavailableError(
                        f"could not reserve producer ids within {self.session.timeout}s: "
                        "other brokers kept reserving blocks first") from None
                continue  # another broker reserved a block in between: try the next one

    # -- reading --------------------------------------------------------------------------

    def _init_tree(self) -> str:
        """Create the persistent parents; the cluster id (made once, by the first store)."""
        session = self.session
        for path in (*zk.PARENTS, zk.METADATA_EPOCH):
            session.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            session.wait(session.client.create_async(
                zk.CLUSTER_ID, zk.encode_cluster_id(new_cluster_id())), "create the cluster id")
        data, _ = session.get(zk.CLUSTER_ID)
        return zk.decode_cluster_id(data)

    def _watch(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # NONE: the connection dropped; on_connected acts
            self._schedule_refresh()

    def _schedule_refresh(self) -> None:
        if not self._refresh_pending:
            self._refresh_pending = True
            self.session.submit(self._refresh)

    def refresh(self) -> None:
        """Re-read ZooKeeper now (watches do it soon anyway): e.g. right after this broker
        was elected, so its image names it controller at once. With ``install`` the read
        runs on the caller's thread (never call it on the loop then) and the image is
        installed through ``install``, after whatever was handed over before."""
        if self._install is None:
            with self._lock:
                self._refresh_locked()
        else:
            self._deliver(self._read_snapshot())

    def _refresh(self) -> None:
        self._refresh_pending = False
        self.refresh()

    def _refresh_locked(self) -> None:
        """Re-read what may have changed (re-arming the watches) and install it, on the
        caller's thread."""
        self._apply(self._read_snapshot())

    def _read_snapshot(self) -> _Snapshot:
        with self._seq_lock:
            seq, self._next_seq = self._next_seq, self._next_seq + 1
        data = self._read_data(self._data)
        brokers, controller = self._read_live()
        if self._keep_registered and any(n not in brokers for n in list(self._registrations)):
            self.session.submit(self._restore_registrations)
        return _Snapshot(seq, data, brokers, controller)

    def _deliver(self, snapshot: _Snapshot) -> None:
        """Hand ``snapshot`` to ``install`` (the broker's loop), which applies it."""
        assert self._install is not None

        def apply() -> None:
            if not self.session.closed:
                with self._lock:
                    self._apply(snapshot)
        try:
            self._install(apply)
        except RuntimeError:  # the loop is closed: the broker is stopping
            log.debug("metadata read after the event loop closed; dropped")

    def _apply(self, snapshot: _Snapshot) -> None:
        """Install what ``snapshot`` read if it changes the image (lock held): its data only
        when newer than the image's, its brokers and controller only when it began after the
        read that supplied the image's."""
        image = self._image
        data = snapshot.data
        if data is not None and data.version <= self._data.version:
            data = None
        brokers, controller = image.brokers, image.controller_id
        if snapshot.seq > self._live_seq:
            self._live_seq = snapshot.seq
            brokers, controller = snapshot.brokers, snapshot.controller
        if data is None and brokers == image.brokers and controller == image.controller_id:
            return
        new = dataclasses.replace(image, epoch=image.epoch + 1, brokers=brokers,
                                  controller_id=controller)
        if data is not None:
            new = dataclasses.replace(new, topics=data.topics, broker_configs=data.broker_configs,
                                      scram_credentials=data.scram, acls=data.acls,
                                      client_quotas=data.quotas)
            self._data = data
        self._set_image(new)

    def _set_image(self, image: MetadataImage) -> None:
        self._image = image
        self._listeners.publish(image)

    def _read_live(self) -> tuple[dict[int, BrokerInfo], int]:
        """The registered brokers and the controller's id (-1: none), watched."""
        session = self.session
        names = session.children(zk.BROKER_IDS, self._watch)
        brokers = {}
        for name, got in zip(names, session.get_many(
                [f"{zk.BROKER_IDS}/{n}" for n in names], self._watch), strict=True):
            if got is not None:
                brokers[int(name)] = zk.decode_broker(int(name), got[0], got[1].czxid)
        controller = -1
        if session.exists(zk.CONTROLLER, self._watch) is not None:
            got_controller = session.get_or_none(zk.CONTROLLER)
            if got_controller is not None:
                controller = zk.decode_controller(got_controller[0])
        return dict(sorted(brokers.items())), controller

    def _read_data(self, base: _Data | None) -> _Data | None:
        """The data znodes at a consistent version; None when still at ``base``'s. Only the
        topics the change hints name are read again when they cover every write since
        ``base`` (anything else changed: the non-topic znodes too); else everything."""
        session = self.session
        while True:
            raw, stat = session.get(zk.METADATA_EPOCH, self._watch)
            version = stat.version
            if base is not None and version <= base.version:
                return None
            hints = zk.decode_change_hints(raw)
            changed = (zk.changed_since(hints, base.version, version)
                       if base is not None else None)
            if base is None or changed is None:
                data = _read_data_znodes(session, version, hints)
            else:
                data = _read_changed_znodes(session, version, hints, base, *changed)
            if session.get(zk.METADATA_EPOCH)[1].version == version:
                return data
            # a write committed while we read: read again

    def _create_registration(self, node_id: int, data: bytes) -> None:
        path = zk.broker_path(node_id)
        try:
            self.session.wait(self.session.client.create_async(path, data, ephemeral=True),
                              f"register broker {node_id}")
        except NodeExistsError:
            raise BrokerIdAlreadyRegisteredError(
                f"broker id {node_id} is already registered (another live broker holds "
                f"{path})") from None

    def _restore_registrations(self) -> None:
        """Re-create this session's registrations that were deleted while it lives (worker
        thread; the lock is not held while ZooKeeper answers)."""
        if not self._keep_registered or self.session.closed:
            return
        present = set(self.session.children(zk.BROKER_IDS))
        with self._lock:
            registrations = dict(self._registrations)
        restored = False
        for node_id, broker in registrations.items():
            if str(node_id) in present or not self._keep_registered:
                continue
            try:
                self._create_registration(node_id, zk.encode_broker(broker))
            except BrokerIdAlreadyRegisteredError:
                continue  # re-created meanwhile (a session expiry's re-registration)
            log.warning("the registration of broker %d was deleted while its ZooKeeper "
                        "session lives (found dead by the controller?): registered again, "
                        "with a new broker epoch", node_id)
            restored = True
        if restored:
            self.refresh()

    def _reregister(self) -> None:
        """After a session expiry: the ephemeral registrations again (worker thread; the
        lock is not held while ZooKeeper answers)."""
        with self._lock:
            registrations = dict(self._registrations)
        for node_id, broker in registrations.items():
            try:
                self._create_registration(node_id, zk.encode_broker(broker))
            except BrokerIdAlreadyRegisteredError as e:
                log.error("cannot re-register after a session expiry: %s", e)
        self.refresh()


def _read_topics(session: ZkSession, names: list[str]) -> dict[str, TopicInfo | None]:
    """The named topics' znodes (None for a topic that does not exist)."""
    assignments = session.get_many([zk.topic_path(n) for n in names])
    configs = session.get_many([zk.topic_config_path(n) for n in names])
    decoded = {name: zk.decode_topic(got[0])
               for name, got in zip(names, assignments, strict=True) if got is not None}
    state_paths = [(name, p) for name, (_, by_partition, _) in decoded.items()
                   for p in by_partition]
    states = dict(zip(state_paths, session.get_many(
        [zk.state_path(name, p) for name, p in state_paths]), strict=True))
    topics: dict[str, TopicInfo | None] = {}
    for name, config in zip(names, configs, strict=True):
        if name not in decoded:
            topics[name] = None
            continue
        topic_id, replicas, internal = decoded[name]
        partitions = []
        for p in sorted(replicas):
            state = states[(name, p)]
            if state is None:
                raise MetadataWriteRefusedError(f"{zk.state_path(name, p)} is missing")
            partitions.append(zk.decode_state(p, replicas[p], state[0]))
        topics[name] = TopicInfo(name, topic_id, tuple(partitions),
                                 zk.decode_config(config[0]) if config else {}, internal)
    return topics


def _read_changed_znodes(session: ZkSession, version: int, hints: list[zk.ChangeHint],
                         base: _Data, changed: set[str], other: bool) -> _Data:
    """``base`` with the ``changed`` topics (and with ``other``, every non-topic znode)
    read again; the topics that did not change keep their objects. The changed topics come
    from the writes' deltas (one read a write); a write without one (too large, trimmed, or
    made by an older strom) has its topics read from their znodes after every delta is
    applied — they are read at ``version``, so they are newer than any delta."""
    topics = dict(base.topics)
    unread = changed
    if version - base.version <= zk.DELTA_KEEP:
        unread = set()
        named = {v: names for v, _, names in hints
                 if base.version < v <= version and names}  # all lists: changed_since said
        versions = sorted(named)
        for v, got in zip(versions, session.get_many([zk.delta_path(v) for v in versions]),
                          strict=True):
            delta = zk.decode_delta(got[0], v) if got is not None else None
            if delta is None:
                unread.update(named[v])
                continue
            for name, topic in delta.items():
                if topic is None:
                    topics.pop(name, None)
                else:
                    topics[name] = topic
    for name, topic in _read_topics(session, sorted(unread)).items():
        if topic is None:
            topics.pop(name, None)
        else:
            topics[name] = topic
    if not other:
        return _Data(version, topics, base.broker_configs, base.scram, base.acls,
                     base.quotas, hints)
    rest = _read_data_znodes(session, version, hints, with_topics=False)
    return dataclasses.replace(rest, topics=topics)


def _read_data_znodes(session: ZkSession, version: int, hints: list[zk.ChangeHint], *,
                      with_topics: bool = True) -> _Data:
    topics: dict[str, TopicInfo] = {}
    if with_topics:
        names = sorted(session.children(zk.TOPICS))
        topics = {name: topic for name, topic in _read_topics(session, names).items()
                  if topic is not None}
    resources = session.children(zk.BROKER_CONFIGS)
    broker_configs = {
        zk.resource_of_znode(r): zk.decode_config(got[0])
        for r, got in zip(resources, session.get_many(
            [f"{zk.BROKER_CONFIGS}/{r}" for r in resources]), strict=True)
        if got is not None and zk.decode_config(got[0])}
    scram, quotas = _read_users_and_clients(session)
    return _Data(version, topics, broker_configs, scram, _read_acls(session), quotas, hints)


def _read_users_and_clients(session: ZkSession) -> tuple[
        dict[str, dict[str, ScramCredential]], dict[QuotaEntity, dict[str, float]]]:
    """SCRAM credentials and client quotas, from ``/config/users/<u>`` (both),
    ``/config/users/<u>/clients/<c>``, ``/config/clients/<c>`` and ``/config/ips/<ip>``
    (quotas)."""
    scram: dict[str, dict[str, ScramCredential]] = {}
    quotas: dict[QuotaEntity, dict[str, float]] = {}

    def add_quotas(entity: QuotaEntity, config: Mapping[str, str]) -> None:
        values = {k: zk.decode_quota(v) for k, v in config.items() if k in zk.QUOTA_KEYS}
        if values:
            quotas[entity] = values

    users = session.children(zk.USER_CONFIGS)
    with_clients = []
    for name, got in zip(users, session.get_many(
            [f"{zk.USER_CONFIGS}/{u}" for u in users]), strict=True):
        if got is None:
            continue
        user = zk.desanitize(name)
        config = zk.decode_config(got[0])
        creds = {k: zk.decode_scram(v) for k, v in config.items() if k.startswith("SCRAM-")}
        if creds and user is not None:
            scram[user] = creds
        add_quotas((("user", user),), config)
        if got[1].numChildren:
            with_clients.append(user)
    for user in with_clients:
        parent = zk.user_clients_path(user)
        clients = session.children(parent)
        for name, got in zip(clients, session.get_many(
                [f"{parent}/{c}" for c in clients]), strict=True):
            if got is not None:
                add_quotas((("client-id", zk.desanitize(name)), ("user", user)),
                           zk.decode_config(got[0]))
    clients = session.children(zk.CLIENT_CONFIGS)
    for name, got in zip(clients, session.get_many(
            [f"{zk.CLIENT_CONFIGS}/{c}" for c in clients]), strict=True):
        if got is not None:
            add_quotas((("client-id", zk.desanitize(name)),), zk.decode_config(got[0]))
    ips = session.children(zk.IP_CONFIGS)
    for name, got in zip(ips, session.get_many(
            [f"{zk.IP_CONFIGS}/{ip}" for ip in ips]), strict=True):
        if got is not None:
            values = {k: zk.decode_quota(v) for k, v in zk.decode_config(got[0]).items()
                      if k in zk.IP_QUOTA_KEYS}
            if values:
                quotas[(("ip", None if name == zk.DEFAULT_RESOURCE else name),)] = values
    return scram, quotas


def _read_acls(session: ZkSession) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    acls = {}
    for pattern_type, root in zk.ACL_ROOTS.items():
        for type_znode in session.children(root):
            parent = f"{root}/{type_znode}"
            names = session.children(parent)
            for name, got in zip(names, session.get_many([f"{parent}/{n}" for n in names]),
                                 strict=True):
                if got is not None and (entries := zk.decode_acls(got[0])):
                    acls[zk.acl_pattern(pattern_type, type_znode, name)] = entries
    return acls


def _request_bytes(tx: TransactionRequest) -> int:
    """About the size of ``tx`` as sent (each operation's header, path, data, version and
    ACL; a few bytes over rather than under)."""
    return sum(64 + len(op.path) + len(getattr(op, "data", b"") or b"")
               for op in tx.operations)


def _assignment(p: PartitionInfo) -> zk.Assignment:
    return p.replicas, p.adding_replicas, p.removing_replicas


def _changed_sections(old: MetadataImage, new: MetadataImage) -> tuple[list[str], bool]:
    """The topics whose znodes differ between the images, and whether any other znode
    does (the change hints of a write from ``old`` to ``new``)."""
    topics = [n for n in _changed_topics(old.topics, new.topics)
              if old.topics.get(n) != new.topics.get(n)]
    other = (old.broker_configs != new.broker_configs or old.acls != new.acls
             or _user_and_client_znodes(old) != _user_and_client_znodes(new))
    return topics, other


def _diff_ops(tx: TransactionRequest, old: MetadataImage, new: MetadataImage,
              controller_epoch: int) -> None:
    """Add to ``tx`` the znode operations that turn ``old``'s data into ``new``'s."""
    for name in _changed_topics(old.topics, new.topics):
        before, after = old.topics.get(name), new.topics.get(name)
        if before == after:
            continue
        if before is not None and (after is None or after.topic_id != before.topic_id):
            _delete_topic(tx, before)
            before = None
        if after is None:
            continue
        if before is None:
            _create_topic(tx, after, controller_epoch)
            continue
        if (before.internal != after.internal
                or [_assignment(p) for p in before.partitions]
                != [_assignment(p) for p in after.partitions[:len(before.partitions)]]
                or len(after.partitions) != len(before.partitions)):
            tx.set_data(zk.topic_path(name), zk.encode_topic(after.topic_id, after.partitions,
                                                             after.internal))
        old_parts = {p.partition: p for p in before.partitions}
        for p in after.partitions:
            if p.partition not in old_parts:
                tx.create(zk.partition_path(name, p.partition))
                tx.create(zk.state_path(name, p.partition), zk.encode_state(p, controller_epoch))
            elif p != old_parts[p.partition]:
                tx.set_data(zk.state_path(name, p.partition), zk.encode_state(p, controller_epoch))
        if before.configs != after.configs:
            tx.set_data(zk.topic_config_path(name), zk.encode_config(after.configs))
    _diff_znodes(tx, old.broker_configs, new.broker_configs, zk.broker_config_path,
                 zk.encode_config)
    _diff_znodes(tx, _user_and_client_znodes(old), _user_and_client_znodes(new),
                 lambda path: path, lambda data: data)
    _diff_znodes(tx, old.acls, new.acls, zk.acl_path, zk.encode_acls)


def _changed_topics(old: Mapping[str, TopicInfo], new: Mapping[str, TopicInfo]) -> list[str]:
    """The names whose topic is not the same object in both (sorted): unchanged topics are
    shared between an image and the next, so nothing but these needs comparing."""
    return sorted({n for n, t in new.items() if old.get(n) is not t}
                  | {n for n in old if n not in new})

def _create_topic(tx: TransactionRequest, topic: TopicInfo, controller_epoch: int) -> None:
    name = topic.name
    tx.create(zk.topic_path(name), zk.encode_topic(topic.topic_id, topic.partitions,
                                                   topic.internal))
    tx.create(zk.partitions_path(name))
    for p in topic.partitions:
        tx.create(zk.partition_path(name, p.partition))
        tx.create(zk.state_path(name, p.partition), zk.encode_state(p, controller_epoch))
    tx.create(zk.topic_config_path(name), zk.encode_config(topic.configs))


def _delete_topic(tx: TransactionRequest, topic: TopicInfo) -> None:
    name = topic.name
    for p in topic.partitions:
        tx.delete(zk.state_path(name, p.partition))
        tx.delete(zk.partition_path(name, p.partition))
    tx.delete(zk.partitions_path(name))
    tx.delete(zk.topic_path(name))
    tx.delete(zk.topic_config_path(name))


def _user_and_client_znodes(image: MetadataImage) -> dict[str, bytes]:
    """Path → data of every user / client-id znode ``image`` needs: a user's SCRAM
    credentials and its own quotas share ``/config/users/<u>``, which also stays (maybe with
    an empty config) while the user has per-client-id quotas beneath it."""
    configs: dict[str, dict[str, str]] = {}
    bare: set[str] = set()
    for user, creds in image.scram_credentials.items():
        configs.setdefault(zk.user_config_path(user), {}).update(
            (mech, zk.encode_scram(c)) for mech, c in creds.items())
    for entity, values in image.client_quotas.items():
        names = dict(entity)
        if "user" in names and "client-id" in names:
            configs.setdefault(zk.user_config_path(names["user"]), {})
            bare.add(zk.user_clients_path(names["user"]))
        configs.setdefault(zk.quota_entity_path(entity), {}).update(
            (key, zk.encode_quota(key, value)) for key, value in values.items())
    znodes = {path: zk.encode_config(dict(sorted(config.items())))
              for path, config in configs.items()}
    znodes.update((path, b"") for path in bare)
    return znodes


def _diff_znodes(tx: TransactionRequest, old: Mapping[K, V], new: Mapping[K, V],
                 path: Callable[[K], str], encode: Callable[[V], bytes]) -> None:
    """One znode per key (configs, credentials, ACLs, quotas): created, replaced, or deleted
    when the key goes (an empty set is never a key: the image drops it). Deletions come
    first, children before their parents; then creations, parents before their children
    (a path sorts before the paths beneath it)."""
    keys = sorted(old.keys() | new.keys(), key=path)
    for key in reversed(keys):
        if key not in new:
            tx.delete(path(key))
    for key in keys:
        before, after = old.get(key), new.get(key)
        if after is None or before == after:
            continue
        if before is None:
            tx.create(path(key), encode(after))
        else:
            tx.set_data(path(key), encode(after))
