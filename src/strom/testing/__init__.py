"""What users' tests need: a real strom broker on a free port, as a context manager or fixture.

    from strom.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

With pytest, the ``strom_broker`` fixture (installed with strom) gives the same, one broker per
test session; ``strom_broker_factory`` starts dedicated brokers with their own settings.

A cluster (ZooKeeper and several brokers, real processes): ``EmbeddedCluster(brokers=3)``,
or the ``strom_cluster`` / ``strom_cluster_factory`` fixtures.
"""

from strom.testing.broker import EmbeddedBroker
from strom.testing.cluster import EmbeddedCluster

__all__ = ["EmbeddedBroker", "EmbeddedCluster"]
