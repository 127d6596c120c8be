"""Apache Kafka on this machine for tests, benches and trying logmarshal on Kafka: jars from
Maven Central, KRaft nodes on loopback, stopped by pid (:mod:`.harness`)."""

from logmarshal.localkafka.harness import (
    DEFAULT_CONFIG,
    KAFKA_VERSION,
    KafkaCluster,
    KafkaNode,
    KafkaStartError,
    KafkaUnavailable,
    fetch,
    jars_dir,
    java,
    missing_tools,
    run_tool,
    tools,
)

__all__ = [
    "DEFAULT_CONFIG",
    "KAFKA_VERSION",
    "KafkaCluster",
    "KafkaNode",
    "KafkaStartError",
    "KafkaUnavailable",
    "fetch",
    "jars_dir",
    "java",
    "missing_tools",
    "run_tool",
    "tools",
]
