"""The topic admin APIs of a broker: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, over a :class:`storage.DataDir`.

Only the controller changes topics (the other brokers learn them from it:
:meth:`.handlers.Handlers._know_topics`); every change runs in the worker thread, since it
creates, deletes or rewrites files. Every refusal is a Kafka error code with a message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka.protocol.admin.configs import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from storage._config import TopicConfig
from storage._datadir import DataDir
from storage._errors import InvalidConfig, StorageError

from .alter import NullConfigValue, alter_topic_config
from .cluster_file import ClusterLayout
from .errors import ErrorCode, error_code_for
from .pacing import Pace

__all__ = ["MAX_TOPICS_PER_REQUEST", "TopicAdminHandlers"]

log = logging.getLogger(__name__)

_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4
_SOURCE_TOPIC = 1
_SOURCE_DEFAULT = 5
_DEFAULT_PARTITIONS = 1

#: CreateTopics / CreatePartitions naming more topics are refused whole (POLICY_VIOLATION)
MAX_TOPICS_PER_REQUEST = 100


class TopicAdminHandlers:
    """The topic admin handlers of one broker; ``know_topics`` brings this broker's topics
    up to the controller's (:meth:`.handlers.Handlers._know_topics`)."""

    def __init__(
        self,
        data_dir: DataDir,
        layout: ClusterLayout,
        executor: ThreadPoolExecutor,
        know_topics: Callable[[Iterable[str] | None], Awaitable[None]],
    ) -> None:
        self.data_dir = data_dir
        self.layout = layout
        self._executor = executor
        self._know_topics = know_topics

    async def _per_topic(
        self,
        topics: Sequence[Any],
        one: Callable[[Any, bool], tuple[int, str | None]],
        validate_only: bool,
        result: Callable[..., Any],
        refused: str,
    ) -> list[Any]:
        """CreateTopics' and CreatePartitions' fan-out: ``one(topic, validate_only)`` for each
        topic in turn, in the worker thread, answered as ``result(name=, error_code=,
        error_message=)``. A request naming more than MAX_TOPICS_PER_REQUEST topics is
        refused whole (POLICY_VIOLATION, "...; ``refused``") before any runs."""
        if len(topics) > MAX_TOPICS_PER_REQUEST:
            why = f"at most {MAX_TOPICS_PER_REQUEST} topics per request; {refused}"
            return [
                result(name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message=why)
                for t in topics
            ]
        loop = asyncio.get_running_loop()
        results = []
        for topic in topics:
            error, message = await loop.run_in_executor(self._executor, one, topic, validate_only)
            results.append(result(name=topic.name, error_code=error, error_message=message))
        return results

    async def create_topics(self, request: Any, version: int) -> Any:
        r = CreateTopicsResponse[version]
        results = await self._per_topic(
            request.topics,
            self._create_one,
            request.validate_only,
            r.CreatableTopicResult,
            "nothing was created",
        )
        return r(throttle_time_ms=0, topics=results)

    def _create_one(self, topic: Any, validate_only: bool) -> tuple[int, str | None]:
        if not self.layout.is_controller:
            return ErrorCode.NOT_CONTROLLER, "send CreateTopics to the controller"
        if topic.assignments:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "manual replica assignment is not supported",
            )
        if topic.replication_factor not in (-1, 1):
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "logmarshal keeps one copy of each partition: use replication factor 1 (or -1)",
            )
        count = _DEFAULT_PARTITIONS if topic.num_partitions == -1 else topic.num_partitions
        try:  # (a bad value was answered as INVALID_PARTITIONS: the message named no config)
            config = TopicConfig.from_dict({c.name: c.value for c in topic.configs})
            # (a replication-only setting's was INVALID_PARTITIONS still: it is checked here)
            config.check_settable()
        except InvalidConfig as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        try:
            if count < 1:
                return ErrorCode.INVALID_PARTITIONS, f"partition count {count} must be >= 1"
            if validate_only:  # every check the creation makes (the name, the counts)
                self.data_dir.check_create(topic.name, count, config)
                return ErrorCode.NONE, None
            self.data_dir.create_topic(topic.name, count, config)
        except InvalidConfig as exc:
            code = (
                ErrorCode.INVALID_CONFIG if "config" in str(exc) else ErrorCode.INVALID_PARTITIONS
            )
            return code, str(exc)
        except (StorageError, OSError) as exc:  # (OSError: the server dropped the client)
            return error_code_for(exc), str(exc)
        log.info("created topic %s with %d partition(s)", topic.name, count)
        return ErrorCode.NONE, None

    async def delete_topics(self, request: Any, version: int) -> Any:
        r = DeleteTopicsResponse[version]
        loop = asyncio.get_running_loop()
        results = []
        for name in request.topic_names:
            error = await loop.run_in_executor(self._executor, self._delete_one, name)
            results.append(r.DeletableTopicResult(name=name, error_code=error))
        return r(throttle_time_ms=0, responses=results)

    def _delete_one(self, name: str) -> int:
        if not self.layout.is_controller:
            return ErrorCode.NOT_CONTROLLER
        try:
            self.data_dir.delete_topic(name)
        except (StorageError, OSError) as exc:  # (OSError: the server dropped the client)
            log.error("deleting topic %s: %s", name, exc)
            return error_code_for(exc)
        log.info("deleted topic %s", name)
        return ErrorCode.NONE

    async def create_partitions(self, request: Any, version: int) -> Any:
        r = CreatePartitionsResponse[version]
        results = await self._per_topic(
            request.topics,
            self._grow_one,
            request.validate_only,
            r.CreatePartitionsTopicResult,
            "nothing was changed",
        )
        return r(throttle_time_ms=0, results=results)

    def _grow_one(self, topic: Any, validate_only: bool) -> tuple[int, str | None]:
        if not self.layout.is_controller:
            return ErrorCode.NOT_CONTROLLER, "send CreatePartitions to the controller"
        if topic.assignments:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "manual replica assignment is not supported",
            )
        try:
            current = self.data_dir.describe(topic.name).partitions
            if topic.count <= current:
                return (
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic has {current} partitions; the count can only grow",
                )
            if validate_only:  # every check the growth makes (the limits too)
                self.data_dir.check_add_partitions(topic.name, topic.count)
            else:
                self.data_dir.add_partitions(topic.name, topic.count)
        except InvalidConfig as exc:
            return ErrorCode.INVALID_PARTITIONS, str(exc)
        except (StorageError, OSError) as exc:  # (OSError: the server dropped the client)
            return error_code_for(exc), str(exc)
        return ErrorCode.NONE, None

    async def describe_configs(self, request: Any, version: int) -> Any:
        r = DescribeConfigsResponse[version]
        await self._know_topics(
            res.resource_name for res in request.resources if res.resource_type == _TOPIC_RESOURCE
        )
        await self._know_topics(None)  # configs altered on the controller: at most 1 s stale
        results = []
        cfg_cls = r.DescribeConfigsResult.DescribeConfigsResourceResult
        named: set[tuple[int, str]] = set()
        pace = Pace()
        for res in request.resources:
            await pace()
            error, message, configs = ErrorCode.NONE, None, []
            resource = (res.resource_type, res.resource_name)
            if resource in named:
                # answered once: one topic named 150,000 times (1.4 MB) built an 81 MB
                # answer; Kafka's AdminClient names each resource once
                error, message = ErrorCode.INVALID_REQUEST, "resource named twice in one request"
            elif res.resource_type == _TOPIC_RESOURCE:
                try:
                    config = self.data_dir.describe(res.resource_name).config
                    values, given = config.described(), config.explicit
                except StorageError as exc:
                    error, message = error_code_for(exc), str(exc)
                else:
                    keys = res.configuration_keys
                    for name, value in sorted(values.items()):
                        if keys is not None and name not in keys:
                            continue
                        is_default = name not in given
                        configs.append(
                            cfg_cls(
                                name=name,
                                value=value,
                                read_only=False,
                                config_source=_SOURCE_DEFAULT if is_default else _SOURCE_TOPIC,
                                is_default=is_default,
                                is_sensitive=False,
                                synonyms=[],
                                config_type=0,
                                documentation=None,
                            )
                        )
            elif res.resource_type != _BROKER_RESOURCE:
                error, message = ErrorCode.INVALID_REQUEST, "only topic and broker resources"
            named.add(resource)
            results.append(
                r.DescribeConfigsResult(
                    error_code=error,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=configs,
                )
            )
        return r(throttle_time_ms=0, results=results)

    async def alter_configs(self, request: Any, version: int) -> Any:
        """AlterConfigs: each topic's whole config is replaced (unnamed settings reset)."""
        return await self._alter(request, version, AlterConfigsResponse, incremental=False)

    async def incremental_alter_configs(self, request: Any, version: int) -> Any:
        """IncrementalAlterConfigs: SET / DELETE (reset) / APPEND / SUBTRACT per setting."""
        return await self._alter(
            request, version, IncrementalAlterConfigsResponse, incremental=True
        )

    async def _alter(self, request: Any, version: int, response: Any, *, incremental: bool) -> Any:
        r = response[version]
        loop = asyncio.get_running_loop()
        results = []
        for res in request.resources:
            error, message = await loop.run_in_executor(
                self._executor, self._alter_one, res, request.validate_only, incremental
            )
            results.append(
                r.AlterConfigsResourceResponse(
                    error_code=error,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
        return r(throttle_time_ms=0, responses=results)

    def _alter_one(
        self, res: Any, validate_only: bool, incremental: bool
    ) -> tuple[int, str | None]:
        if res.resource_type != _TOPIC_RESOURCE:
            return ErrorCode.INVALID_REQUEST, "only topic configs can be altered on this broker"
        if not self.layout.is_controller:
            return ErrorCode.NOT_CONTROLLER, "send config changes to the controller"
        try:
            current = self.data_dir.describe(res.resource_name).config
            config = alter_topic_config(current, res.configs, incremental=incremental)
            if validate_only:
                self.data_dir.check_alter(res.resource_name, config)
            else:
                self.data_dir.alter_config(res.resource_name, config)
        except NullConfigValue as exc:
            return ErrorCode.INVALID_REQUEST, str(exc)
        except InvalidConfig as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        except (StorageError, OSError) as exc:  # (OSError: the server dropped the client)
            return error_code_for(exc), str(exc)
        return ErrorCode.NONE, None
