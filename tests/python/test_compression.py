"""Compression against the real seedlog broker: librdkafka produces with every codec (gzip,
snappy, lz4, zstd), the broker validates and stores the batches, and both librdkafka and the
seedlog CLI consumer read every record back; the seedlog producer compresses for librdkafka to
read; a topic whose compression.type is lz4 recompresses uncompressed batches."""

from __future__ import annotations

import os
import subprocess

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from conftest import seedlog_binary

RECORDS = 500
CODECS = ("gzip", "snappy", "lz4", "zstd")


def create(address: str, topic: str, configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=address)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, topic_configs=configs or {})])
    admin.close()


def produce_rdkafka(address: str, topic: str, codec: str) -> None:
    producer = Producer({"bootstrap.servers": address, "compression.type": codec, "linger.ms": 20})
    errors: list[str] = []
    for index in range(RECORDS):
        producer.produce(topic, value=f"{codec}-{index}".encode(),
                         on_delivery=lambda error, _msg: errors.append(str(error)) if error else None)
    assert producer.flush(30) == 0
    assert errors == []


def read_rdkafka(address: str, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    while len(values) < RECORDS:
        messages = consumer.consume(num_messages=RECORDS, timeout=10)
        assert messages, f"{topic}: only {len(values)} records arrived"
        for message in messages:
            assert message.error() is None, message.error()
            values.append(message.value().decode())
    consumer.close()
    return values


def read_seedlog(address: str, topic: str) -> list[str]:
    out = subprocess.run(
        [str(seedlog_binary()), "consume", "--bootstrap-server", address, "--topic", topic,
         "--from-beginning", "--max-messages", str(RECORDS)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return out.stdout.splitlines()


def test_every_codec_from_librdkafka_is_read_back_by_both_consumers(broker) -> None:
    for codec in CODECS:
        topic = f"compressed-{codec}"
        create(broker.address, topic)
        produce_rdkafka(broker.address, topic, codec)
        expected = [f"{codec}-{index}" for index in range(RECORDS)]
        assert read_rdkafka(broker.address, topic) == expected, codec
        assert read_seedlog(broker.address, topic) == expected, codec


def test_the_seedlog_producer_compresses_for_librdkafka_and_a_topic_codec_recompresses(broker) -> None:
    lines = "\n".join(f"zstd-{index}" for index in range(RECORDS)) + "\n"
    create(broker.address, "from-seedlog")
    subprocess.run(
        [str(seedlog_binary()), "produce", "--bootstrap-server", broker.address, "--topic", "from-seedlog",
         "--producer-property", "compression.type=zstd"],
        input=lines, capture_output=True, text=True, timeout=60, check=True,
    )
    assert read_rdkafka(broker.address, "from-seedlog") == lines.split()
    create(broker.address, "squeezed", {"compression.type": "lz4"})
    produce_rdkafka(broker.address, "squeezed", "none")
    expected = [f"none-{index}" for index in range(RECORDS)]
    assert read_rdkafka(broker.address, "squeezed") == expected
    assert read_seedlog(broker.address, "squeezed") == expected
    data = os.path.join(os.path.dirname(broker.log_path), "data", "squeezed-0", "00000000000000000000.log")
    with open(data, "rb") as segment:
        first = segment.read(23)
    assert int.from_bytes(first[21:23], "big") & 0x7 == 3, "stored lz4-compressed by the topic's codec"
