"""A broker on ZooKeeper metadata: ``zookeeper.connect`` set selects the
:class:`~strom.metadata.zookeeper.ZooKeeperMetadataStore` instead of the metadata file in the
data directory (the default, which needs no ZooKeeper).

The store, the broker's ephemeral registration, its candidacy for controller and, while it
is the controller, the :class:`~strom.controller.driver.ControllerDriver` that re-elects
leaders when brokers come and go. On a clean stop the broker first asks the controller for a
controlled shutdown (:func:`controlled_shutdown`). The store's watch reactions (refreshes,
re-registration after a session expiry, the controller election) read ZooKeeper on the
store session's worker thread, never on the event loop, so a slow or unreachable ZooKeeper
does not stall produce / fetch; the images they read are installed on the loop
(``install=loop.call_soon_threadsafe``), in order, like everything else that touches the
image. Each ZooKeeper call is bounded by ``zookeeper.connection.timeout.ms``. Still on the
loop: registration at start, config / ACL administration writes, topic deletion and
producer-id blocks (each waits on ZooKeeper, bounded by that timeout); CreateTopics and
CreatePartitions write from the topic-write queue's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from strom.client.conn import Connection
from strom.client.security import ClientSecurity
from strom.common.config import BrokerConfig, TopicConfig
from strom.common.errors import KafkaError
from strom.controller.driver import ControllerDriver
from strom.controller.election import ControllerElection
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.protocol import controlled_shutdown as codec
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.broker")


def zookeeper_connect(config: BrokerConfig) -> str | None:
    """The connect string (``host:port[,…][/chroot]``), or None: the file-backed store."""
    connect = config.get("zookeeper.connect")
    return str(connect) if connect else None


def open_store(config: BrokerConfig, connect: str) -> ZooKeeperMetadataStore:
    """Connect (raises ZooKeeperUnavailableError when ZooKeeper does not answer in time)."""
    return ZooKeeperMetadataStore(
        connect, timeout=int(config.get("zookeeper.connection.timeout.ms")) / 1000,
        session_timeout=int(config.get("zookeeper.session.timeout.ms")) / 1000,
        install=asyncio.get_running_loop().call_soon_threadsafe)


def stand_for_controller(store: ZooKeeperMetadataStore, node_id: int,
                         config: Callable[[], BrokerConfig],
                         topic_config: Callable[[str], TopicConfig]
                         ) -> tuple[ControllerElection, ControllerDriver]:
    """Start this broker's candidacy and the driver that acts while it is controller; once
    elected its image names it controller at once, and the driver reconciles everything.
    The callbacks run on the store session's worker thread: the refresh reads there and
    hands its image to the loop ahead of the driver's activation."""
    def elected(epoch: int) -> None:
        log.info("broker %d elected controller (controller epoch %d)", node_id, epoch)
        store.refresh()
        driver.elected(epoch)

    election = ControllerElection(store, node_id, on_elected=elected,
                                  on_resigned=lambda: driver.resigned())
    driver = ControllerDriver(store, election, config, topic_config)
    election.start()
    return election, driver


#: The ControlledShutdown version strom's brokers send (Kafka 2.4+ brokers take it too).
CONTROLLED_SHUTDOWN_VERSION = 3


async def controlled_shutdown(config: BrokerConfig, store: ZooKeeperMetadataStore,
                              node_id: int, security: ClientSecurity | None) -> bool:
    """Ask the controller (found in the image, reached on its inter-broker listener) to move
    this broker's leadership away, retrying while partitions remain
    (``controlled.shutdown.max.retries``, ``controlled.shutdown.retry.backoff.ms``); True
    once none remain. Never raises: the broker stops either way.

    Bounded: each attempt (connect, negotiate, ask, answer) may take
    ``controller.socket.timeout.ms``, and there is no wait after the last one, so a broker
    whose controller does not answer (paused, cut off) stops after at most max.retries x
    timeout + (max.retries - 1) x backoff (100 s with the defaults; Kafka's ZooKeeper-mode
    broker may take max.retries x (controller.socket.timeout.ms to connect +
    request.timeout.ms to answer + backoff) = 195 s). Without a connected ZooKeeper session
    (ZooKeeper gone, or the session expired) it does not wait at all: the controller moves
    leadership only through ZooKeeper, and takes it from a broker whose session ends anyway.
    With no controller in the image it backs off and looks again, as Kafka does."""
    retries = int(config.get("controlled.shutdown.max.retries"))
    backoff = int(config.get("controlled.shutdown.retry.backoff.ms")) / 1000
    timeout = int(config.get("controller.socket.timeout.ms")) / 1000
    for attempt in range(1, retries + 1):
        if not store.session.connected:
            log.warning("controlled shutdown of broker %d skipped: no ZooKeeper session "
                        "(the controller moves its leadership when the session ends)", node_id)
            return False
        image = store.image
        controller = image.brokers.get(image.controller_id)
        outcome: str | None = "no controller"
        if controller is not None:
            me = image.brokers.get(node_id)  # its epoch: this registration's
            epoch = me.epoch if me is not None else codec.UNKNOWN_BROKER_EPOCH
            try:
                async with asyncio.timeout(timeout):
                    outcome = await _ask(controller.host, controller.port, controller.node_id,
                                         node_id, epoch, timeout, security)
            except TimeoutError:
                outcome = f"controller {controller.node_id} did not answer within {timeout:g}s"
            if outcome is None:
                log.info("controlled shutdown of broker %d succeeded", node_id)
                return True
        log.warning("controlled shutdown of broker %d, attempt %d of %d: %s", node_id,
                    attempt, retries, outcome)
        if attempt < retries:
            await asyncio.sleep(backoff)
    return False


async def _ask(host: str, port: int, controller_id: int, node_id: int, epoch: int,
               timeout: float, security: ClientSecurity | None) -> str | None:
    """One ControlledShutdown round trip: None when no partition remains, else why not."""
    conn = Connection(host, port, node_id=controller_id,
                      client_id=f"strom-controlled-shutdown-{node_id}",
                      request_timeout_s=timeout, connect_timeout_s=timeout, security=security)
    try:
        await conn.open()
        version = CONTROLLED_SHUTDOWN_VERSION
        raw = await conn.send(ApiKey.CONTROLLED_SHUTDOWN, version, codec.encode_request(
            codec.ControlledShutdownRequest(node_id, epoch), version))
        assert raw is not None
        answer = codec.decode_response(raw, version)
    except (KafkaError, OSError) as exc:
        return f"controller {controller_id} unreachable: {exc}"
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
    if answer.error_code == 0 and not answer.remaining_partitions:
        return None
    return f"error {answer.error_code}, {len(answer.remaining_partitions)} partitions remaining"
