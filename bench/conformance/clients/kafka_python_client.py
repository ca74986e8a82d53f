"""kafka-python (pure Python) conformance client."""
from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

from conformance.clients.base import ACTION_TIMEOUT, Client, TxnReport
from conformance.core import Rec

GRACE_MS = 1000


def _acks(acks: str) -> int | str:
    return "all" if acks == "all" else int(acks)


class KafkaPythonClient(Client):
    name = "kafka-python"

    def create_topic(self, topic: str, partitions: int) -> int:
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="conformance-admin")
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=30000)
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            deadline = time.monotonic() + 30
            seen: set[int] = set()
            while time.monotonic() < deadline:
                seen = consumer.partitions_for_topic(topic) or set()
                if len(seen) >= partitions:
                    break
                time.sleep(0.2)
            return len(seen)
        finally:
            consumer.close()

    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=_acks(acks),
                                 enable_idempotence=idempotent, linger_ms=5)
        try:
            futures = [(r, producer.send(topic, key=r.key.encode(), value=r.value.encode(), partition=r.partition))
                       for r in records]
            # flush() returns once the accumulator is empty and every batch is complete (raises
            # KafkaTimeoutError otherwise); with acks=0 a batch completes when its request is sent,
            # as there is no response. No fixed sleep after it: close() below is graceful.
            producer.flush(timeout=ACTION_TIMEOUT)
            undone = sum(1 for _, fut in futures if not fut.is_done)
            if undone:
                raise RuntimeError(f"flush returned with {undone} of {len(futures)} sends not complete")
            delivered = []
            for r, fut in futures:
                md = fut.get(timeout=ACTION_TIMEOUT)
                # acks=0 has no response: kafka-python 3.0.12 still reports offsets 0, 1, 2, ... (its
                # synthetic response's base_offset defaults to 0), so they are ignored here.
                offset = md.offset if acks != "0" and md.offset >= 0 else None
                delivered.append(Rec(md.partition, r.key, r.value, offset))
            return delivered
        finally:
            producer.close(timeout=10)

    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                 auto_offset_reset="earliest", isolation_level=isolation)
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            end = consumer.end_offsets(tps)
            out: list[Rec] = []
            deadline = time.monotonic() + ACTION_TIMEOUT
            while any(consumer.position(tp) < end[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"read stopped short of the end offsets {dict((tp.partition, o) for tp, o in end.items())}")
                for tp, msgs in consumer.poll(timeout_ms=500).items():
                    out += [_rec(m) for m in msgs]
            return out
        finally:
            consumer.close()

    def group_consume(self, topic: str, group: str, expected: int) -> list[Rec]:
        consumer = KafkaConsumer(topic, bootstrap_servers=self.bootstrap, group_id=group,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            out = _poll_until(consumer, expected)
            consumer.commit()
            return out
        finally:
            consumer.close()

    def transaction(self, input_topic: str, output_topic: str, group: str, txn_id: str,
                    expected_input: int, abort_records: list[Rec]) -> TxnReport:
        consumer = KafkaConsumer(input_topic, bootstrap_servers=self.bootstrap, group_id=group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 isolation_level="read_committed")
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=txn_id,
                                 enable_idempotence=True, acks="all")
        try:
            consumed = _poll_until(consumer, expected_input, grace_ms=0)
            producer.init_transactions()
            producer.begin_transaction()
            for r in consumed:
                producer.send(output_topic, key=r.key.encode(), value=("T:" + r.value).encode(), partition=r.partition)
            offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
            producer.begin_transaction()
            for r in abort_records:
                producer.send(output_topic, key=r.key.encode(), value=r.value.encode(), partition=r.partition)
            producer.flush()
            producer.abort_transaction()
            return TxnReport(consumed=consumed)
        finally:
            producer.close(timeout=10)
            consumer.close()


def _rec(m: object) -> Rec:
    key = m.key.decode() if m.key is not None else ""  # type: ignore[attr-defined]
    value = m.value.decode() if m.value is not None else ""  # type: ignore[attr-defined]
    return Rec(m.partition, key, value, m.offset)  # type: ignore[attr-defined]


def _poll_until(consumer: KafkaConsumer, expected: int, grace_ms: int = GRACE_MS) -> list[Rec]:
    out: list[Rec] = []
    deadline = time.monotonic() + ACTION_TIMEOUT
    while len(out) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"group consumer got {len(out)} of {expected} records")
        for msgs in consumer.poll(timeout_ms=500).values():
            out += [_rec(m) for m in msgs]
    if grace_ms:
        for msgs in consumer.poll(timeout_ms=grace_ms).values():
            out += [_rec(m) for m in msgs]
    return out
