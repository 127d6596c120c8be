"""The threaded consumer: the edge that carries a :class:`logmarshal.core.MemberCore`'s
decisions out with threads, the log and the clock.

- :mod:`.consumer`: the public :class:`Consumer` and the glue (one lock around the core).
- :mod:`.config`: its settings, their one list with defaults and meanings
  (``Consumer.DEFAULT_CONFIG``), and how they become the core's ``CoreOptions``.
- :mod:`.writer`: coordination writes, one thread per coordination partition (one for all
  on the embedded cluster).
- :mod:`.fetcher`: one fetch loop for every held partition (one librdkafka consumer over
  the network, a long poll woken by appends embedded).
- :mod:`.handler`: ``Consumer.run``: retries and the dead-letter topic, on poll and commit.
- :mod:`.mirror`: on Apache Kafka, the positions we hold mirrored into Kafka's group offsets
  (for Kafka's tools; advisory, one thread, at most once per HB).
"""

from ..errors import NoPosition
from .consumer import Consumer
from .mirror import MirrorConflict

__all__ = ["Consumer", "MirrorConflict", "NoPosition"]
