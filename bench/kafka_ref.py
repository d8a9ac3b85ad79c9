"""Start one Apache Kafka 4.x KRaft node (broker + controller) from a folder of jars, for
benchmarks that pair strom with the reference broker.

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


def start_kafka(lib: str = DEFAULT_LIB, settings: dict[str, str] | None = None,
                heap: str = "1g") -> KafkaNode:
    """Format and start a single KRaft node; returns once its client port accepts."""
    directory = Path(tempfile.mkdtemp(prefix="kafka-ref-"))
    port, controller_port = free_port(), free_port()
    properties = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(directory / "data"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        **(settings or {}),
    }
    config = directory / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log_config = directory / "log4j2.yaml"
    log_config.write_text(LOG4J2)
    classpath = f"{lib}/*"
    java = ["java", f"-Dlog4j2.configurationFile={log_config}", "-cp", classpath]
    cluster_id = subprocess.run([*java, "kafka.tools.StorageTool", "random-uuid"],
                                check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                    str(config)], check=True, capture_output=True)
    process = subprocess.Popen([java[0], f"-Xmx{heap}", *java[1:], "kafka.Kafka", str(config)],
                               stdout=subprocess.DEVNULL,
                               stderr=open(directory / "stderr.log", "wb"))  # noqa: SIM115
    try:
        wait_port(port, timeout=120.0)
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return KafkaNode(process, port, directory)
