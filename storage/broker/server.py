"""The broker process: an asyncio server that serves a data directory over the Kafka protocol.

Each connection is read one frame at a time and answered in order (as Kafka does: a
connection has one request in progress). A connection that sends garbage, an oversized
frame, a request it then never finishes, or that simply disconnects, is closed and
forgotten; nothing a client sends can stop the server. SIGTERM (or SIGINT) stops accepting,
closes connections, flushes every partition and releases the data directory.

A parent process (a test, a scenario) learns that the broker is ready from the line
``listening on HOST:PORT`` that the CLI prints, or from ``ready_file``, which is written
(atomically, with ``HOST:PORT``) once the socket is bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from storage._datadir import (
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    DEFAULT_RETENTION_CHECK_INTERVAL_MS,
    DataDir,
)
from storage._errors import StorageError
from storage._files import replace_durably

from .cluster_file import ClusterLayout, load_cluster_file
from .errors import ProtocolError
from .groups import GroupViewProvider
from .handlers import Handlers
from .metrics import BrokerMetrics
from .peer import PeerClient
from .wire import MIN_REQUEST_SIZE, parse_request_header

__all__ = ["BrokerConfig", "BrokerServer", "BrokerThread", "MetricsPortError", "run_broker"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_INT32_MAX = (1 << 31) - 1


def _node_id(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Kafka's node.id: an int32 of 0 or more (on the wire -1 means "no broker")."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {value!r}")
    if not 0 <= value <= _INT32_MAX:
        raise ValueError(
            f"{attribute.name} must be in [0, {_INT32_MAX}] (Kafka's node.id), got {value}"
        )


class MetricsPortError(StorageError):
    """The Prometheus port (``metrics_port``) could not be served: not the broker's own."""


class ListenError(StorageError, OSError):
    """The broker's own address could not be bound (in use, no such address): told apart
    from an OSError of its data directory, which may name no file either (a full disk met
    writing the lock file was reported as "cannot listen")."""


@attrs.frozen
class BrokerConfig:
    """How to run one broker. ``port`` 0 picks a free port (see :attr:`BrokerServer.address`)."""

    data_dir: str | os.PathLike[str]
    host: str = "127.0.0.1"
    port: int = 9092
    broker_id: int = attrs.field(default=0, validator=_node_id)
    cluster_file: str | os.PathLike[str] | None = None
    advertised_host: str | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    request_timeout: float = 30.0  # to receive the rest of a frame once its size arrived
    #: for the client to take an answer (librdkafka's socket.timeout.ms: a client waits no
    #: longer); one that does not read is closed and its answer, held in memory, let go
    response_timeout: float = 60.0
    idle_timeout: float = 600.0  # Kafka's connections.max.idle.ms
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None  # for the broker's own connections to the controller
    ready_file: str | os.PathLike[str] | None = None
    io_threads: int = 4
    validate_records: bool = True  # off only to measure what record validation costs
    max_partitions: int | None = None  # partitions the broker may hold (None: 100,000)
    max_open_files: int | None = None  # segment files open at once (None: from ulimit -n)
    max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    metrics_port: int | None = None  # serve Prometheus /metrics here (0: a free port)
    #: Kafka's log.retention.check.interval.ms: how often expired segments are deleted
    retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS
    # Builds the group view (Kafka's group APIs, read-only) once the data directory is open;
    # ``logmarshal broker start`` passes one that replays __marshal.
    group_view: Callable[[DataDir, ClusterLayout], GroupViewProvider] | None = attrs.field(
        default=None, eq=False
    )


#: frames above this are read into one buffer of their declared size (not grown chunk by
#: chunk), and the C heap is trimmed when their connection closes
_LARGE_FRAME = 1 << 20
_READ_CHUNK = 1 << 20


async def _read_frame(reader: asyncio.StreamReader, size: int) -> bytes | bytearray:
    """The next ``size`` bytes; IncompleteReadError if the peer stops before."""
    if size <= _LARGE_FRAME:
        return await reader.readexactly(size)
    # Grown a chunk at a time as bytes arrive (a declared size that never comes costs
    # nothing), and the StreamReader's own buffer stays at its small limit.
    frame = bytearray()
    while len(frame) < size:
        chunk = await reader.read(min(size - len(frame), _READ_CHUNK))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", size)
        frame += chunk
    return frame


