"""Consumer groups against the real seedlog broker with kafka-python: two members share a topic's
partitions, commit, and a group restarted after a broker restart resumes at the committed offsets."""

from __future__ import annotations

import subprocess
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from conftest import Broker, seedlog_binary

TOPIC = "groups"
PARTITIONS = 4
GROUP_PROPERTIES = "group.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=5\n"


def produce(address: str, values: list[str]) -> None:
    producer = KafkaProducer(bootstrap_servers=address, acks="all", linger_ms=5)
    for index, value in enumerate(values):
        producer.send(TOPIC, key=str(index).encode(), value=value.encode(), partition=index % PARTITIONS)
    producer.flush(timeout=30)
    producer.close(timeout=10)


def with_topic(broker: Broker) -> KafkaAdminClient:
    """An admin client of `broker`, once it created the test's topic."""
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
    return admin


def cli(*args: str) -> str:
    return subprocess.run([str(seedlog_binary()), *args], check=True, capture_output=True, text=True, timeout=60).stdout


def consumer(address: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        TOPIC,
        bootstrap_servers=address,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )


def read(members: list[KafkaConsumer], want: int, seconds: float = 60) -> dict[str, list[str]]:
    """Polls every member until `want` records arrived in all; each member's values."""
    got: dict[str, list[str]] = {str(index): [] for index in range(len(members))}
    deadline = time.monotonic() + seconds
    while sum(len(values) for values in got.values()) < want and time.monotonic() < deadline:
        for index, member in enumerate(members):
            for records in member.poll(timeout_ms=200).values():
                got[str(index)].extend(record.value.decode() for record in records)
    return got


def test_two_members_split_the_partitions_and_a_restarted_group_resumes_after_its_commits(tmp_path) -> None:
    broker = Broker(tmp_path / "node", properties=GROUP_PROPERTIES)
    try:
        admin = with_topic(broker)
        first = [f"first-{index}" for index in range(200)]
        produce(broker.address, first)

        members = [consumer(broker.address, "g"), consumer(broker.address, "g")]
        # Both must hold partitions before the records are counted: the first to join may
        # otherwise take everything before the second arrives.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(member.assignment() for member in members):
            for member in members:
                member.poll(timeout_ms=100)
        assignments = [member.assignment() for member in members]
        assert all(assignments), f"each member holds partitions: {assignments}"
        assert not (assignments[0] & assignments[1]), "no partition is held twice"
        assert len(assignments[0] | assignments[1]) == PARTITIONS
        for member in members:
            for partition in member.assignment():
                member.seek_to_beginning(partition)
        got = read(members, len(first))
        assert sorted(got["0"] + got["1"]) == sorted(first), "every record, once, across the members"
        for member in members:
            member.commit()
        described = admin.describe_groups(["g"])["g"]
        assert described["group_state"] == "Stable" and len(described["members"]) == 2, described
        assert [member["client_host"] for member in described["members"]] == ["/127.0.0.1"] * 2, \
            "each member's host, as Kafka shows it"
        held = [member["member_assignment"]["assigned_partitions"][0]["partitions"] for member in described["members"]]
        assert sorted(held[0] + held[1]) == list(range(PARTITIONS)), described
        assert [group["group_id"] for group in admin.list_groups()] == ["g"]
        committed = admin.list_group_offsets({"g": None})["g"]
        assert sorted(tp.partition for tp in committed) == list(range(PARTITIONS))
        assert sum(entry.offset for entry in committed.values()) == len(first), committed
        listed = cli("groups", "list", "--bootstrap-server", broker.address)
        assert listed.splitlines()[1:] == ["g\tconsumer\tStable"], listed
        described = cli("groups", "describe", "--bootstrap-server", broker.address, "--group", "g")
        rows = [line.split("\t") for line in described.splitlines()[2:]]
        assert [(row[1], row[2], row[3], row[4], row[5]) for row in rows] == [
            (TOPIC, str(partition), "50", "50", "0") for partition in range(PARTITIONS)
        ], described
        assert len({row[6] for row in rows}) == 2, "two members hold the partitions"
        for member in members:
            member.close()
        admin.close()
    finally:
        broker.stop()

    # A restart: the committed offsets come back from __consumer_offsets.
    broker = Broker(tmp_path / "node", properties=GROUP_PROPERTIES, port=broker.port)
    try:
        second = [f"second-{index}" for index in range(40)]
        produce(broker.address, second)
        again = consumer(broker.address, "g")
        got = read([again], len(second))
        assert sorted(got["0"]) == sorted(second), "the group resumes after its commits, nothing older"
        again.close()
    finally:
        broker.stop()


