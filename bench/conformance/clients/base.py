"""The actions every conformance client implements. Steps (steps.py) combine them and verify."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field

from conformance.core import Rec

ACTION_TIMEOUT = 60.0  # seconds for any single action (tansu's first group join alone takes ~20 s)


@dataclass
class TxnReport:
    """What the client's consume-transform-produce run did."""

    consumed: list[Rec] = field(default_factory=list)
    offsets_in_txn: bool = True  # False when the client has no sendOffsetsToTransaction
    aborted: list[Rec] | None = None  # what the aborted transaction wrote, if not abort_records as given
    note: str = ""


class Client(abc.ABC):
    """A Kafka client driven by the suite. Every method raises on a client or broker error."""

    name: str = "?"
    reports_offsets: bool = True  # produce() returns the broker-assigned offsets

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    @abc.abstractmethod
    def create_topic(self, topic: str, partitions: int) -> int:
        """Create the topic; return the partition count the client's own metadata shows."""

    @abc.abstractmethod
    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        """Produce to each record's partition, in order; return the delivered records (with offsets
        where reported; for acks=0 the records handed over without error, offsets None)."""

    @abc.abstractmethod
    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        """Assign the partitions (no group), read from the beginning up to the end offset."""

    @abc.abstractmethod
    def group_consume(self, topic: str, group: str, expected: int) -> list[Rec]:
        """Subscribe as `group`, read `expected` records (plus any that arrive within a short
        grace period), commit synchronously, close."""

    @abc.abstractmethod
    def transaction(self, input_topic: str, output_topic: str, group: str, txn_id: str,
                    expected_input: int, abort_records: list[Rec]) -> TxnReport:
        """Consume `expected_input` records of input_topic in `group` (read_committed); in one
        transaction write each as Rec(p, key, "T:"+value) to output_topic and send the consumer's
        offsets to the transaction, commit; then write `abort_records` in a second transaction and
        abort it."""