def _give_memory_back() -> None:
    """Return freed heap pages to the OS (glibc keeps them otherwise); no-op elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


class BrokerServer:
    """One broker. ``await start()``, then ``await serve()`` until ``stop()`` is called."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._server: asyncio.Server | None = None
        self._data_dir: DataDir | None = None
        self._executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="broker-io")
        #: large requests' decoding and encoding (pacing.py)
        self._big = ThreadPoolExecutor(1, thread_name_prefix="broker-big")
        self._connections: set[asyncio.Task[None]] = set()
        self._stop: asyncio.Event | None = None
        self.handlers: Handlers | None = None
        self._group_view: GroupViewProvider | None = None
        self.metrics: BrokerMetrics | None = None
        self.metrics_address: tuple[str, int] | None = None
        self.address: tuple[str, int] | None = None

    def _ssl_server_context(self) -> ssl.SSLContext | None:
        cfg = self.config
        if cfg.tls_cert is None and cfg.tls_key is None:
            return None
        if cfg.tls_cert is None:
            raise ValueError("TLS needs a certificate (--tls-cert) as well as the key")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
        return ctx

    def _ssl_client_context(self) -> ssl.SSLContext | None:
        cfg = self.config
        if cfg.tls_cert is None:
            return None
        return ssl.create_default_context(cafile=cfg.tls_ca or cfg.tls_cert)

    async def start(self) -> tuple[str, int]:
        cfg = self.config
        if cfg.max_frame_bytes < MIN_REQUEST_SIZE:
            raise ValueError(f"max frame size must be at least {MIN_REQUEST_SIZE} bytes")
        if cfg.cluster_file is not None:
            layout = load_cluster_file(cfg.cluster_file, cfg.broker_id)
        else:
            layout = None
        server_ssl = self._ssl_server_context()
        self._stop = asyncio.Event()
        self._data_dir = DataDir(
            cfg.data_dir,
            validate_records=cfg.validate_records,
            max_partitions=cfg.max_partitions,
            max_open_files=cfg.max_open_files,
            max_partitions_per_topic=cfg.max_partitions_per_topic,
            retention_check_interval_ms=cfg.retention_check_interval_ms,
        )
        try:
            self._server = await asyncio.start_server(
                self._serve_connection, cfg.host, cfg.port, ssl=server_ssl, reuse_address=True
            )
        except OSError as exc:
            self._data_dir.close()
            raise ListenError(exc.errno, exc.strerror or str(exc)) from exc
        except BaseException:
            self._data_dir.close()
            raise
        sockname = self._server.sockets[0].getsockname()
        port = sockname[1]
        advertised = cfg.advertised_host or _advertisable(cfg.host)
        if layout is None:
            layout = ClusterLayout.single(cfg.broker_id, advertised, port)
        elif cfg.port == 0:
            layout = layout.with_self_address(advertised, port)
        if cfg.group_view is not None:
            self._group_view = cfg.group_view(self._data_dir, layout)
        peer = None
        if not layout.is_controller:
            peer = PeerClient(layout.controller, self._ssl_client_context())
        self.handlers = Handlers(
            self._data_dir,
            layout,
            cluster_id=_cluster_id(Path(cfg.data_dir), layout),
            executor=self._executor,
            big_executor=self._big,
            peer_client=peer,
            group_view=self._group_view,
        )
        self.address = (advertised, port)
        if cfg.metrics_port is not None:
            self.metrics = BrokerMetrics(self._data_dir)
            self.handlers.metrics = self.metrics
            try:
                self.metrics_address = self.metrics.serve(cfg.host, cfg.metrics_port)
            except OSError as exc:
                await self.close()
                raise MetricsPortError(
                    f"cannot serve metrics on {cfg.host}:{cfg.metrics_port}: {exc.strerror}"
                ) from None
        if cfg.ready_file is not None:
            try:
                replace_durably(Path(cfg.ready_file), f"{advertised}:{port}\n".encode())
            except OSError:
                await self.close()
                raise
        log.info(
            "broker %d listening on %s:%d (data %s)", layout.self_id, advertised, port, cfg.data_dir
        )
        return self.address

    async def serve(self) -> None:
        """Run until :meth:`stop`; then close connections and the data directory."""
        assert self._stop is not None, "call start() first"
        try:
            await self._stop.wait()
        finally:
            await self.close()

    def stop(self) -> None:
        """Ask :meth:`serve` to return (call on the loop's thread, or via call_soon_threadsafe)."""
        if self._stop is not None:
            self._stop.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # cancel until every connection has ended: a cancellation can be lost (before Python
        # 3.12, asyncio.wait_for returns a result that lands with the cancel and drops it), and
        # a connection that lost it would go on serving its client until idle_timeout
        while self._connections:
            pending = list(self._connections)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.1)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)
            self._server = None
        self._executor.shutdown(wait=True)
        self._big.shutdown(wait=True)
        close_view = getattr(self._group_view, "close", None)
        if close_view is not None:
            try:
                close_view()
            except Exception:
                log.exception("closing the group view failed")
        if self.metrics is not None:
            self.metrics.close()
        if self._data_dir is not None:
            flushed = "data flushed"
            try:
                self._data_dir.flush()
            except (OSError, StorageError) as exc:
                # (a partition whose fsync failed: its close below says it was not clean,
                # and the next start recovers it; the others are flushed and closed)
                flushed = f"a flush failed: {exc}"
            finally:
                self._data_dir.close()
                self._data_dir = None
                log.info("broker stopped; %s", flushed)

    # ------------------------------------------------------------------ connections

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        cfg = self.config
        handlers = self.handlers
        assert handlers is not None
        big_frames = False
        # the last request, let go of before the memory is given back (``finally``)
        frame: bytes | bytearray | None = None
        view: memoryview | None = None
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readexactly(4), cfg.idle_timeout)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        log.info("%s: disconnected in the middle of a frame size", peer)
                    return
                except TimeoutError:
                    log.info("%s: idle for %.0f s; closing", peer, cfg.idle_timeout)
                    return
                (size,) = _SIZE.unpack(head)
                if size < MIN_REQUEST_SIZE or size > cfg.max_frame_bytes:
                    log.warning(
                        "%s: frame size %d outside [%d, %d]; closing",
                        peer,
                        size,
                        MIN_REQUEST_SIZE,
                        cfg.max_frame_bytes,
                    )
                    return
                if size > _LARGE_FRAME:
                    big_frames = True
                try:
                    # asyncio.timeout, not wait_for: no inner task whose stored exception would
                    # keep a half-read frame alive in a reference cycle after the peer left
                    async with asyncio.timeout(cfg.request_timeout):
                        frame = await _read_frame(reader, size)
                except asyncio.IncompleteReadError:
                    log.info("%s: disconnected in the middle of a request", peer)
                    return
                except TimeoutError:
                    log.warning(
                        "%s: request not finished within %.0f s; closing", peer, cfg.request_timeout
                    )
                    return
                view = memoryview(frame)
                try:
                    header = parse_request_header(view)
                    response = await handlers.handle(header, view)
                except ProtocolError as exc:
                    log.warning("%s: %s; closing the connection", peer, exc)
                    return
                if response is None:
                    continue
                if isinstance(response, list):
                    writer.writelines(response)
                    big_frames |= sum(map(len, response)) > _LARGE_FRAME
                else:
                    writer.write(response)
                    big_frames |= len(response) > _LARGE_FRAME
                response = None
                try:
                    async with asyncio.timeout(cfg.response_timeout):
                        await writer.drain()
                except TimeoutError:
                    log.warning(
                        "%s: the answer was not taken within %.0f s; closing",
                        peer,
                        cfg.response_timeout,
                    )
                    writer.transport.abort()  # (close() would wait to send what it holds)
                    return
        except (ConnectionError, OSError) as exc:
            log.info("%s: connection error: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: unexpected error; closing the connection", peer)
        finally:
            self._connections.discard(task)
            writer.close()
            if big_frames:
                frame = view = None
                _give_memory_back()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)


