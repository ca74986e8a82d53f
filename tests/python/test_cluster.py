"""A real cluster on loopback: one controller and three brokers (`controller.quorum.voters`).
kafka-python produces with acks=all to a topic with three replicas and min.insync.replicas=2;
the partition leader is killed with SIGKILL mid-stream; the producer fails over to the new
leader the controller elects, and a consumer reads back every acknowledged record."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from conftest import Broker, free_port

CONTROLLER_ID = 100


@pytest.fixture()
def cluster(tmp_path: Path):
    controller_port = free_port()
    voters = f"controller.quorum.voters={CONTROLLER_ID}@127.0.0.1:{controller_port}\n"
    controller = Broker(tmp_path / "controller", CONTROLLER_ID, "process.roles=controller\n" + voters, controller_port)
    brokers = [Broker(tmp_path / f"broker-{node}", node, voters) for node in range(3)]
    yield controller, brokers
    for node in [*brokers, controller]:
        node.stop()


def create_topic(admin: KafkaAdminClient, topic: NewTopic) -> None:
    """Creates `topic`, retrying while the brokers still register with the controller."""
    deadline = time.monotonic() + 20
    while True:
        try:
            admin.create_topics([topic])
            return
        except Exception:  # brokers still registering with the controller
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def leader_of(admin: KafkaAdminClient, topic: str) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        described = admin.describe_topics([topic])
        partitions = described[0]["partitions"] if described else []
        if partitions and partitions[0]["leader_id"] >= 0 and len(partitions[0]["isr_nodes"]) == 3:
            return partitions[0]["leader_id"]
        time.sleep(0.2)
    raise AssertionError(f"no leader with a full ISR for {topic}")


def test_acks_all_survives_a_kill_9_of_the_leader(cluster) -> None:
    _, brokers = cluster
    survive_a_kill_9_of_the_leader(brokers)


def survive_a_kill_9_of_the_leader(brokers: list[Broker]) -> None:
    """RF 3, min.insync.replicas=2, acks=all: the partition leader (`brokers[node]` is node
    `node`) is killed mid-stream, another takes over, and every acknowledged record is read back."""
    bootstrap = [broker.address for broker in brokers]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    create_topic(admin, NewTopic("replicated", 1, 3, topic_configs={"min.insync.replicas": "2"}))
    leader = leader_of(admin, "replicated")
    acknowledged = produce_through(bootstrap, {100: brokers[leader].process.kill})
    new_leader = leader_of_live(admin, "replicated", leader)
    assert new_leader != leader
    assert_all_read_back(acknowledged, [broker for node, broker in enumerate(brokers) if node != leader])


def test_a_restarted_replica_loads_its_leader_epochs_from_the_checkpoint(cluster) -> None:
    """Each replica keeps its leader epochs in `leader-epoch-checkpoint` (Kafka's format); the
    killed leader, restarted, loads the file, rejoins the ISR and records the epoch it missed."""
    _, brokers = cluster
    survive_a_kill_9_of_the_leader(brokers)
    admin = KafkaAdminClient(bootstrap_servers=[broker.address for broker in brokers])
    dead = next(node for node, broker in enumerate(brokers) if broker.process.poll() is not None)
    new_leader = leader_of_live(admin, "replicated", dead)
    assert [epoch for epoch, _ in epoch_checkpoint(brokers[new_leader])][-1] >= 1, "the new leader's epoch"
    brokers[dead].start()
    leader_of(admin, "replicated")  # the restarted replica is back in the ISR
    deadline = time.monotonic() + 20
    while epoch_checkpoint(brokers[dead]) != epoch_checkpoint(brokers[new_leader]):
        assert time.monotonic() < deadline, (epoch_checkpoint(brokers[dead]), epoch_checkpoint(brokers[new_leader]))
        time.sleep(0.2)
    log = brokers[dead].log_path.read_text()
    assert "leader-epoch-checkpoint unreadable" not in log
    assert any(
        "leader epochs loaded from leader-epoch-checkpoint" in line and "replicated-0" in line
        for line in log.splitlines()
    ), "the restart read the file"


def epoch_checkpoint(broker: Broker) -> list[tuple[int, int]]:
    """The entries of a replica's `replicated-0/leader-epoch-checkpoint`, checked against Kafka's
    format: a version line `0`, a count line, then that many `epoch start_offset` lines."""
    lines = (broker.config.parent / "data" / "replicated-0" / "leader-epoch-checkpoint").read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, lines
    entries = [(int(epoch), int(start)) for epoch, start in (line.split(" ") for line in lines[2:])]
    assert entries == sorted(entries) and entries[0] == (0, 0), entries
    return entries


def produce_through(bootstrap: list[str], actions: dict[int, Callable[[], None]]) -> list[str]:
    """Sends 300 records to `replicated` with acks=all, one at a time, running `actions[i]`
    before record i; returns the acknowledged values."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        retries=50,
        request_timeout_ms=5000,
        delivery_timeout_ms=60000,
        max_in_flight_requests_per_connection=1,
    )
    acknowledged = []
    for index in range(300):
        if index in actions:
            actions[index]()
        value = f"value-{index}"
        producer.send("replicated", value.encode()).get(timeout=60)
        acknowledged.append(value)
    producer.close()
    return acknowledged


