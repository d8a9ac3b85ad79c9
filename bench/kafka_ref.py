"""Start Apache Kafka 4.x KRaft nodes (each broker + controller) from a folder of jars, for
benchmarks that pair strom with the reference broker: one node, or a cluster of several
(:func:`start_kafka_cluster`, a static quorum of all of them).

    with start_kafka("/work/kafka-ref/lib") as kafka:   # or KAFKA_LIB=...
        AdminClient({"bootstrap.servers": kafka.bootstrap})

The jars are ``org.apache.kafka:kafka_2.13`` and its dependencies (plus slf4j 2 and a log4j2
binding), as ``mvn dependency:copy-dependencies`` leaves them. The node is formatted with a
random cluster id in a temporary directory, started with ``-Xmx1g`` and WARN logging, and
removed with its directory by :meth:`KafkaNode.stop`. ``settings`` add or override server
properties.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from brokers import free_port, wait_port  # type: ignore[import-not-found]

DEFAULT_LIB = os.environ.get("KAFKA_LIB", "/work/kafka-ref/lib")

LOG4J2 = """\
Configuration:
  status: warn
  Appenders:
    Console:
      name: STDERR
      target: SYSTEM_ERR
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: warn
      AppenderRef:
        - ref: STDERR
"""


def kafka_available(lib: str = DEFAULT_LIB) -> bool:
    return shutil.which("java") is not None and any(Path(lib).glob("kafka_2.13-*.jar"))


@dataclass
class KafkaNode:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path
    name: str = "kafka"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> KafkaNode:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def _java(lib: str, directory: Path) -> list[str]:
    log_config = directory / "log4j2.yaml"
    log_config.write_text(LOG4J2)
    return ["java", f"-Dlog4j2.configurationFile={log_config}", "-cp", f"{lib}/*"]


def _format(java: list[str], config: Path, cluster_id: str) -> None:
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                    str(config)], check=True, capture_output=True)


def _random_cluster_id(java: list[str]) -> str:
    return subprocess.run([*java, "kafka.tools.StorageTool", "random-uuid"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _launch(java: list[str], heap: str, config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([java[0], f"-Xmx{heap}", *java[1:], "kafka.Kafka", str(config)],
                            stdout=subprocess.DEVNULL,
                            stderr=open(config.parent / "stderr.log", "wb"))


def _properties(node_id: int, port: int, controller_port: int, voters: str, data: Path,
                replicas: int) -> dict[str, str]:
    min_isr = str(min(2, replicas))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data),
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
    }


def start_kafka(lib: str = DEFAULT_LIB, settings: dict[str, str] | None = None,
                heap: str = "1g") -> KafkaNode:
    """Format and start a single KRaft node; returns once its client port accepts."""
    directory = Path(tempfile.mkdtemp(prefix="kafka-ref-"))
    port, controller_port = free_port(), free_port()
    properties = {**_properties(1, port, controller_port, f"1@127.0.0.1:{controller_port}",
                                directory / "data", 1), **(settings or {})}
    config = directory / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    java = _java(lib, directory)
    _format(java, config, _random_cluster_id(java))
    process = _launch(java, heap, config)
    try:
        wait_port(port, timeout=120.0)
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return KafkaNode(process, port, directory)


@dataclass
class KafkaCluster:
    """Several KRaft nodes, each broker and controller (a static quorum of all of them)."""

    nodes: list[KafkaNode]
    directory: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.process.terminate()
        for node in self.nodes:
            try:
                node.process.wait(30)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def start_kafka_cluster(size: int = 3, lib: str = DEFAULT_LIB,
                        settings: dict[str, str] | None = None,
                        heap: str = "1g") -> KafkaCluster:
    """Format and start ``size`` combined KRaft nodes (internal topics replicated on all of
    them, min ISR 2); returns once every client port accepts."""
    directory = Path(tempfile.mkdtemp(prefix="kafka-ref-cluster-"))
    ports = [(free_port(), free_port()) for _ in range(size)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
    java = _java(lib, directory)
    cluster_id = _random_cluster_id(java)
    nodes: list[KafkaNode] = []
    try:
        for i, (port, controller_port) in enumerate(ports):
            node_dir = directory / f"node-{i + 1}"
            node_dir.mkdir()
            properties = {**_properties(i + 1, port, controller_port, voters,
                                        node_dir / "data", size), **(settings or {})}
            config = node_dir / "server.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
            _format(java, config, cluster_id)
            nodes.append(KafkaNode(_launch(java, heap, config), port, node_dir,
                                   name=f"kafka-{i + 1}"))
        for node in nodes:
            wait_port(node.port, timeout=120.0)
    except BaseException:
        for node in nodes:
            node.process.kill()
            node.process.wait()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return KafkaCluster(nodes, directory)
