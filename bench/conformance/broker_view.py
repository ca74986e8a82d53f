"""What the suite asks the broker itself, whatever the client: is a new topic ready, and what has
been stored. Spoken over the wire by bench/peers/kwire.py, so it is the same for every client.

Leaders (issue 12). A broker may answer CreateTopics, and even list a leader in Metadata, before
that leader can take a Produce: Kafka 4.4 publishes a new topic's metadata image before its
ReplicaManager has created the partitions, and a Produce in between gets NOT_LEADER_OR_FOLLOWER.
With acks=1/all the client retries; with acks=0 the broker closes the connection and every request
already written on it is dropped without a word (all 3000 acks=0 records of one client were lost
that way). So a partition is ready only when (1) Metadata shows a leader (>= 0, no partition error)
and (2) that leader answers ListOffsets for it without an error (ListOffsets, like Produce, is
served by the leader only). wait_for_leaders polls until both hold for every partition.

End offsets. An acks=0 producer is done when its queue is empty: every request written to the
socket. The broker may still be reading those requests when the next step starts, on another
connection, so the step waits until the log end offsets show the records (wait_for_end_offsets),
or until a timeout: acks=0 promises nothing, so then the step reports how many are missing.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from peers import kwire

LEADER_WAIT_S = 30.0
END_OFFSET_WAIT_S = 10.0
POLL_S = 0.05

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class PartitionState:
    """What the broker says about one partition: `problem` is None once it is ready. Partition -1
    stands for the whole topic (e.g. the broker does not know it yet)."""

    partition: int
    leader: int  # -1: no leader
    problem: str | None = None


Probe = Callable[[str], list[PartitionState]]  # topic -> the state of each partition the broker lists


class LeaderWaitTimeout(TimeoutError):
    """Some partition of the topic had no ready leader in time."""


class BrokerView(Protocol):
    """What the steps need from the broker (steps.Context.broker)."""

    def wait_for_leaders(self, topic: str, partitions: int) -> float:
        """Seconds until every partition had a ready leader; raises LeaderWaitTimeout."""

    def end_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        """The log end offset of each partition."""

    def wait_for_end_offsets(self, topic: str, want: dict[int, int]) -> tuple[dict[int, int], float]:
        """Poll until every partition's end offset is at least `want` or a timeout passes; return
        the last end offsets and the seconds waited."""


def not_ready(states: list[PartitionState], partitions: int) -> list[str]:
    """Why partitions 0..partitions-1 are not all ready (empty: all ready)."""
    whole_topic = [s.problem or "not ready" for s in states if s.partition < 0]
    if whole_topic:
        return [f"all ({whole_topic[0]})"]
    by_index = {s.partition: s for s in states}
    out = []
    for p in range(partitions):
        s = by_index.get(p)
        if s is None:
            out.append(f"{p} (not in metadata)")
        elif s.leader < 0:
            out.append(f"{p} (no leader{': ' + s.problem if s.problem else ''})")
        elif s.problem:
            out.append(f"{p} (leader {s.leader}: {s.problem})")
    return out


def wait_for_leaders(probe: Probe, topic: str, partitions: int, timeout: float = LEADER_WAIT_S,
                     interval: float = POLL_S, clock: Clock = time.monotonic, sleep: Sleep = time.sleep) -> float:
    """Poll `probe` until every partition of `topic` is ready; return the seconds waited.

    Raises LeaderWaitTimeout after `timeout` seconds, naming each partition that is not ready and
    why. A probe that raises (broker not reachable, bad answer) counts as not ready until then.
    """
    start = clock()
    while True:
        try:
            pending = not_ready(probe(topic), partitions)
        except (OSError, kwire.WireError, ValueError) as e:
            pending = [f"probe failed: {e}"]
        if not pending:
            return clock() - start
        if clock() - start >= timeout:
            raise LeaderWaitTimeout(f"{topic}: after {timeout:.0f}s, partitions without a ready leader: "
                                    + ", ".join(pending))
        sleep(interval)


def wait_for_end_offsets(read: Callable[[], dict[int, int]], want: dict[int, int],
                         timeout: float = END_OFFSET_WAIT_S, interval: float = POLL_S,
                         clock: Clock = time.monotonic, sleep: Sleep = time.sleep) -> tuple[dict[int, int], float]:
    """Poll `read` until each partition's end offset is >= `want`, at most `timeout` seconds.
    Returns the last end offsets read and the seconds waited; never raises for a shortfall (the
    caller reports it). Errors reading count as "not yet" and are retried until the timeout."""
    start = clock()
    ends: dict[int, int] = {}
    while True:
        try:
            ends = read()
        except (OSError, kwire.WireError, ValueError):
            pass
        if all(ends.get(p, -1) >= n for p, n in want.items()):
            return ends, clock() - start
        if clock() - start >= timeout:
            return ends, clock() - start
        sleep(interval)


def kwire_probe(bootstrap: str) -> Probe:
    """Metadata v4 from `bootstrap`, then ListOffsets v1 from each leader for its partitions."""
    def probe(topic: str) -> list[PartitionState]:
        md = kwire.topic_metadata(bootstrap, topic)
        if md.error:
            return [PartitionState(-1, -1, f"topic {kwire.error_name(md.error)}")]
        states: dict[int, PartitionState] = {}
        by_leader: dict[int, list[int]] = defaultdict(list)
        for p in md.partitions:
            if p.error or p.leader < 0:
                states[p.partition] = PartitionState(p.partition, p.leader, kwire.error_name(p.error) if p.error else None)
            else:
                by_leader[p.leader].append(p.partition)
        for leader, parts in by_leader.items():
            answers = kwire.list_offsets(md.brokers.get(leader, bootstrap), topic, parts)
            for p in parts:
                error, _ = answers.get(p, (-1, -1))
                problem = None if error == 0 else f"ListOffsets {kwire.error_name(error) if error >= 0 else 'no answer'}"
                states[p] = PartitionState(p, leader, problem)
        return [states[p] for p in sorted(states)]
    return probe


def kwire_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's log end offset, asked of its leader."""
    md = kwire.topic_metadata(bootstrap, topic)
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in md.partitions:
        if p.partition < partitions and p.leader >= 0:
            by_leader[p.leader].append(p.partition)
    ends = {}
    for leader, parts in by_leader.items():
        for p, (error, offset) in kwire.list_offsets(md.brokers.get(leader, bootstrap), topic, parts).items():
            if error == 0:
                ends[p] = offset
    return ends


class WireBroker:
    """The BrokerView of a real broker at `bootstrap`."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.probe = kwire_probe(bootstrap)

    def wait_for_leaders(self, topic: str, partitions: int) -> float:
        return wait_for_leaders(self.probe, topic, partitions)

    def end_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        return kwire_end_offsets(self.bootstrap, topic, partitions)

    def wait_for_end_offsets(self, topic: str, want: dict[int, int]) -> tuple[dict[int, int], float]:
        return wait_for_end_offsets(lambda: kwire_end_offsets(self.bootstrap, topic, len(want)), want)