def assert_all_read_back(acknowledged: list[str], brokers: list[Broker]) -> None:
    consumer = KafkaConsumer(
        "replicated",
        bootstrap_servers=[broker.address for broker in brokers],
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    seen = {message.value.decode() for message in consumer}
    consumer.close()
    missing = [value for value in acknowledged if value not in seen]
    assert not missing, f"{len(missing)} acknowledged records lost, first {missing[:5]}"


def leader_of_live(admin: KafkaAdminClient, topic: str, dead: int) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            described = admin.describe_topics([topic])
        except KafkaError:
            # Right after the kills every connection of the admin client may be in its
            # reconnect backoff (kafka-python: NodeNotReadyError "No node_id provided").
            time.sleep(0.2)
            continue
        leader = described[0]["partitions"][0]["leader_id"]
        if leader >= 0 and leader != dead:
            return leader
        time.sleep(0.2)
    raise AssertionError("no new leader")


def group_read(bootstrap: list[str], group: str, want: int, seconds: float = 90) -> list[str]:
    """A new member of `group` reads until `want` records arrived, commits, closes."""
    consumer = KafkaConsumer(
        "grouped",
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    values: list[str] = []
    deadline = time.monotonic() + seconds
    while len(values) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(record.value.decode() for record in records)
    consumer.commit()
    consumer.close()
    return values


def test_a_group_resumes_at_its_commits_after_its_coordinator_is_killed(cluster) -> None:
    _, brokers = cluster
    bootstrap = [broker.address for broker in brokers]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    create_topic(admin, NewTopic("grouped", 3, 3))
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=50, delivery_timeout_ms=60000)
    first = [f"first-{index}" for index in range(60)]
    for value in first:
        producer.send("grouped", value.encode())
    producer.flush(timeout=60)
    assert sorted(group_read(bootstrap, "cg", len(first))) == sorted(first)

    # kafka-python has no public call for it: run its FindCoordinator coroutine.
    coordinator = admin._manager.run(admin._find_coordinator_ids, ["cg"])["cg"]  # noqa: SLF001
    brokers[coordinator].process.kill()
    survivors = [broker.address for node, broker in enumerate(brokers) if node != coordinator]
    second = [f"second-{index}" for index in range(30)]
    producer.close(timeout=10)
    producer = KafkaProducer(bootstrap_servers=survivors, acks="all", retries=50, delivery_timeout_ms=60000)
    for value in second:
        producer.send("grouped", value.encode())
    producer.flush(timeout=60)
    producer.close(timeout=10)
    again = group_read(survivors, "cg", len(second))
    assert sorted(again) == sorted(second), "the new coordinator loaded the replicated commits"
