#!/usr/bin/env python3
"""A tiny, dependency-free Kafka wire client: ApiVersions v0, Metadata v1/v4, CreateTopics v2,
ListOffsets v1.

Used to wait until a broker answers (any of the three peers), by the kcat conformance client to
create topics (kcat has no admin API), and by the conformance suite to wait until every partition
of a new topic has a leader that serves it (bench/conformance/leaders.py). Only non-flexible
versions are used, which every broker here supports (Kafka 4.4: Metadata 0-13, CreateTopics 2-7,
ListOffsets 1-11; seedlog and tansu too).

CLI:
  kwire.py ready HOST:PORT [--timeout SECONDS]     exit 0 once Metadata lists >= 1 broker
  kwire.py metadata HOST:PORT                      print brokers and topics
  kwire.py create-topic HOST:PORT NAME PARTITIONS  create a topic (replication factor 1)
  kwire.py partitions HOST:PORT TOPIC              print each partition's leader and end offset
"""
from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from dataclasses import dataclass, field

API_LIST_OFFSETS = 2
API_METADATA = 3
API_API_VERSIONS = 18
API_CREATE_TOPICS = 19
CLIENT_ID = b"seedlog-bench"
LATEST = -1  # ListOffsets timestamp: the log end offset
ERROR_NAMES = {3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER",
               9: "REPLICA_NOT_AVAILABLE", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH"}


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"error {code}")


class WireError(Exception):
    """The broker could not be reached or answered something unexpected."""


@dataclass
class Metadata:
    """The parts of a Metadata v1 response the bench needs."""

    brokers: list[tuple[int, str, int]] = field(default_factory=list)
    topics: dict[str, int] = field(default_factory=dict)  # name -> partition count
    topic_errors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition of a Metadata v4 response: its error code and leader (-1: none)."""

    partition: int
    error: int
    leader: int


@dataclass
class TopicMetadata:
    """Metadata v4 for one topic, and the brokers' addresses (node id -> HOST:PORT)."""

    error: int
    partitions: list[PartitionMetadata] = field(default_factory=list)
    brokers: dict[int, str] = field(default_factory=dict)