def _advertisable(host: str) -> str:
    """The bind host, unless it is a wildcard: then this machine's name."""
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host


def _cluster_id(data_dir: Path, layout: ClusterLayout) -> str:
    """A stable id: from the cluster file's brokers (multi-broker) or the directory (single)."""
    import zlib

    if len(layout.brokers) > 1:
        text = ",".join(f"{b.node_id}@{b.host}:{b.port}" for b in layout.sorted_brokers)
    else:
        text = str(data_dir.resolve())
    return f"logmarshal-{zlib.crc32(text.encode()):08x}"


def run_broker(config: BrokerConfig, on_ready=None) -> int:
    """Run a broker in this thread until SIGTERM/SIGINT; returns an exit status."""

    async def main() -> None:
        server = BrokerServer(config)
        # the handlers come before start(), which writes the ready file: a parent that sends
        # SIGTERM as soon as the file appears gets a clean shutdown (partitions flushed)
        signalled = asyncio.Event()

        def on_signal() -> None:
            signalled.set()
            server.stop()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        address = await server.start()
        if signalled.is_set():
            server.stop()  # asked during start(), perhaps before its stop event existed
        if on_ready is not None:
            on_ready(address)
        await server.serve()

    asyncio.run(main())
    return 0


class BrokerThread:
    """A broker on its own event loop in a background thread (tests, embedding, benches).

    Use as a context manager; ``address`` is ``(host, port)`` once entered.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.server = BrokerServer(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="logmarshal-broker", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.address: tuple[str, int] | None = None

    @property
    def bootstrap(self) -> str:
        assert self.address is not None
        return f"{self.address[0]}:{self.address[1]}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self.address = self._loop.run_until_complete(self.server.start())
        except BaseException as exc:
            self._error = exc
            self._started.set()
            return
        self._started.set()
        try:
            self._loop.run_until_complete(self.server.serve())
        finally:
            self._loop.close()

    def start(self) -> BrokerThread:
        self._thread.start()
        if not self._started.wait(30):
            raise TimeoutError("the broker did not start within 30 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.server.stop)
            self._thread.join(30)

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
