#!/usr/bin/env python3
"""librdkafka perf client (confluent-kafka), shaped like Kafka's own perf tools.

  rdk_perf.py produce --bootstrap B --topic T --num-records N --record-size S [--acks A] [-X k=v ...]
      prints Kafka ProducerPerformance's summary line:
      "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency,
       P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
      Latency of a record = produce() call to its delivery report (librdkafka's
      rd_kafka_message_latency), for every record (Kafka's tool samples).
  rdk_perf.py consume --bootstrap B --topic T --num-records N [-X k=v ...]
      assigns every partition from the beginning (no consumer group) and prints
      "N records consumed, X records/sec (Y MB/sec), T ms elapsed."
      The clock starts at the first record, as ConsumerPerformance's fetch.* columns.

Runs under the bench venv (.venv): python needs confluent-kafka.
"""
from __future__ import annotations

import argparse
import random
import string
import sys
import time
from array import array

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

MB = 1024 * 1024


def parse_props(items: list[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"-X expects key=value, got {item!r}")
        props[key] = value
    return props


def percentile(sorted_values: array, q: float) -> float:
    """Nearest-rank percentile of an ascending array (as Kafka's ProducerPerformance does)."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[index]


def produce(args: argparse.Namespace) -> int:
    conf = {"bootstrap.servers": args.bootstrap, "acks": args.acks, **parse_props(args.X)}
    producer = Producer(conf)
    rng = random.Random(0)
    payload = "".join(rng.choice(string.ascii_uppercase) for _ in range(args.record_size)).encode()
    latencies = array("d")
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(msg.latency() or 0.0)  # type: ignore[attr-defined]

    start = time.perf_counter()
    for i in range(args.num_records):
        while True:
            try:
                producer.produce(args.topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        if i & 1023 == 0:
            producer.poll(0)
    remaining = producer.flush(args.timeout)
    elapsed = time.perf_counter() - start
    sent = len(latencies)
    if remaining or errors:
        print(f"ERROR {remaining} records undelivered, {len(errors)} failed: {errors[:3]}", file=sys.stderr)
    if args.acks == "0":
        sent = args.num_records - remaining - len(errors)
    lat_ms = array("d", sorted(v * 1000.0 for v in latencies))
    avg = sum(lat_ms) / len(lat_ms) if lat_ms else float("nan")
    rate = sent / elapsed
    print(
        f"{sent} records sent, {rate:.6f} records/sec ({rate * args.record_size / MB:.2f} MB/sec), "
        f"{avg:.2f} ms avg latency, {lat_ms[-1] if lat_ms else float('nan'):.2f} ms max latency, "
        f"{percentile(lat_ms, 0.5):.0f} ms 50th, {percentile(lat_ms, 0.95):.0f} ms 95th, "
        f"{percentile(lat_ms, 0.99):.0f} ms 99th, {percentile(lat_ms, 0.999):.0f} ms 99.9th."
    )
    return 1 if remaining or errors else 0


def consume(args: argparse.Namespace) -> int:
    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": "rdk-perf-assign",  # required by the client API; no group protocol is used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        **parse_props(args.X),
    }
    consumer = Consumer(conf)
    try:
        md = consumer.list_topics(args.topic, timeout=30)
        partitions = sorted(md.topics[args.topic].partitions)
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
        count = 0
        nbytes = 0
        first: float | None = None
        deadline = time.monotonic() + args.timeout
        while count < args.num_records and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF (not enabled, but be safe)
                        continue
                    raise KafkaException(msg.error())
                if first is None:
                    first = time.perf_counter()
                count += 1
                nbytes += len(msg.value() or b"")
        elapsed = time.perf_counter() - (first or time.perf_counter())
    finally:
        consumer.close()
    rate = count / elapsed if elapsed > 0 else float("nan")
    print(
        f"{count} records consumed, {rate:.6f} records/sec ({nbytes / MB / elapsed if elapsed > 0 else float('nan'):.2f} MB/sec), "
        f"{elapsed * 1000.0:.0f} ms elapsed."
    )
    if count < args.num_records:
        print(f"ERROR only {count} of {args.num_records} records consumed before the timeout", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["produce", "consume"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--num-records", type=int, required=True)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    ap.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    ap.add_argument("-X", action="append", default=[], metavar="KEY=VALUE", help="client property")
    args = ap.parse_args(argv)
    return produce(args) if args.mode == "produce" else consume(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
