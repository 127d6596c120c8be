"""Answer requests that carry null where Kafka's schema does not allow it with an error code.

kafka-python's decoder reads a length of -1 as None for every string and array, nullable or
not. Handlers would then fail deep inside (``'NoneType' object is not iterable``), logged as an
unexpected error. Such a request is well framed (it was decoded), so closing the connection
would punish the client for one bad field and tell it nothing: it gets the API's answer with
INVALID_REQUEST (42) instead, before any handler runs and with nothing changed. The answer
mirrors the request as Kafka's ``getErrorResponse`` does: every topic, partition, resource or
group the request names gets the code (and, where the schema has one, a message naming the
field), and an API with a top-level error code gets it there too. A null string where a name
is echoed is answered as ``""``; a null list has no entries to answer.
"""

from __future__ import annotations

from typing import Any

from .errors import ErrorCode
from .wire import ApiKey, FetchPartitionResult, encode_fetch_response

__all__ = ["null_refusal", "null_violation"]


def null_violation(message: Any, version: int, path: str = "") -> str | None:
    """The dotted name of the first field that is null but not nullable at ``version``."""
    fields = getattr(message, "fields", None)
    if not isinstance(fields, dict):
        return None
    for name, field in fields.items():
        if not field.for_version_q(version):
            continue
        value = getattr(message, name, None)
        where = f"{path}{name}"
        if value is None:
            if field.type_str in ("records",) or field.nullable_for_version_q(version):
                continue
            if field.is_array() or field.type_str in ("string", "bytes"):
                return where
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is None:
                    return f"{where}[{i}]"
                found = null_violation(item, version, f"{where}[{i}].")
                if found is not None:
                    return found
        elif hasattr(value, "fields"):
            found = null_violation(value, version, f"{where}.")
            if found is not None:
                return found
    return None


# How each API's answer mirrors its request: per level, (request list, response list, what
# each response entry copies from its request entry: {request field: response field}, or
# the response field a plain list's item is copied to). APIs absent here (the group APIs
# with a top-level error code, InitProducerId) answer with their top-level code alone.
_TOPIC = {"name": "name"}
_PARTITION = {"partition_index": "partition_index"}
_RESOURCE = {"resource_type": "resource_type", "resource_name": "resource_name"}
_MIRRORS: dict[int, list[tuple[str, str, dict[str, str] | str]]] = {
    ApiKey.PRODUCE: [
        ("topic_data", "responses", _TOPIC),
        ("partition_data", "partition_responses", {"index": "index"}),
    ],
    ApiKey.LIST_OFFSETS: [("topics", "topics", _TOPIC), ("partitions", "partitions", _PARTITION)],
    ApiKey.METADATA: [("topics", "topics", _TOPIC)],
    ApiKey.OFFSET_COMMIT: [("topics", "topics", _TOPIC), ("partitions", "partitions", _PARTITION)],
    ApiKey.OFFSET_FETCH: [
        ("topics", "topics", _TOPIC),
        ("partition_indexes", "partitions", "partition_index"),
    ],
    ApiKey.LEAVE_GROUP: [
        ("members", "members", {"member_id": "member_id", "group_instance_id": "group_instance_id"})
    ],
    ApiKey.DESCRIBE_GROUPS: [("groups", "groups", "group_id")],
    ApiKey.CREATE_TOPICS: [("topics", "topics", _TOPIC)],
    ApiKey.DELETE_TOPICS: [("topic_names", "responses", "name")],
    ApiKey.DELETE_RECORDS: [("topics", "topics", _TOPIC), ("partitions", "partitions", _PARTITION)],
    ApiKey.DESCRIBE_CONFIGS: [("resources", "results", _RESOURCE)],
    ApiKey.ALTER_CONFIGS: [("resources", "responses", _RESOURCE)],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [("resources", "responses", _RESOURCE)],
    ApiKey.CREATE_PARTITIONS: [("topics", "results", _TOPIC)],
}


def null_refusal(key: int, version: int, request: Any, response_cls: Any, field: str) -> Any:
    """The answer to ``request`` whose ``field`` is null but not nullable: INVALID_REQUEST.

    A response object for ``response_cls[version]``, or for Fetch (encoded by hand) the
    response buffers without their correlation id (the caller frames them).
    """
    code = ErrorCode.INVALID_REQUEST
    message = f"{field} is null but not nullable"
    if key == ApiKey.FETCH:
        topics = [
            (
                t.topic or "",
                [FetchPartitionResult(p.partition, code, -1, -1, b"") for p in t.partitions or ()],
            )
            for t in request.topics or ()
        ]
        return encode_fetch_response(0, version, topics, error=code)
    return _answer(response_cls[version], version, request, _MIRRORS.get(key, []), code, message)


def _answer(
    cls: Any,
    version: int,
    source: Any,
    path: list[tuple[str, str, dict[str, str] | str]],
    code: int,
    message: str,
    copied: dict[str, Any] | None = None,
) -> Any:
    """One response entry of ``cls``: ``copied`` fields, the mirrored list, blanks elsewhere."""
    values = dict(copied or {})
    if path:
        (src, dst, keys), rest = path[0], path[1:]
        item_cls = getattr(cls, cls.fields[dst].type_str)
        entries = []
        for item in getattr(source, src, None) or ():
            if isinstance(keys, str):
                echo = {keys: item}
            else:
                echo = {out: getattr(item, name, None) for name, out in keys.items()}
            entries.append(_answer(item_cls, version, item, rest, code, message, echo))
        values[dst] = entries
    kwargs = {}
    for name, field in cls.fields.items():
        if not field.for_version_q(version):
            continue
        nullable = field.nullable_for_version_q(version)
        value = values.get(name)
        if value is None and (name not in values or not nullable):
            value = _blank(name, field, nullable, code, message)
        kwargs[name] = value
    return cls(**kwargs)


def _blank(name: str, field: Any, nullable: bool, code: int, message: str) -> Any:
    """What an answer says where the request gave nothing: the code, the message, or
    Kafka's "unknown" values (-1 for ids, offsets and epochs)."""
    kind = field.type_str
    if name == "error_code":
        return code
    if field.is_array():
        return []
    if kind == "string":
        if nullable:
            return message if name == "error_message" else None
        return ""
    if kind == "bytes":
        return None if nullable else b""
    if kind == "bool":
        return False
    if kind == "bitfield":
        return None
    if name == "throttle_time_ms":
        return 0
    return -1