def test_the_console_consumer_in_a_group_resumes_where_its_last_run_committed(tmp_path) -> None:
    broker = Broker(tmp_path / "node", properties=GROUP_PROPERTIES)
    try:
        admin = with_topic(broker)
        values = [f"value-{index}" for index in range(120)]
        produce(broker.address, values)
        common = ["consume", "--bootstrap-server", broker.address, "--topic", TOPIC, "--group", "cli",
                  "--from-beginning", "--timeout-ms", "3000",
                  "--consumer-property", "partition.assignment.strategy=roundrobin,range"]
        first = cli(*common, "--max-messages", "50").splitlines()
        assert len(first) == 50, first
        committed = admin.list_group_offsets({"cli": None})["cli"]
        assert sum(entry.offset for entry in committed.values()) == 50, committed
        rest = cli(*common).splitlines()
        assert sorted(first + rest) == sorted(values), "the second run prints exactly what the first did not"
        committed = admin.list_group_offsets({"cli": None})["cli"]
        assert sum(entry.offset for entry in committed.values()) == len(values), committed
        described = admin.describe_groups(["cli"])["cli"]
        assert described["group_state"] == "Empty", "each run left the group on exit"
        cooperative = subprocess.run(
            [str(seedlog_binary()), *common[:-1], "partition.assignment.strategy=cooperative-sticky"],
            capture_output=True, text=True, timeout=60)
        assert cooperative.returncode == 0 and cooperative.stdout == "", \
            "cooperative-sticky joins the same group and finds nothing left to print"
        refused = subprocess.run(
            [str(seedlog_binary()), *common[:-1], "partition.assignment.strategy=sticky"],
            capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "sticky" in refused.stderr, refused.stderr
        admin.close()
    finally:
        broker.stop()


def test_compacted_consumer_offsets_keep_the_latest_commit_across_a_restart(tmp_path) -> None:
    """`__consumer_offsets` is compacted on real files: with 1 KiB segments and a cleaner that
    looks every 100 ms, 300 commits of four partitions shrink to about the latest of each, and a
    restarted broker loads them from the cleaned segments."""
    from kafka import OffsetAndMetadata, TopicPartition

    properties = (
        "group.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=1\n"
        "offsets.topic.segment.bytes=1024\nlog.cleaner.backoff.ms=100\n"
    )
    broker = Broker(tmp_path / "node", properties=properties)
    partitions = [TopicPartition(TOPIC, partition) for partition in range(PARTITIONS)]
    try:
        admin = with_topic(broker)
        produce(broker.address, [f"value-{index}" for index in range(400)])
        member = consumer(broker.address, "g")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(member.assignment()) < PARTITIONS:
            member.poll(timeout_ms=100)
        for offset in range(1, 301):
            member.commit({tp: OffsetAndMetadata(offset // 3 + tp.partition, "", -1) for tp in partitions})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "log cleaner cleaned a log" not in broker.log_path.read_text():
            time.sleep(0.1)
        assert "log cleaner cleaned a log" in broker.log_path.read_text()
        segments = sorted((tmp_path / "node" / "data" / "__consumer_offsets-0").glob("*.log"))
        assert len(segments) > 20, "the commits rolled many segments"
        assert sum(segment.stat().st_size for segment in segments) < 300 * 4 * 40, "the cleaned segments shrank"
        committed = admin.list_group_offsets({"g": None})["g"]
        assert {tp.partition: entry.offset for tp, entry in committed.items()} == {
            partition: 100 + partition for partition in range(PARTITIONS)
        }
        member.close()
        admin.close()
    finally:
        broker.stop()

    broker = Broker(tmp_path / "node", properties=properties, port=broker.port)
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.address)
        committed = admin.list_group_offsets({"g": None})["g"]
        assert {tp.partition: entry.offset for tp, entry in committed.items()} == {
            partition: 100 + partition for partition in range(PARTITIONS)
        }, "the latest commits, loaded from compacted segments"
        admin.close()
    finally:
        broker.stop()
