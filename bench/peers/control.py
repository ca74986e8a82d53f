"""Start and stop a peer broker from Python through bench/peers/<name>.sh (same interface for all)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import TracebackType

PEERS_DIR = Path(__file__).resolve().parent
PEERS = ("kafka", "tansu", "seedlog")


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A loopback port P with P+1 also free (Kafka's controller listens on P+1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535 and port_is_free(port) and port_is_free(port + 1):
            return port
    raise RuntimeError("no free loopback port pair")


class PeerError(RuntimeError):
    """A peer script failed."""


class Peer:
    """A running broker: `with Peer("kafka", datadir) as p: p.bootstrap, p.pid`."""

    def __init__(self, name: str, datadir: Path, port: int | None = None, keep_data: bool = False) -> None:
        if name not in PEERS:
            raise ValueError(f"unknown peer {name!r}; one of {PEERS}")
        self.name = name
        self.datadir = datadir
        self.port = port or free_port_pair()
        self.keep_data = keep_data
        self.pid: int | None = None

    @property
    def script(self) -> Path:
        return PEERS_DIR / f"{self.name}.sh"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_command(self) -> list[str]:
        return ["bash", str(self.script), "start", str(self.port), str(self.datadir)]

    def start(self) -> int:
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        self.datadir.mkdir(parents=True)
        proc = subprocess.run(self.start_command(), capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise PeerError(f"{self.name} start failed: {proc.stderr.strip()[-2000:]}")
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if not last.isdigit():
            raise PeerError(f"{self.name} start printed no PID: {proc.stdout!r}")
        self.pid = int(last)
        return self.pid

    def stop(self) -> None:
        if self.pid is None:
            return
        proc = subprocess.run(["bash", str(self.script), "stop", str(self.datadir)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            print(f"{self.name} stop: {proc.stderr.strip()}", file=sys.stderr)
        self.pid = None
        if not self.keep_data:
            shutil.rmtree(self.datadir / "data", ignore_errors=True)

    def __enter__(self) -> "Peer":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def available(name: str) -> str | None:
    """None if the peer can be started here, else the reason it cannot."""
    script = PEERS_DIR / f"{name}.sh"
    probe = {"kafka": None, "tansu": "bin", "seedlog": "bin"}[name]
    if probe is None:
        return None if shutil.which("java") and shutil.which("mvn") else "needs java and mvn"
    proc = subprocess.run(["bash", str(script), probe], capture_output=True, text=True)
    return None if proc.returncode == 0 else proc.stderr.strip()
