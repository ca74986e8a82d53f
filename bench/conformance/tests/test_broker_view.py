"""The broker view (conformance/broker_view.py): the leader wait, the end-offset wait, and the
wire messages they use (peers/kwire.py)."""
from __future__ import annotations

import struct

import pytest

from conformance import broker_view
from conformance.broker_view import (
    LeaderWaitTimeout,
    PartitionState,
    kwire_end_offsets,
    kwire_probe,
    not_ready,
    wait_for_end_offsets,
    wait_for_leaders,
)
from peers import kwire


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def scripted(*answers: list[PartitionState] | Exception):  # type: ignore[no-untyped-def]
    """A probe that gives these answers in turn (the last one forever) and counts its calls."""
    calls = []

    def probe(topic: str) -> list[PartitionState]:
        calls.append(topic)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer
    probe.calls = calls  # type: ignore[attr-defined]
    return probe


READY = [PartitionState(0, 1), PartitionState(1, 1), PartitionState(2, 1)]


def test_returns_at_once_when_every_partition_is_ready() -> None:
    clock = FakeClock()
    probe = scripted(READY)
    assert wait_for_leaders(probe, "t", 3, clock=clock, sleep=clock.sleep) == 0.0
    assert probe.calls == ["t"]


def test_a_leader_in_metadata_that_does_not_serve_yet_is_not_ready() -> None:
    """Kafka 4.4 lists the leader before its ReplicaManager serves the partition (issue 12)."""
    clock = FakeClock()
    window = [PartitionState(0, 1), PartitionState(1, 1, "ListOffsets NOT_LEADER_OR_FOLLOWER"), PartitionState(2, 1)]
    probe = scripted([PartitionState(-1, -1, "topic UNKNOWN_TOPIC_OR_PARTITION")],
                     [PartitionState(0, -1, "LEADER_NOT_AVAILABLE"), PartitionState(1, -1), PartitionState(2, -1)],
                     window, window, READY)
    waited = wait_for_leaders(probe, "t", 3, interval=0.05, clock=clock, sleep=clock.sleep)
    assert len(probe.calls) == 5
    assert waited == pytest.approx(0.2)


def test_probe_errors_are_retried() -> None:
    clock = FakeClock()
    probe = scripted(kwire.WireError("connection closed by broker"), ConnectionRefusedError(), READY)
    wait_for_leaders(probe, "t", 3, clock=clock, sleep=clock.sleep)
    assert len(probe.calls) == 3


def test_timeout_names_each_partition_and_why() -> None:
    clock = FakeClock()
    probe = scripted([PartitionState(0, 1), PartitionState(1, 1, "ListOffsets NOT_LEADER_OR_FOLLOWER"),
                      PartitionState(2, -1, "LEADER_NOT_AVAILABLE")])
    with pytest.raises(LeaderWaitTimeout) as e:
        wait_for_leaders(probe, "t", 4, timeout=2.0, interval=0.5, clock=clock, sleep=clock.sleep)
    assert str(e.value) == ("t: after 2s, partitions without a ready leader: 1 (leader 1: ListOffsets "
                            "NOT_LEADER_OR_FOLLOWER), 2 (no leader: LEADER_NOT_AVAILABLE), 3 (not in metadata)")
    assert clock.now == pytest.approx(2.0)
    assert "\n" not in str(e.value)


def test_not_ready_is_empty_only_for_all_partitions() -> None:
    assert not_ready(READY, 3) == []
    assert not_ready(READY, 4) == ["3 (not in metadata)"]
    assert not_ready([], 1) == ["0 (not in metadata)"]


def test_kwire_probe_asks_each_leader_for_its_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    md = kwire.TopicMetadata(0, [kwire.PartitionMetadata(0, 0, 1), kwire.PartitionMetadata(1, 0, 2),
                                 kwire.PartitionMetadata(2, 5, -1)],
                             brokers={1: "h1:1", 2: "h2:2"})
    asked = []

    def list_offsets(addr: str, topic: str, partitions: list[int], timestamp: int = -1) -> dict[int, tuple[int, int]]:
        asked.append((addr, topic, partitions))
        return {p: (6 if addr == "h2:2" else 0, 0) for p in partitions}

    monkeypatch.setattr(broker_view.kwire, "topic_metadata", lambda addr, topic: md)
    monkeypatch.setattr(broker_view.kwire, "list_offsets", list_offsets)
    states = kwire_probe("boot:9")("t")
    assert sorted(asked) == [("h1:1", "t", [0]), ("h2:2", "t", [1])]
    assert states == [PartitionState(0, 1, None), PartitionState(1, 2, "ListOffsets NOT_LEADER_OR_FOLLOWER"),
                      PartitionState(2, -1, "LEADER_NOT_AVAILABLE")]
    assert not_ready(states, 3) == ["1 (leader 2: ListOffsets NOT_LEADER_OR_FOLLOWER)",
                                    "2 (no leader: LEADER_NOT_AVAILABLE)"]


