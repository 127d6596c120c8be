"""Capture the request frames real clients send, as seeds for the fuzzer.

Runs a broker behind a recording TCP proxy, drives kcat, confluent-kafka (producer, consumer,
admin) and kafka-python (producer, consumer, admin) through it, and writes every
client-to-broker frame (size prefix included) to ``captured_frames.bin`` beside this file,
each preceded by its length (int32). Re-run after the broker's served APIs change::

    PYTHONPATH=. python3 -m tests.storage.broker.capture
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from storage.broker import BrokerConfig, BrokerThread
from storage.broker.cluster_file import ClusterLayout

OUT = Path(__file__).with_name("captured_frames.bin")


class _RecordingProxy:
    """Forwards 127.0.0.1:port to the broker; keeps each request frame clients send."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
                buf += chunk
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + size:
                        break
                    with self._lock:
                        self.frames.append(buf[: 4 + size])
                    buf = buf[4 + size :]
        except OSError:
            pass
        finally:
            dst.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            dst.close()

    def close(self) -> None:
        self._server.close()


def _drive(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic("cap", 2, replication_factor=1, config={"retention.ms": "86400000"})]
    )["cap"].result(10)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "zstd"}
    )
    for i in range(20):
        producer.produce("cap", b"value-%d" % i, b"k%d" % i, partition=i % 2, headers=[("h", b"x")])
    producer.flush(10)
    resource = ConfigResource("topic", "cap")
    admin.describe_configs([resource])[resource].result(10)
    inc = ConfigResource(
        "topic",
        "cap",
        incremental_configs=[
            ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([inc])[inc].result(10)
    admin.create_partitions([NewPartitions("cap", 3)])["cap"].result(10)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cap",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("cap", 0, 0)])
    for _ in range(10):
        consumer.poll(0.2)
    consumer.get_watermark_offsets(TopicPartition("cap", 0), timeout=5)
    consumer.offsets_for_times([TopicPartition("cap", 0, int(time.time() * 1000) - 60_000)], 5)
    consumer.close()

    kproducer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(10):
        kproducer.send("cap", b"kp-%d" % i, b"k", partition=1)
    kproducer.flush(10)
    kproducer.close(10)
    kconsumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tp = KTP("cap", 1)
    kconsumer.assign([tp])
    kconsumer.seek_to_beginning(tp)
    kconsumer.poll(500)
    kconsumer.close()
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    kadmin.create_topics([KNewTopic("cap2", 1, 1)])
    kadmin.delete_topics(["cap2"])
    kadmin.close()

    kcat = shutil.which("kcat")
    if kcat is not None:
        subprocess.run([kcat, "-b", bootstrap, "-L"], capture_output=True, timeout=30, check=True)
        subprocess.run(
            [kcat, "-b", bootstrap, "-P", "-t", "cap", "-p", "0"],
            input=b"a\nb\n",
            capture_output=True,
            timeout=30,
            check=True,
        )
        subprocess.run(
            [kcat, "-b", bootstrap, "-C", "-t", "cap", "-p", "0", "-e", "-q"],
            capture_output=True,
            timeout=30,
            check=True,
        )


def capture() -> list[bytes]:
    with tempfile.TemporaryDirectory(prefix="capture-") as tmp:
        proxy = None
        with BrokerThread(BrokerConfig(data_dir=Path(tmp) / "d", port=0)) as broker:
            assert broker.address is not None
            proxy = _RecordingProxy(broker.address)
            # clients reconnect to the advertised address: advertise the proxy
            assert broker.server.handlers is not None
            broker.server.handlers.layout = ClusterLayout.single(
                broker.server.handlers.layout.self_id, "127.0.0.1", proxy.port
            )
            try:
                _drive(f"127.0.0.1:{proxy.port}")
            finally:
                proxy.close()
        return proxy.frames


def main() -> None:
    frames = capture()
    OUT.write_bytes(b"".join(struct.pack(">i", len(f)) + f for f in frames))
    keys = sorted({struct.unpack_from(">h", f, 4)[0] for f in frames})
    print(f"{len(frames)} frames of api keys {keys} -> {OUT}")


if __name__ == "__main__":
    main()
