"""Idempotent producers against the real seedlog broker: kafka-python with its defaults
(idempotent since KIP-679) and librdkafka with `enable.idempotence=true` each produce to a
3-partition topic; every acknowledged record is read back exactly once, where the broker placed
it, in send order per partition."""

from __future__ import annotations

from collections import defaultdict

from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

PARTITIONS = 3
RECORDS = 1000


def create(address: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=address)
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()


def read_back(address: str, topic: str, expected: int) -> dict[int, list[tuple[int, str]]]:
    consumer = KafkaConsumer(bootstrap_servers=address, group_id=None, enable_auto_commit=False, consumer_timeout_ms=5000)
    partitions = [TopicPartition(topic, partition) for partition in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    read: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for message in consumer:
        read[message.partition].append((message.offset, message.value.decode()))
        if sum(len(records) for records in read.values()) == expected:
            break
    consumer.close()
    return read


def assert_exactly_once(read: dict[int, list[tuple[int, str]]], placed: dict[str, tuple[int, int]]) -> None:
    values = [value for records in read.values() for _, value in records]
    assert len(values) == len(set(values)), "no record is stored twice"
    assert sorted(values) == sorted(placed), "every acknowledged record is stored"
    for partition, records in read.items():
        for offset, value in records:
            assert placed[value] == (partition, offset), f"{value} is where the broker acknowledged it"
        indices = [int(value.rsplit("-", 1)[1]) for _, value in records]
        assert indices == sorted(indices), f"partition {partition}: records in send order"


def test_kafka_python_with_its_idempotent_defaults(broker) -> None:
    topic = "idempotent-kafka-python"
    create(broker.address, topic)
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=5)
    assert producer.config["enable_idempotence"], "kafka-python's default is idempotent"
    futures = [
        (f"kp-{index}", producer.send(topic, value=f"kp-{index}".encode(), partition=index % PARTITIONS))
        for index in range(RECORDS)
    ]
    producer.flush(timeout=30)
    placed = {}
    for value, future in futures:
        metadata = future.get(timeout=30)
        placed[value] = (metadata.partition, metadata.offset)
    producer.close(timeout=10)
    assert_exactly_once(read_back(broker.address, topic, RECORDS), placed)


def test_librdkafka_with_enable_idempotence(broker) -> None:
    topic = "idempotent-librdkafka"
    create(broker.address, topic)
    producer = Producer({"bootstrap.servers": broker.address, "enable.idempotence": True, "linger.ms": 5})
    placed: dict[str, tuple[int, int]] = {}
    errors: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            placed[message.value().decode()] = (message.partition(), message.offset())

    for index in range(RECORDS):
        producer.produce(topic, value=f"rd-{index}".encode(), partition=index % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "every record delivered"
    assert errors == []
    assert_exactly_once(read_back(broker.address, topic, RECORDS), placed)
