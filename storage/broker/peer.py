"""A minimal async Kafka client one broker uses to ask the controller about topics.

Only non-controller brokers use it: topics are created on the controller, and the others
mirror names, partition counts and configs from it (on demand, when a client names a topic
they do not know, and when a full Metadata request finds their copy over a second old).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from .._kafka_framing import decode_response, encode_request, read_frame
from .cluster_file import BrokerAddress

__all__ = ["PeerClient"]

_TIMEOUT_S = 5.0
_TOPIC_RESOURCE = 2
#: DescribeConfigs' config_source of a topic's own setting (DYNAMIC_TOPIC_CONFIG)
_SOURCE_TOPIC = 1


class PeerClient:
    """One request at a time over a fresh connection: topic changes are rare."""

    def __init__(
        self, controller: BrokerAddress, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._controller = controller
        self._ssl = ssl_context
        self._correlation = itertools.count(1)

    async def _call(self, request: Any, response_cls: Any, version: int) -> Any:
        correlation_id = next(self._correlation)
        payload = encode_request(request, correlation_id, "logmarshal-broker")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._controller.host, self._controller.port, ssl=self._ssl),
            _TIMEOUT_S,
        )
        try:
            writer.write(payload)
            await writer.drain()
            frame = await read_frame(reader, _TIMEOUT_S)
        finally:
            writer.close()
        return decode_response(frame, response_cls, version, correlation_id)

    async def topics(self) -> dict[str, int]:
        """Topic name -> partition count, as the controller knows them."""
        response = await self._call(MetadataRequest[1](topics=None), MetadataResponse, 1)
        return {t.name: len(t.partitions) for t in response.topics if t.error_code == 0}

    async def topic_configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        request = DescribeConfigsRequest[1](
            resources=[
                DescribeConfigsRequest[1].DescribeConfigsResource(
                    resource_type=_TOPIC_RESOURCE, resource_name=n, configuration_keys=None
                )
                for n in names
            ],
            include_synonyms=False,
        )
        response = await self._call(request, DescribeConfigsResponse, 1)
        return {
            # a topic's own settings (a default value given explicitly included): the others
            # are the defaults, and a config made from these names the same settings as given
            r.resource_name: {
                c.name: c.value
                for c in r.configs
                if c.value is not None and c.config_source == _SOURCE_TOPIC
            }
            for r in response.results
            if r.error_code == 0
        }