def test_kwire_probe_unknown_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_view.kwire, "topic_metadata", lambda addr, topic: kwire.TopicMetadata(3))
    assert not_ready(kwire_probe("b:1")("t"), 1) == ["all (topic UNKNOWN_TOPIC_OR_PARTITION)"]


def test_end_offsets_wait_returns_once_every_partition_is_there() -> None:
    clock = FakeClock()
    reads = iter([{0: 0, 1: 0}, {0: 5, 1: 2}, {0: 10, 1: 9}, {0: 10, 1: 10}])
    ends, waited = wait_for_end_offsets(lambda: next(reads), {0: 10, 1: 10}, interval=0.05,
                                        clock=clock, sleep=clock.sleep)
    assert ends == {0: 10, 1: 10}
    assert waited == pytest.approx(0.15)


def test_end_offsets_wait_gives_up_with_what_it_saw() -> None:
    clock = FakeClock()
    ends, waited = wait_for_end_offsets(lambda: {0: 7}, {0: 10, 1: 3}, timeout=1.0, interval=0.25,
                                        clock=clock, sleep=clock.sleep)
    assert ends == {0: 7}
    assert waited == pytest.approx(1.0)


def test_end_offsets_wait_retries_read_errors() -> None:
    clock = FakeClock()
    answers = iter([kwire.WireError("closed"), {0: 1}])

    def read() -> dict[int, int]:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a
    assert wait_for_end_offsets(read, {0: 1}, clock=clock, sleep=clock.sleep)[0] == {0: 1}


def test_kwire_end_offsets_ask_the_leaders(monkeypatch: pytest.MonkeyPatch) -> None:
    md = kwire.TopicMetadata(0, [kwire.PartitionMetadata(0, 0, 1), kwire.PartitionMetadata(1, 0, 1),
                                 kwire.PartitionMetadata(2, 0, 1)], brokers={1: "h1:1"})
    monkeypatch.setattr(broker_view.kwire, "topic_metadata", lambda addr, topic: md)
    monkeypatch.setattr(broker_view.kwire, "list_offsets",
                        lambda addr, topic, parts, timestamp=-1: {p: (0 if p else 6, 100 + p) for p in parts})
    assert kwire_end_offsets("b:1", "t", 3) == {1: 101, 2: 102}  # partition 0 answered an error


# --- the wire messages -------------------------------------------------------------------------

def s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_metadata_v4_request_does_not_auto_create() -> None:
    assert kwire.encode_topic_metadata_request("ab") == struct.pack(">i", 1) + s16("ab") + b"\x00"


def test_parse_metadata_v4() -> None:
    body = struct.pack(">i", 0)  # throttle
    body += struct.pack(">i", 1) + struct.pack(">i", 7) + s16("127.0.0.1") + struct.pack(">i", 9092) + struct.pack(">h", -1)
    body += s16("cluster") + struct.pack(">i", 7)
    body += struct.pack(">i", 2)
    body += struct.pack(">h", 0) + s16("other") + b"\x00" + struct.pack(">i", 0)
    body += struct.pack(">h", 0) + s16("t") + b"\x00" + struct.pack(">i", 2)
    body += struct.pack(">hii", 0, 1, 7) + struct.pack(">ii", 1, 7) + struct.pack(">ii", 1, 7)
    body += struct.pack(">hii", 5, 0, -1) + struct.pack(">i", 0) + struct.pack(">i", 0)
    md = kwire.parse_topic_metadata(kwire.Reader(body), "t")
    assert md.error == 0
    assert md.brokers == {7: "127.0.0.1:9092"}
    assert md.partitions == [kwire.PartitionMetadata(0, 5, -1), kwire.PartitionMetadata(1, 0, 7)]
    assert kwire.parse_topic_metadata(kwire.Reader(body), "missing").error == 3


def test_list_offsets_v1_round_trip() -> None:
    req = kwire.encode_list_offsets_request("t", [0, 2])
    assert req == (struct.pack(">ii", -1, 1) + s16("t") + struct.pack(">i", 2)
                   + struct.pack(">iq", 0, -1) + struct.pack(">iq", 2, -1))
    body = struct.pack(">i", 1) + s16("t") + struct.pack(">i", 2)
    body += struct.pack(">ihqq", 0, 0, -1, 1000) + struct.pack(">ihqq", 2, 6, -1, -1)
    assert kwire.parse_list_offsets(kwire.Reader(body), "t") == {0: (0, 1000), 2: (6, -1)}
