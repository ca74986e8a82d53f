"""A real cluster on loopback with a Raft quorum of three controllers
(`controller.quorum.voters` with three voters; Raft messages on each voter's port + 1).
kafka-python produces with acks=all to a topic with three replicas and min.insync.replicas=2;
mid-stream the active controller is killed with SIGKILL, and later the partition leader too.
The quorum elects a new controller, the brokers move to it, it elects a new partition leader,
and a consumer reads back every acknowledged record."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from conftest import Broker
from test_cluster import assert_all_read_back, leader_of, leader_of_live, produce_through

CONTROLLER_IDS = [100, 101, 102]


def free_port_pair() -> int:
    """A port p with p and p + 1 both free (the controller listener and its Raft port)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


def active_controller(controllers: list[Broker]) -> int:
    """The index of the controller that last logged becoming active (highest term)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        best = None
        for index, controller in enumerate(controllers):
            if controller.process.poll() is not None:
                continue
            for line in controller.log_path.read_text().splitlines():
                if "active controller" in line and "term=" in line:
                    term = int(line.split("term=")[1].split()[0])
                    if best is None or term > best[0]:
                        best = (term, index)
        if best is not None:
            return best[1]
        time.sleep(0.2)
    raise AssertionError("no active controller")


def start_quorum(tmp_path: Path, controller_properties: str = "") -> tuple[list[Broker], list[Broker]]:
    """Three controllers (with `controller_properties` too) and three brokers."""
    ports = [free_port_pair() for _ in CONTROLLER_IDS]
    voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in zip(CONTROLLER_IDS, ports))
    properties = f"controller.quorum.voters={voters}\n"
    controllers = [
        Broker(tmp_path / f"controller-{node}", node, "process.roles=controller\n" + controller_properties + properties, port)
        for node, port in zip(CONTROLLER_IDS, ports)
    ]
    brokers = [Broker(tmp_path / f"broker-{node}", node, properties) for node in range(3)]
    return controllers, brokers


@pytest.fixture()
def quorum_cluster(tmp_path: Path):
    controllers, brokers = start_quorum(tmp_path)
    yield controllers, brokers
    for node in [*brokers, *controllers]:
        node.stop()


@pytest.fixture()
def snapshotting_cluster(tmp_path: Path):
    """A metadata snapshot every 4 Raft entries."""
    controllers, brokers = start_quorum(tmp_path, "seedlog.metadata.snapshot.entries=4\n")
    yield controllers, brokers
    for node in [*brokers, *controllers]:
        node.stop()


def create_retrying(admin: KafkaAdminClient, topics: list[NewTopic]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics(topics)
            return
        except Exception:  # the quorum still electing, brokers still registering
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_acks_all_survives_a_kill_9_of_the_active_controller_then_the_leader(quorum_cluster) -> None:
    controllers, brokers = quorum_cluster
    bootstrap = [broker.address for broker in brokers]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    create_retrying(admin, [NewTopic("replicated", 1, 3, topic_configs={"min.insync.replicas": "2"})])
    leader = leader_of(admin, "replicated")
    first = active_controller(controllers)

    def kill_the_leader() -> None:
        # Only once a new controller leads: it must elect the next partition leader.
        assert active_controller(controllers) != first
        brokers[leader].process.kill()

    acknowledged = produce_through(bootstrap, {100: controllers[first].process.kill, 200: kill_the_leader})
    new_leader = leader_of_live(admin, "replicated", leader)
    assert new_leader != leader
    assert_all_read_back(acknowledged, [broker for node, broker in enumerate(brokers) if node != leader])


def test_a_restarted_broker_catches_up_from_the_metadata_snapshot(snapshotting_cluster) -> None:
    """With a snapshot every 4 Raft entries, the controllers' copies of the metadata log soon
    start past offset 0. A broker killed and restarted reads the metadata from nothing: the
    active controller names its latest snapshot, the broker fetches it (FetchSnapshot), takes
    its image, reads on from its end, and rejoins every ISR."""
    controllers, brokers = snapshotting_cluster
    admin = KafkaAdminClient(bootstrap_servers=[broker.address for broker in brokers])
    create_retrying(admin, [NewTopic(f"t{index}", 1, 3) for index in range(4)])
    for index in range(4):
        leader_of(admin, f"t{index}")
    assert any(
        "metadata snapshot taken" in line for controller in controllers for line in controller.log_path.read_text().splitlines()
    ), "the controllers took snapshots"
    brokers[0].process.kill()
    brokers[0].process.wait()
    brokers[0].start()
    deadline = time.monotonic() + 30
    while "metadata snapshot fetched" not in brokers[0].log_path.read_text():
        assert time.monotonic() < deadline, brokers[0].log_path.read_text()[-3000:]
        time.sleep(0.2)
    assert "fetching the metadata snapshot" in brokers[0].log_path.read_text()
    for index in range(4):
        leader_of(admin, f"t{index}")  # every ISR full again, the restarted broker in it
    after_restart = brokers[0].log_path.read_text().split("listening")[-1]
    assert all(f"partition=t{index}-0" in after_restart for index in range(4)), "it replicates every topic again"
