"""Topic configs (docs/broker.md) created, altered and described with Kafka's
admin clients; changes are validated with Kafka's codes and survive a broker restart."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from storage import DataDir, StorageError, TopicConfig
from storage.broker import BrokerConfig, BrokerThread


def _describe(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: e.value for k, e in entries.items()}


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(10)


def test_incremental_alter_changes_retention_and_survives_a_restart(tmp_path) -> None:
    data = tmp_path / "data"
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        config = {
            "cleanup.policy": "compact",
            "min.insync.replicas": "1",
            "compression.type": "producer",
        }
        admin.create_topics([NewTopic("t", 2, replication_factor=1, config=config)])["t"].result(10)
        _incremental(
            admin,
            "t",
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        )
        _incremental(
            admin,
            "t",
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
        )
        described = _describe(admin, "t")
        assert described["retention.ms"] == "3600000"
        assert described["cleanup.policy"] == "compact,delete"
        assert described["min.insync.replicas"] == "1"
        assert broker.server._data_dir.partition("t", 1).config.retention_ms == 3600000
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = _describe(admin, "t")
        assert described["retention.ms"] == "3600000"
        # DELETE resets to the default
        _incremental(
            admin,
            "t",
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        )
        assert _describe(admin, "t")["retention.ms"] == str(TopicConfig().retention_ms)


@pytest.mark.parametrize(
    "name,value",
    [("no.such.config", "1"), ("retention.ms", "soon"), ("cleanup.policy", "archive")],
)
def test_invalid_changes_get_invalid_config_and_change_nothing(tmp_path, name, value) -> None:
    with BrokerThread(BrokerConfig(data_dir=tmp_path / "d", port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 1, replication_factor=1)])["t"].result(10)
        before = _describe(admin, "t")
        with pytest.raises(KafkaException) as info:
            _incremental(
                admin, "t", ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            )
        assert info.value.args[0].name() == "INVALID_CONFIG"
        assert _describe(admin, "t") == before


def test_marshal_topic_keeps_log_append_time(tmp_path) -> None:
    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("__marshal", 1, TopicConfig(timestamp_type="LogAppendTime"))
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.raises(KafkaException) as info:
            _incremental(
                admin,
                "__marshal",
                ConfigEntry(
                    "message.timestamp.type",
                    "CreateTime",
                    incremental_operation=AlterConfigOpType.SET,
                ),
            )
        assert info.value.args[0].name() == "POLICY_VIOLATION"
        _incremental(
            admin,
            "__marshal",
            ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET),
        )
        described = _describe(admin, "__marshal")
        assert described["message.timestamp.type"] == "LogAppendTime"
        assert described["retention.ms"] == "-1"


def test_kafka_python_alter_configs(tmp_path) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    with BrokerThread(BrokerConfig(data_dir=tmp_path / "d", port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics(
            [NewTopic("t", 1, replication_factor=1, config={"retention.ms": "5000"})]
        )["t"].result(10)
        kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            kadmin.alter_configs(
                [KConfigResource(ConfigResourceType.TOPIC, "t", configs={"segment.ms": "60000"})]
            )
        finally:
            kadmin.close()
        assert _describe(admin, "t")["segment.ms"] == "60000"


def test_raw_alter_configs_replaces_the_whole_set(tmp_path) -> None:
    """AlterConfigs (not incremental): settings the request does not name go back to their
    defaults, as on Kafka."""
    from kafka.protocol.admin.configs import AlterConfigsRequest, AlterConfigsResponse

    from tests.storage.broker.helpers import RawClient

    with BrokerThread(BrokerConfig(data_dir=tmp_path / "d", port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics(
            [NewTopic("t", 1, replication_factor=1, config={"retention.ms": "5000"})]
        )["t"].result(10)
        r = AlterConfigsRequest[1]
        res = r.AlterConfigsResource
        req = r(
            resources=[
                res(
                    resource_type=2,
                    resource_name="t",
                    configs=[res.AlterableConfig(name="segment.ms", value="60000")],
                )
            ],
            validate_only=False,
        )
        with RawClient(broker.address) as client:
            resp = client.call(req, AlterConfigsResponse)
        assert resp.responses[0].error_code == 0
        described = _describe(admin, "t")
        assert described["segment.ms"] == "60000"
        assert described["retention.ms"] == str(TopicConfig().retention_ms)


def test_describe_shows_every_setting_kafka_has_flush_included(tmp_path) -> None:
    """An unset flush.messages or flush.ms was left out of DescribeConfigs: Kafka shows both,
    as Long.MAX_VALUE defaults. A set one shows its value, from the topic."""
    with BrokerThread(BrokerConfig(data_dir=tmp_path / "data", port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 1, replication_factor=1)])["t"].result(10)
        resource = ConfigResource("topic", "t")
        entries = admin.describe_configs([resource])[resource].result(10)
        for name in ("flush.messages", "flush.ms"):
            assert entries[name].value == str(2**63 - 1) and entries[name].is_default, name
        _incremental(
            admin, "t", ConfigEntry("flush.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        )
        entries = admin.describe_configs([resource])[resource].result(10)
        assert entries["flush.ms"].value == "1000" and not entries["flush.ms"].is_default
        assert entries["flush.messages"].is_default


def _own(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's own settings, as ``kafka-configs --describe`` lists them."""
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def test_a_setting_given_its_default_value_is_the_topics_own(tmp_path) -> None:
    """A setting given explicitly at its default value was described as a default (Kafka
    describes it as the topic's own, DYNAMIC_TOPIC_CONFIG, and ``kafka-configs --describe``
    lists it). It stays the topic's own across a restart and an alteration of another
    setting, and only DELETE makes it a default again. A topics.json written before the
    given settings were kept reads every setting that is not the default as given."""
    week = str(TopicConfig().retention_ms)
    data = tmp_path / "data"
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        made = NewTopic("t", 1, replication_factor=1, config={"retention.ms": week})
        admin.create_topics([made])["t"].result(10)
        assert _own(admin, "t") == {"retention.ms": week}
        set_ = AlterConfigOpType.SET
        _incremental(admin, "t", ConfigEntry("segment.ms", "60000", incremental_operation=set_))
        assert _own(admin, "t") == {"retention.ms": week, "segment.ms": "60000"}
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _own(admin, "t") == {"retention.ms": week, "segment.ms": "60000"}
        delete = AlterConfigOpType.DELETE
        _incremental(admin, "t", ConfigEntry("retention.ms", None, incremental_operation=delete))
        assert _own(admin, "t") == {"segment.ms": "60000"}
        _incremental(admin, "t", ConfigEntry("retention.ms", week, incremental_operation=set_))
    meta = data / "topics.json"
    stored = json.loads(meta.read_text())
    assert stored["topics"]["t"]["explicit"] == ["retention.ms", "segment.ms"]
    del stored["topics"]["t"]["explicit"]  # as written before
    meta.write_text(json.dumps(stored))
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _own(admin, "t") == {"segment.ms": "60000"}
    stored["topics"]["t"]["explicit"] = ["retention.ms", "no.such.setting"]
    meta.write_text(json.dumps(stored))
    with pytest.raises(StorageError, match=r"no\.such\.setting"):
        DataDir(data)
