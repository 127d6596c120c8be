"""The network cluster: the Kafka wire protocol through confluent-kafka (librdkafka).

The same :class:`~logmarshal.cluster.Cluster` as the embedded one, against logmarshal's own
broker or an Apache Kafka cluster. librdkafka is used the way Kafka intends: an AdminClient
for topics and configs, a Producer (acks=all when ``durable``) whose delivery reports give
the offsets (and for each :class:`logmarshal.Producer` a librdkafka producer of its own,
:meth:`NetworkCluster.client_producer`), for :meth:`NetworkCluster.fetch` one assign-only
Consumer per partition being read, and for a logmarshal Consumer one assign-only Consumer
for all its claims (:meth:`NetworkCluster.open_reader`, assigned incrementally), so that
independent readers never move each other's positions. No group protocol is used:
positions live in ``__marshal`` (librdkafka still wants a ``group.id``; without
FindCoordinator it sends no group traffic).

The replay of ``__marshal`` reads stored batches through a client of its own instead
(Fetch and ListOffsets on a raw socket, :mod:`.fetch_client`), so a damaged batch is
skipped as the embedded cluster skips it.

Modules: :mod:`.cluster` (:class:`NetworkCluster`), :mod:`.readers` (librdkafka's
readers), :mod:`.fetch_client` (the replay's raw Kafka client), :mod:`.produce`
(writes and their delivery reports), :mod:`.admin_requests` (AdminClient questions),
:mod:`.settings` (librdkafka settings), :mod:`.error_map` (librdkafka's errors as
logmarshal's exceptions).
"""

from ..errors import NetworkError
from .cluster import NetworkCluster
from .error_map import produce_error
from .fetch_client import _batch_transport as _batch_transport  # for test_network_damage

__all__ = ["NetworkCluster", "NetworkError", "produce_error"]
