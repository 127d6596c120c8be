"""logmarshal's broker: the log served over a subset of the Kafka wire protocol.

``server`` runs connections, ``handlers`` answers each API from a :class:`storage.DataDir`,
``wire`` frames requests and responses (kafka-python's protocol classes, pinned), and
``cluster_file`` places partitions on several brokers.
"""

from .cluster_file import BrokerAddress, ClusterLayout, format_cluster_file, load_cluster_file
from .server import BrokerConfig, BrokerServer, BrokerThread, run_broker
from .wire import SUPPORTED

__all__ = [
    "SUPPORTED",
    "BrokerAddress",
    "BrokerConfig",
    "BrokerServer",
    "BrokerThread",
    "ClusterLayout",
    "format_cluster_file",
    "load_cluster_file",
    "run_broker",
]