def split_hostport(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {addr!r}")
    return host, int(port)


def encode_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id)
    header += struct.pack(">h", len(CLIENT_ID)) + CLIENT_ID
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class Reader:
    """Big-endian cursor over a response body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise WireError("response truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()


def roundtrip(addr: str, api_key: int, version: int, body: bytes, timeout: float = 5.0) -> Reader:
    host, port = split_hostport(addr)
    correlation_id = int(time.monotonic_ns() & 0x7FFFFFFF)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(encode_request(api_key, version, correlation_id, body))
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            data = recv_exact(sock, size)
    except OSError as e:
        raise WireError(f"{addr}: {e}") from e
    reader = Reader(data)
    got = reader.int32()
    if got != correlation_id:
        raise WireError(f"correlation id mismatch: sent {correlation_id}, got {got}")
    return reader


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise WireError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def api_versions(addr: str) -> dict[int, tuple[int, int]]:
    r = roundtrip(addr, API_API_VERSIONS, 0, b"")
    error = r.int16()
    if error != 0:
        raise WireError(f"ApiVersions error {error}")
    return {r.int16(): (r.int16(), r.int16()) for _ in range(r.int32())}


def metadata(addr: str) -> Metadata:
    r = roundtrip(addr, API_METADATA, 1, struct.pack(">i", -1))  # null array: all topics
    md = Metadata()
    for _ in range(r.int32()):
        node_id, host, port = r.int32(), r.string() or "", r.int32()
        r.string()  # rack
        md.brokers.append((node_id, host, port))
    r.int32()  # controller id
    for _ in range(r.int32()):
        error, name = r.int16(), r.string() or ""
        r.int8()  # is_internal
        partitions = r.int32()
        for _ in range(partitions):
            r.int16(), r.int32(), r.int32()
            for _ in range(r.int32()):
                r.int32()  # replicas
            for _ in range(r.int32()):
                r.int32()  # isr
        md.topics[name] = partitions
        if error:
            md.topic_errors[name] = error
    return md


def encode_topic_metadata_request(topic: str) -> bytes:
    """Metadata v4 body for one topic; allow_auto_topic_creation=false (v1-v3 imply true)."""
    return struct.pack(">i", 1) + encode_string(topic) + struct.pack(">b", 0)


def parse_topic_metadata(r: Reader, topic: str) -> TopicMetadata:
    """A Metadata v4 response body (after the correlation id), reduced to `topic`."""
    r.int32()  # throttle_time_ms
    brokers = {}
    for _ in range(r.int32()):
        node_id, host, port = r.int32(), r.string() or "", r.int32()
        r.string()  # rack
        brokers[node_id] = f"{host}:{port}"
    r.string()  # cluster id
    r.int32()  # controller id
    found = TopicMetadata(error=3, brokers=brokers)  # UNKNOWN_TOPIC_OR_PARTITION unless listed
    for _ in range(r.int32()):
        error, name = r.int16(), r.string() or ""
        r.int8()  # is_internal
        partitions = []
        for _ in range(r.int32()):
            p_error, index, leader = r.int16(), r.int32(), r.int32()
            for _ in range(r.int32()):
                r.int32()  # replicas
            for _ in range(r.int32()):
                r.int32()  # isr
            partitions.append(PartitionMetadata(index, p_error, leader))
        if name == topic:
            found = TopicMetadata(error, sorted(partitions, key=lambda p: p.partition), brokers)
    return found


def topic_metadata(addr: str, topic: str) -> TopicMetadata:
    """Metadata v4 for one topic, without auto-creating it."""
    return parse_topic_metadata(roundtrip(addr, API_METADATA, 4, encode_topic_metadata_request(topic)), topic)


def encode_list_offsets_request(topic: str, partitions: list[int], timestamp: int = LATEST) -> bytes:
    """ListOffsets v1 body: replica_id -1 (a consumer: only the leader answers), one topic."""
    body = struct.pack(">i", -1) + struct.pack(">i", 1) + encode_string(topic) + struct.pack(">i", len(partitions))
    for p in partitions:
        body += struct.pack(">iq", p, timestamp)
    return body


def parse_list_offsets(r: Reader, topic: str) -> dict[int, tuple[int, int]]:
    """A ListOffsets v1 response body: partition -> (error_code, offset) for `topic`."""
    out = {}
    for _ in range(r.int32()):
        name = r.string() or ""
        for _ in range(r.int32()):
            partition, error = r.int32(), r.int16()
            r.int64()  # timestamp
            offset = r.int64()
            if name == topic:
                out[partition] = (error, offset)
    return out


def list_offsets(addr: str, topic: str, partitions: list[int], timestamp: int = LATEST) -> dict[int, tuple[int, int]]:
    """ListOffsets v1 (default: the log end offsets) from the broker at `addr`, which must lead
    the partitions: anything else answers NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION."""
    r = roundtrip(addr, API_LIST_OFFSETS, 1, encode_list_offsets_request(topic, partitions, timestamp))
    return parse_list_offsets(r, topic)


def create_topic(addr: str, name: str, partitions: int, replication: int = 1) -> tuple[int, str | None]:
    """CreateTopics v2 for one topic; returns (error_code, error_message). 36 = already exists."""
    body = struct.pack(">i", 1) + encode_string(name)
    body += struct.pack(">ihii", partitions, replication, 0, 0)  # no assignments, no configs
    body += struct.pack(">ib", 30000, 0)  # timeout_ms, validate_only
    r = roundtrip(addr, API_CREATE_TOPICS, 2, body, timeout=35.0)
    r.int32()  # throttle
    results = [(r.string(), r.int16(), r.string()) for _ in range(r.int32())]
    for topic, error, message in results:
        if topic == name:
            return error, message
    raise WireError(f"CreateTopics response has no entry for {name}")


def wait_ready(addr: str, timeout: float) -> Metadata:
    """Poll Metadata until the broker lists at least one broker, or raise after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            md = metadata(addr)
            if md.brokers:
                return md
            last = "metadata lists no brokers"
        except (WireError, ValueError, struct.error) as e:
            last = str(e)
        time.sleep(0.25)
    raise WireError(f"{addr} not ready after {timeout:.0f}s: {last}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ready")
    p.add_argument("addr")
    p.add_argument("--timeout", type=float, default=60.0)
    p = sub.add_parser("metadata")
    p.add_argument("addr")
    p = sub.add_parser("create-topic")
    p.add_argument("addr")
    p.add_argument("name")
    p.add_argument("partitions", type=int)
    p = sub.add_parser("partitions")
    p.add_argument("addr")
    p.add_argument("topic")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "ready":
            md = wait_ready(args.addr, args.timeout)
            print(f"ready: brokers={md.brokers}")
        elif args.cmd == "metadata":
            md = metadata(args.addr)
            print(f"brokers={md.brokers}")
            for name, n in sorted(md.topics.items()):
                print(f"topic {name} partitions={n} error={md.topic_errors.get(name, 0)}")
        elif args.cmd == "partitions":
            tm = topic_metadata(args.addr, args.topic)
            print(f"topic {args.topic} error={tm.error}")
            for p in tm.partitions:
                end = "-"
                if p.leader >= 0:
                    leader_addr = tm.brokers.get(p.leader, args.addr)
                    error, offset = list_offsets(leader_addr, args.topic, [p.partition]).get(p.partition, (-1, -1))
                    end = str(offset) if error == 0 else error_name(error)
                print(f"partition {p.partition} leader={p.leader} error={p.error} end={end}")
        else:
            error, message = create_topic(args.addr, args.name, args.partitions)
            if error not in (0, 36):
                print(f"CreateTopics {args.name}: error {error} {message or ''}", file=sys.stderr)
                return 1
            print(f"created {args.name} partitions={args.partitions}" + (" (existed)" if error == 36 else ""))
    except WireError as e:
        print(f"kwire: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
