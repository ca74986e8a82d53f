"""The Python clients' produce returns once the client's queue is empty, with no fixed sleep.

The client libraries are replaced by fakes that deliver a few messages per flush() (as librdkafka
serves delivery reports), so a produce that returned early, or slept instead of draining, fails.
"""
from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass

import pytest

from conformance.clients import confluent_client
from conformance.clients.confluent_client import ConfluentClient, drain
from conformance.verify import check_deliveries, make_records

with warnings.catch_warnings():  # kafka-python 3.0.12 loads its schemas with deprecated importlib calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from conformance.clients import kafka_python_client
    from conformance.clients.kafka_python_client import KafkaPythonClient

RD_KAFKA_OFFSET_INVALID = -1001  # what librdkafka reports as the offset of an acks=0 delivery


@pytest.fixture(autouse=True)
def no_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed sleep is not a way to wait for the client's queue."""
    def forbidden(seconds: float) -> None:
        raise AssertionError(f"time.sleep({seconds}) in a produce")
    monkeypatch.setattr(confluent_client.time, "sleep", forbidden)
    monkeypatch.setattr(kafka_python_client.time, "sleep", forbidden)


@dataclass
class FakeMsg:
    _partition: int
    _key: bytes
    _value: bytes
    _offset: int

    def partition(self) -> int:
        return self._partition

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset


class FakeRdkProducer:
    """librdkafka's shape: produce() queues; flush(t) delivers up to `per_flush` queued messages
    (firing their delivery callbacks) and returns how many are still queued."""

    instances: list["FakeRdkProducer"] = []

    def __init__(self, conf: dict[str, object], per_flush: int = 4, stuck: bool = False) -> None:
        self.conf = conf
        self.per_flush = per_flush
        self.stuck = stuck
        self.queue: deque[tuple[FakeMsg, object]] = deque()
        self.flushes: list[float] = []
        self.next_offset: dict[int, int] = {}
        FakeRdkProducer.instances.append(self)

    def produce(self, topic: str, key: str, value: str, partition: int, on_delivery) -> None:  # type: ignore[no-untyped-def]
        self.queue.append((FakeMsg(partition, key.encode(), value.encode(), 0), on_delivery))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        self.flushes.append(timeout)
        if not self.stuck:
            for _ in range(min(self.per_flush, len(self.queue))):
                msg, cb = self.queue.popleft()
                if self.conf["acks"] == "0":
                    msg._offset = RD_KAFKA_OFFSET_INVALID
                else:
                    msg._offset = self.next_offset.get(msg._partition, 0)
                    self.next_offset[msg._partition] = msg._offset + 1
                cb(None, msg)  # type: ignore[operator]
        return len(self.queue)


@pytest.fixture
def rdk(monkeypatch: pytest.MonkeyPatch) -> type[FakeRdkProducer]:
    FakeRdkProducer.instances = []
    monkeypatch.setattr(confluent_client, "Producer", FakeRdkProducer)
    return FakeRdkProducer


@pytest.mark.parametrize("acks", ["0", "1"])
def test_confluent_produce_drains_the_queue(rdk: type[FakeRdkProducer], acks: str) -> None:
    records = make_records("run-acks" + acks, 10)
    delivered = ConfluentClient("fake:0").produce("t", records, acks, False)
    producer = rdk.instances[0]
    assert not producer.queue
    assert len(producer.flushes) == 3  # 4 + 4 + 2: flushed until the queue was empty
    assert check_deliveries(records, delivered, offsets_reported=acks != "0") == []
    if acks == "0":
        assert all(r.offset is None for r in delivered)  # librdkafka's -1001 is "no offset"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_drain_times_out_with_the_counts() -> None:
    clock = FakeClock()
    producer = FakeRdkProducer({"acks": "0"}, stuck=True)
    for r in make_records("x", 5):
        producer.produce("t", r.key, r.value, r.partition, lambda err, msg: None)
    real_flush = producer.flush

    def slow_flush(timeout: float) -> int:
        clock.now += timeout
        return real_flush(timeout)
    producer.flush = slow_flush  # type: ignore[method-assign]
    with pytest.raises(TimeoutError, match=r"after 3s: 5 messages still queued, 5 of 5 without a delivery report"):
        drain(producer, lambda: 0, 5, 3.0, clock=clock)  # type: ignore[arg-type]
    assert clock.now == pytest.approx(3.0)


def test_drain_waits_for_reports_after_the_queue_is_empty() -> None:
    """flush() == 0 is not enough while delivery reports are still to be served."""
    seen = {"reports": 0}
    polls = []

    class Producer:
        def flush(self, timeout: float) -> int:
            return 0

        def poll(self, timeout: float) -> int:
            polls.append(timeout)
            seen["reports"] += 1
            return 1
    drain(Producer(), lambda: seen["reports"], 3, 5.0)  # type: ignore[arg-type]
    assert len(polls) == 3


# --- kafka-python ------------------------------------------------------------------------------

class FakeFuture:
    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.is_done = False
        self.offset = -1

    def get(self, timeout: float) -> object:
        assert self.is_done, "get() before the send completed"
        return type("Md", (), {"partition": self.partition, "offset": self.offset})()


class FakeKafkaProducer:
    """kafka-python's shape: send() returns a future that completes on flush()."""

    instances: list["FakeKafkaProducer"] = []
    leave_undone = 0

    def __init__(self, **config: object) -> None:
        self.config = config
        self.futures: list[FakeFuture] = []
        self.flushed = False
        self.closed = False
        FakeKafkaProducer.instances.append(self)

    def send(self, topic: str, key: bytes, value: bytes, partition: int) -> FakeFuture:
        fut = FakeFuture(partition)
        self.futures.append(fut)
        return fut

    def flush(self, timeout: float) -> None:
        self.flushed = True
        for i, fut in enumerate(self.futures[: len(self.futures) - self.leave_undone]):
            fut.is_done = True
            fut.offset = i  # kafka-python 3.0.12 makes up offsets 0, 1, ... even for acks=0

    def close(self, timeout: float) -> None:
        assert self.flushed
        self.closed = True


@pytest.fixture
def kp(monkeypatch: pytest.MonkeyPatch) -> type[FakeKafkaProducer]:
    FakeKafkaProducer.instances = []
    FakeKafkaProducer.leave_undone = 0
    monkeypatch.setattr(kafka_python_client, "KafkaProducer", FakeKafkaProducer)
    return FakeKafkaProducer


def test_kafka_python_acks0_flushes_then_closes(kp: type[FakeKafkaProducer]) -> None:
    records = make_records("run-acks0", 9)
    delivered = KafkaPythonClient("fake:0").produce("t", records, "0", False)
    producer = kp.instances[0]
    assert producer.flushed and producer.closed
    assert check_deliveries(records, delivered, offsets_reported=False) == []
    assert all(r.offset is None for r in delivered)


def test_kafka_python_refuses_to_return_with_sends_pending(kp: type[FakeKafkaProducer]) -> None:
    kp.leave_undone = 2
    with pytest.raises(RuntimeError, match="2 of 9 sends not complete"):
        KafkaPythonClient("fake:0").produce("t", make_records("run-acks0", 9), "0", False)
    assert kp.instances[0].closed
