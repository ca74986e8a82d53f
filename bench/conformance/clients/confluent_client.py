"""confluent-kafka (librdkafka) conformance client."""
from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conformance.clients.base import ACTION_TIMEOUT, Client, TxnReport
from conformance.core import Rec

GRACE_S = 1.0


class ConfluentClient(Client):
    name = "confluent-kafka"

    def create_topic(self, topic: str, partitions: int) -> int:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=30)[topic]
        try:
            fut.result(timeout=ACTION_TIMEOUT)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        deadline = time.monotonic() + 30
        count = 0
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            count = len(t.partitions) if t is not None and t.error is None else 0
            if count >= partitions:
                break
            time.sleep(0.2)
        return count

    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": acks,
                             "enable.idempotence": idempotent, "linger.ms": 5})
        delivered: list[Rec] = []
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
                return
            offset = msg.offset()  # type: ignore[attr-defined]
            delivered.append(Rec(msg.partition(), msg.key().decode(), msg.value().decode(),  # type: ignore[attr-defined]
                                 offset if acks != "0" and offset is not None and offset >= 0 else None))

        for r in records:
            producer.produce(topic, key=r.key, value=r.value, partition=r.partition, on_delivery=on_delivery)
            producer.poll(0)
        drain(producer, lambda: len(delivered) + len(errors), len(records), ACTION_TIMEOUT)
        if errors:
            raise RuntimeError(f"{len(errors)} delivery errors ({errors[:1]})")
        return delivered

    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "conformance-assign-only",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": isolation})
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            return _consume(consumer, lambda out, eof: len(eof) >= len(partitions), set(), f"EOF on {partitions}")
        finally:
            consumer.close()

    def group_consume(self, topic: str, group: str, expected: int) -> list[Rec]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            out = _consume(consumer, lambda out, eof: len(out) >= expected, None, f"{expected} records")
            out += _drain(consumer, GRACE_S)
            consumer.commit(asynchronous=False)
            return out
        finally:
            consumer.close()

    def transaction(self, input_topic: str, output_topic: str, group: str, txn_id: str,
                    expected_input: int, abort_records: list[Rec]) -> TxnReport:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": txn_id, "linger.ms": 5})
        try:
            consumer.subscribe([input_topic])
            consumed = _consume(consumer, lambda out, eof: len(out) >= expected_input, None,
                                f"{expected_input} input records")
            producer.init_transactions(ACTION_TIMEOUT)
            producer.begin_transaction()
            for r in consumed:
                producer.produce(output_topic, key=r.key, value="T:" + r.value, partition=r.partition)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), ACTION_TIMEOUT)
            producer.commit_transaction(ACTION_TIMEOUT)
            producer.begin_transaction()
            for r in abort_records:
                producer.produce(output_topic, key=r.key, value=r.value, partition=r.partition)
            producer.flush(ACTION_TIMEOUT)
            producer.abort_transaction(ACTION_TIMEOUT)
            return TxnReport(consumed=consumed)
        finally:
            consumer.close()


def drain(producer: Producer, reported, expected: int, timeout: float,  # type: ignore[no-untyped-def]
          clock=time.monotonic) -> None:
    """Return once the producer's queue is empty and `reported()` (delivery reports seen) has
    reached `expected`; raise TimeoutError after `timeout` seconds.

    flush() serves delivery reports and returns how many messages are still queued. With acks=0
    librdkafka reports a message delivered once its request is written to the socket (there is no
    response), so an empty queue is the last thing the client can tell: no fixed sleep after it.
    """
    deadline = clock() + timeout
    while True:
        left = producer.flush(max(0.0, min(1.0, deadline - clock())))
        if left == 0 and reported() >= expected:
            return
        if clock() >= deadline:
            raise TimeoutError(f"after {timeout:.0f}s: {left} messages still queued, "
                               f"{expected - reported()} of {expected} without a delivery report")
        if left == 0:
            producer.poll(0.1)  # queue empty, reports not all served yet


def _rec(msg: object) -> Rec:
    key = msg.key()  # type: ignore[attr-defined]
    value = msg.value()  # type: ignore[attr-defined]
    return Rec(msg.partition(), key.decode() if key else "", value.decode() if value else "", msg.offset())  # type: ignore[attr-defined]


def _consume(consumer: Consumer, done, eof: set[int] | None, what: str) -> list[Rec]:  # type: ignore[no-untyped-def]
    out: list[Rec] = []
    deadline = time.monotonic() + ACTION_TIMEOUT
    while not done(out, eof):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited for {what}, got {len(out)} records")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF and eof is not None:
                eof.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        out.append(_rec(msg))
    return out


def _drain(consumer: Consumer, seconds: float) -> list[Rec]:
    out: list[Rec] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            out.append(_rec(msg))
    return out
