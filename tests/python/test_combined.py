"""Kafka's combined mode (`process.roles=broker,controller`): a controller and a broker in one
process. A node started from the keys of Kafka 4's own `config/server.properties` serves
kafka-python, shuts down cleanly on SIGTERM and keeps its records across a restart (and the
keys of its `controller.properties` and `broker.properties` start two nodes that work); three
combined nodes form a cluster (a Raft quorum of three controllers) that survives a kill -9 of
the partition leader with nothing acknowledged lost."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from conftest import Broker, free_port
from test_cluster import create_topic, survive_a_kill_9_of_the_leader


def kafka_server_properties(broker_port: int, controller_port: int) -> str:
    """The keys Kafka 4's `config/server.properties` sets, on this test's ports (`node.id`,
    `listeners` and `log.dirs` come from `Broker`)."""
    return f"""process.roles=broker,controller
controller.quorum.bootstrap.servers=localhost:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{broker_port},CONTROLLER://localhost:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def read_all(bootstrap: str, topic: str, group: str | None = None) -> list[str]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    values = [message.value.decode() for message in consumer]
    consumer.close()
    return values


def write_and_read_back(bootstrap: str, topic: str, partitions: int, count: int, group: str | None = None) -> list[str]:
    """Creates `topic`, writes `count` records with acks=all, reads them all back; returns them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    create_topic(admin, NewTopic(topic, partitions, 1))
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    values = [f"value-{index}" for index in range(count)]
    for value in values:
        producer.send(topic, value.encode())
    producer.flush(timeout=30)
    producer.close()
    assert sorted(read_all(bootstrap, topic, group=group)) == sorted(values)
    return values


def test_kafkas_own_server_properties_start_a_combined_node(tmp_path: Path) -> None:
    broker_port, controller_port = free_port(), free_port()
    node = Broker(
        tmp_path / "node",
        1,
        kafka_server_properties(broker_port, controller_port),
        port=broker_port,
        listeners=f"PLAINTEXT://:{broker_port},CONTROLLER://:{controller_port}",
    )
    try:
        bootstrap = f"127.0.0.1:{broker_port}"
        values = write_and_read_back(bootstrap, "combined", 3, 200, group="readers")

        node.process.send_signal(signal.SIGTERM)
        assert node.process.wait(timeout=30) == 0, node.log_path.read_text()
        log = node.log_path.read_text()
        assert "stopped clean_shutdown_marker=true" in log, log
        assert (tmp_path / "node" / "data" / "__controller" / "__cluster_metadata-0").is_dir()

        node.start()
        assert sorted(read_all(bootstrap, "combined")) == sorted(values), "kept across the restart"
    finally:
        node.stop()


def test_kafkas_controller_and_broker_properties_start_two_nodes(tmp_path: Path) -> None:
    """Kafka 4's `config/controller.properties` and `config/broker.properties`: the broker finds
    its controller by `controller.quorum.bootstrap.servers` alone (no voter ids)."""
    broker_port, controller_port = free_port(), free_port()
    common = (
        f"controller.quorum.bootstrap.servers=localhost:{controller_port}\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL\n"
        "num.network.threads=3\nnum.io.threads=8\n"
        "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
    )
    controller = Broker(
        tmp_path / "controller",
        1,
        "process.roles=controller\n"
        f"advertised.listeners=CONTROLLER://localhost:{controller_port}\n" + common,
        port=controller_port,
        listeners=f"CONTROLLER://:{controller_port}",
    )
    broker = Broker(
        tmp_path / "broker",
        2,
        "process.roles=broker\ninter.broker.listener.name=PLAINTEXT\n"
        f"advertised.listeners=PLAINTEXT://localhost:{broker_port}\n" + common,
        port=broker_port,
        listeners=f"PLAINTEXT://localhost:{broker_port}",
    )
    try:
        write_and_read_back(f"localhost:{broker_port}", "split", 2, 50)
    finally:
        broker.stop()
        controller.stop()


@pytest.fixture()
def combined_cluster(tmp_path: Path):
    ports = {node: (free_port(), free_port()) for node in range(3)}
    # Each controller takes Raft messages on its port + 1: keep those free too.
    voters = ",".join(f"{node}@127.0.0.1:{controller}" for node, (_, controller) in ports.items())
    properties = (
        "process.roles=broker,controller\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
        f"controller.quorum.voters={voters}\n"
    )
    nodes = [
        Broker(
            tmp_path / f"node-{node}",
            node,
            properties,
            port=broker,
            listeners=f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
        )
        for node, (broker, controller) in ports.items()
    ]
    yield nodes
    for node in nodes:
        node.stop()


def test_a_combined_cluster_survives_a_kill_9_of_the_leader(combined_cluster) -> None:
    # The leader's process holds one of the three controllers too: the quorum keeps two.
    survive_a_kill_9_of_the_leader(combined_cluster)
