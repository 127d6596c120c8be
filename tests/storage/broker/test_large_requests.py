"""One large, well-formed request does not hold the broker's event loop (pacing.py): in an
attack on 2026-12-06 a 24 MB ListOffsets held every other client 12 s, and a 1.4 MB
DescribeConfigs naming one topic 150,000 times built an 81 MB answer on the loop. Large
requests are now decoded and encoded on a thread of their own, handlers let other
connections in every ``PACE`` entries, and a config resource named twice is answered once.

The checks are of order, not time: a small request sent while the large one is handled is
answered before the broker is done with the large one."""

from __future__ import annotations

import struct
import threading
import time

import pytest
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from storage import DataDir
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.handlers import Handlers
from tests.storage.broker.helpers import RawClient

INVALID_REQUEST, API_VERSIONS = 42, 18


def _s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    payload = struct.pack(">hhi", api_key, version, 7) + _s16("big") + body
    return struct.pack(">i", len(payload)) + payload


def _list_offsets(n: int) -> bytes:
    """ListOffsets v1 of ``n`` partitions of a topic that does not exist."""
    body = struct.pack(">ii", -1, 1) + _s16("nope") + struct.pack(">i", n)
    return _frame(2, 1, body + struct.pack(">iq", 0, -1) * n)


def _offset_fetch(n: int) -> bytes:
    """OffsetFetch v1 of ``n`` partitions."""
    body = _s16("g") + struct.pack(">i", 1) + _s16("t") + struct.pack(">i", n)
    return _frame(9, 1, body + struct.pack(">i", 0) * n)


def _metadata(n: int) -> bytes:
    """Metadata v1 naming ``n`` topics that do not exist."""
    names = b"".join(_s16(f"t{i:07d}") for i in range(n))
    return _frame(3, 1, struct.pack(">i", n) + names)


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(lambda: _list_offsets(150_000), id="list-offsets-2MB"),
        pytest.param(lambda: _offset_fetch(400_000), id="offset-fetch-2MB"),
        pytest.param(lambda: _metadata(150_000), id="metadata-2MB"),
    ],
)
def test_a_small_request_is_answered_while_a_large_one_is_handled(
    tmp_path, monkeypatch, request_bytes
):
    large = request_bytes()
    with DataDir(tmp_path / "d") as d:
        d.create_topic("t", 1)
    seen: list[tuple[str, int]] = []  # (what, api key), in the broker's order
    real = Handlers.handle

    async def noting(self, header, frame):
        seen.append(("start", header.api_key))
        try:
            return await real(self, header, frame)
        finally:
            seen.append(("end", header.api_key))

    monkeypatch.setattr(Handlers, "handle", noting)
    config = BrokerConfig(data_dir=tmp_path / "d", port=0, max_frame_bytes=16 << 20)
    with (
        BrokerThread(config) as running,
        RawClient(running.address, timeout=120) as big,
        RawClient(running.address) as small,
    ):
        small.call(ApiVersionsRequest[0](), ApiVersionsResponse[0])  # connected, warm
        seen.clear()

        def send_large() -> None:
            big.send_raw(large)
            big.recv_frame()

        sender = threading.Thread(target=send_large)
        sender.start()
        deadline = time.monotonic() + 30
        while not seen:  # the large one is being handled
            assert time.monotonic() < deadline, "the large request never reached a handler"
            time.sleep(0.01)
        small.call(ApiVersionsRequest[0](), ApiVersionsResponse[0])
        sender.join(120)
    key = struct.unpack(">h", large[4:6])[0]
    # before: the event loop handled the large request to its end first
    assert seen == [("start", key), ("start", API_VERSIONS), ("end", API_VERSIONS), ("end", key)]


def test_a_config_resource_named_twice_is_answered_once(broker):
    resources = [(2, "t", None)] * 3 + [(2, "lat", None)]
    request = DescribeConfigsRequest[1](resources=resources, include_synonyms=False)
    with RawClient(broker.address) as client:
        answer = client.call(request, DescribeConfigsResponse[1])
    results = [
        (r.resource_type, r.resource_name, r.error_code, len(r.configs)) for r in answer.results
    ]
    assert [(name, error) for _, name, error, _ in results] == [
        ("t", 0),
        ("t", INVALID_REQUEST),
        ("t", INVALID_REQUEST),
        ("lat", 0),
    ]
    assert results[0][3] > 0 and results[1][3] == results[2][3] == 0
