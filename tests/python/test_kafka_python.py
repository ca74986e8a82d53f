"""kafka-python against the real seedlog broker: create a topic with 3 partitions, produce 1,000
records each with acks=1 and acks=all, read every partition back with an assigned-partition
consumer, and verify count, order and content."""

from __future__ import annotations

from collections import defaultdict

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

TOPIC = "kafka-python-round-trip"
PARTITIONS = 3
RECORDS = 1000


def produce(address: str, acks: object, prefix: str) -> dict[str, tuple[int, int]]:
    # seedlog has no idempotent producer yet; kafka-python enables it by default (KIP-679).
    producer = KafkaProducer(bootstrap_servers=address, acks=acks, enable_idempotence=False, linger_ms=5)
    futures = []
    for index in range(RECORDS):
        value = f"{prefix}-{index}".encode()
        futures.append((value, producer.send(TOPIC, key=str(index).encode(), value=value, partition=index % PARTITIONS)))
    producer.flush(timeout=30)
    placed = {}
    for value, future in futures:
        metadata = future.get(timeout=30)
        placed[value.decode()] = (metadata.partition, metadata.offset)
    producer.close(timeout=10)
    return placed


def test_produce_with_acks_1_and_all_then_read_every_partition_back(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()

    sent = {}
    for acks, prefix in ((1, "acks-1"), ("all", "acks-all")):
        placed = produce(broker.address, acks, prefix)
        assert len(placed) == RECORDS
        sent.update(placed)

    consumer = KafkaConsumer(bootstrap_servers=broker.address, group_id=None, enable_auto_commit=False, consumer_timeout_ms=5000)
    partitions = [TopicPartition(TOPIC, partition) for partition in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    read = defaultdict(list)
    for message in consumer:
        read[message.partition].append((message.offset, message.key.decode(), message.value.decode()))
        if sum(len(records) for records in read.values()) == 2 * RECORDS:
            break
    consumer.close()

    assert sum(len(records) for records in read.values()) == 2 * RECORDS, "count"
    for partition, records in read.items():
        offsets = [offset for offset, _, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition}: dense, ordered offsets"
        for offset, key, value in records:
            assert sent[value] == (partition, offset), f"{value} is where the broker acknowledged it"
            assert value.endswith(f"-{key}"), "key and value travelled together"
        for prefix in ("acks-1", "acks-all"):
            indices = [int(value.rsplit("-", 1)[1]) for _, _, value in records if value.startswith(prefix + "-")]
            assert indices == sorted(indices), f"partition {partition}: {prefix} records in send order"


def test_delete_records_moves_the_start_and_a_consumer_from_the_beginning_starts_there(broker) -> None:
    topic = "kafka-python-delete-records"
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=broker.address, acks="all", enable_idempotence=False)
    for index in range(100):
        producer.send(topic, value=f"v-{index}".encode(), partition=0)
    producer.flush(timeout=30)
    producer.close(timeout=10)

    partition = TopicPartition(topic, 0)
    result = admin.delete_records({partition: 40}, timeout_ms=10_000)
    assert result[partition]["low_watermark"] == 40, result
    admin.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.address, group_id=None, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([partition])
    assert consumer.beginning_offsets([partition])[partition] == 40
    consumer.seek_to_beginning(partition)
    first = next(iter(consumer))
    consumer.close()
    assert (first.offset, first.value) == (40, b"v-40")
