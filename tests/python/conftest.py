"""A real `seedlog broker` on a free loopback port with its own data directory."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def seedlog_binary() -> Path:
    configured = os.environ.get("SEEDLOG_BIN")
    candidates = [Path(configured)] if configured else [REPO / "target/debug/seedlog", REPO / "target/release/seedlog"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise RuntimeError(f"no seedlog binary at {candidates}: run `cargo build` first or set SEEDLOG_BIN")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Broker:
    """A `seedlog broker` process; `properties` are added to its node.id, listeners and log.dirs.
    `listeners` replaces the one PLAINTEXT listener on `port` (which must be among them: the
    process counts as started once it accepts there)."""

    def __init__(
        self,
        directory: Path,
        node_id: int = 0,
        properties: str = "",
        port: int | None = None,
        listeners: str | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config = directory / "server.properties"
        listeners = listeners or f"PLAINTEXT://{self.address}"
        self.config.write_text(
            f"node.id={node_id}\nlisteners={listeners}\nlog.dirs={directory / 'data'}\n{properties}"
        )
        self.start()

    def start(self) -> None:
        """Starts the process (again) on the same config and data directory."""
        directory, config = self.config.parent, self.config
        self.log_path = directory / "broker.log"
        self.log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [str(seedlog_binary()), "broker", "--config", str(config)], stdout=subprocess.DEVNULL, stderr=self.log
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"seedlog did not start:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self.log.close()


@pytest.fixture()
def broker(tmp_path: Path):
    running = Broker(tmp_path)
    yield running
    running.stop()
