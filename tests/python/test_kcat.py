"""kcat (librdkafka 2.0 from Debian) produces to and consumes from the real broker. Skipped when
kcat is not installed; .ci/run installs it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kafka.admin import KafkaAdminClient, NewTopic

if shutil.which("kcat") is None and os.environ.get("SEEDLOG_REQUIRE_KCAT"):
    raise RuntimeError("kcat is required here (SEEDLOG_REQUIRE_KCAT) but not installed")
pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")

TOPIC = "kcat-round-trip"


def test_kcat_produces_and_consumes(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
    admin.close()
    lines = [f"kcat-{index}" for index in range(200)]
    subprocess.run(
        ["kcat", "-b", broker.address, "-t", TOPIC, "-P", "-p", "0", "-X", "acks=all"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=60,
    )
    consumed = subprocess.run(
        ["kcat", "-b", broker.address, "-t", TOPIC, "-C", "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    records = [line.split(" ", 1) for line in consumed.stdout.splitlines()]
    assert [int(offset) for offset, _ in records] == list(range(200))
    assert [value for _, value in records] == lines
