#!/usr/bin/env python3
"""Client conformance suite: kafka-python, confluent-kafka, Java kafka-clients 4.4 and kcat.

  python3 bench/conformance/run.py --bootstrap 127.0.0.1:9092 [--clients ...] [--steps ...]
  python3 bench/conformance/run.py --broker kafka|tansu|seedlog   start that broker, run, stop,
                                   save results/BROKER.json and update docs/COMPATIBILITY.md
  python3 bench/conformance/run.py --render                       only regenerate the docs table

Every step prints one line: "PASS|FAIL|SKIP CLIENT STEP detail". The exit status is non-zero iff
a step FAILed. With --expect-gaps SECTION (default: the --broker name), the steps listed for
SECTION in bench/conformance/gaps.toml are reported as "SKIP ... expected gap: reason".
Each client runs in its own process (under the bench venv), bounded by --client-timeout.
"""
from __future__ import annotations

import argparse
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchenv  # noqa: E402
from conformance import compat  # noqa: E402
from conformance.core import CLIENTS, STEPS, Status, StepResult, exit_code, parse_step_line, summary_line  # noqa: E402
from conformance.gaps import DEFAULT_GAPS, GapList, load_gaps  # noqa: E402

COMPAT_DOC = benchenv.REPO_DIR / "docs" / "COMPATIBILITY.md"


def split_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in items if x not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return items


def make_client(name: str, bootstrap: str):  # type: ignore[no-untyped-def]
    """Import lazily: each client's library is only needed in its own worker process."""
    if name == "kafka-python":
        from conformance.clients.kafka_python_client import KafkaPythonClient
        return KafkaPythonClient(bootstrap)
    if name == "confluent-kafka":
        from conformance.clients.confluent_client import ConfluentClient
        return ConfluentClient(bootstrap)
    if name == "java":
        from conformance.clients.java_client import JavaClient
        return JavaClient(bootstrap, benchenv.CACHE_DIR)
    if name == "kcat":
        from conformance.clients.kcat_client import KcatClient
        return KcatClient(bootstrap)
    raise ValueError(name)


def unavailable(name: str) -> str | None:
    """Why a client cannot run here, or None."""
    if name == "java":
        missing = [t for t in ("java", "javac", "mvn") if shutil.which(t) is None]
        return f"client not installed: needs {', '.join(missing)}" if missing else None
    if name == "kcat":
        return None if shutil.which("kcat") else "client not installed: apt-get install -y kcat"
    return None


def worker(args: argparse.Namespace) -> int:
    """Run the steps of one client in this process, printing one line per step."""
    from conformance.broker_view import WireBroker
    from conformance.steps import Context, run_steps

    gaps = load_gaps(Path(args.gaps_file)) if args.expect_gaps else GapList()
    client_name = args.clients
    try:
        client = make_client(client_name, args.bootstrap)
    except Exception as e:  # e.g. javac failed: every step fails with the reason
        for step in split_list(args.steps, STEPS, "step"):
            print(StepResult(client_name, step, Status.FAIL, f"client setup: {e}").line(), flush=True)
        return 1
    ctx = Context(client, args.run_id, args.records, broker=WireBroker(args.bootstrap))
    results = []
    for result in run_steps(ctx, split_list(args.steps, STEPS, "step"), gaps, args.expect_gaps):
        print(result.line(), flush=True)
        results.append(result)
    return exit_code(results)


def run_client(name: str, bootstrap: str, steps: list[str], args: argparse.Namespace, run_id: str,
               log_dir: Path, python: Path) -> list[StepResult]:
    """Spawn the worker for one client; relay and collect its step lines."""
    reason = unavailable(name)
    if reason:
        results = [StepResult(name, s, Status.SKIP, reason) for s in steps]
        for r in results:
            print(r.line(), flush=True)
        return results
    cmd = [str(python), str(Path(__file__).resolve()), "--worker", "--bootstrap", bootstrap, "--clients", name,
           "--steps", ",".join(steps), "--records", str(args.records), "--run-id", run_id,
           "--gaps-file", args.gaps_file]
    if args.expect_gaps:
        cmd += ["--expect-gaps", args.expect_gaps]
    log = log_dir / f"{name}.stderr.log"
    results: list[StepResult] = []
    with open(log, "w") as err:
        # Own session: the whole worker tree (python, java, kcat) can be killed as one group.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=benchenv.REPO_DIR,
                                start_new_session=True)
        try:
            results = relay(proc, args.client_timeout)
        finally:
            kill_group(proc)
    done = {r.step for r in results}
    why = (f"client process timed out after {args.client_timeout:.0f}s" if proc.returncode in (-9, None)
           else f"client process exited {proc.returncode} before this step; see {log}")
    for step in steps:
        if step not in done:
            r = StepResult(name, step, Status.FAIL, why)
            print(r.line(), flush=True)
            results.append(r)
    return results


def relay(proc: subprocess.Popen[bytes], timeout: float) -> list[StepResult]:
    """Print and collect the worker's step lines until it exits or `timeout` seconds pass."""
    results: list[StepResult] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        chunk = os.read(fd, 65536) if ready else b""
        if ready and not chunk:
            break  # EOF: the worker is done (or died)
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            try:
                result = parse_step_line(line.decode(errors="replace"))
            except ValueError:
                continue
            results.append(result)
            print(result.line(), flush=True)
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    return results


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the worker's process group (a no-op once everything in it has exited)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def client_versions(python: Path) -> str:
    probe = ("import kafka, confluent_kafka as c; v = c.version(); v = v[0] if isinstance(v, tuple) else v; "
             "print(f'kafka-python {kafka.__version__}, confluent-kafka {v} / librdkafka {c.libversion()[0]}')")
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True).stdout.strip()
    kcat = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout if shutil.which("kcat") else ""
    kcat_v = next((line.split("(")[0].replace("Version", "kcat").strip() for line in kcat.splitlines()
                   if line.startswith("Version")), "")
    lib = kcat.split("librdkafka ")[1].split()[0] if "librdkafka " in kcat else ""
    return ", ".join(x for x in (out, "Java kafka-clients 4.4.0", f"{kcat_v} / librdkafka {lib}" if kcat_v else "") if x)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = ap.add_mutually_exclusive_group()
    target.add_argument("--bootstrap", help="HOST:PORT of a running broker")
    target.add_argument("--broker", choices=("kafka", "tansu", "seedlog"), help="start this peer, run, stop it")
    target.add_argument("--render", action="store_true", help="regenerate docs/COMPATIBILITY.md's table only")
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"comma list of {', '.join(CLIENTS)}")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma list of {', '.join(STEPS)}")
    ap.add_argument("--records", type=int, default=3000, help="records per produce step (default 3000)")
    ap.add_argument("--expect-gaps", metavar="SECTION",
                    help="report the gaps.toml entries of SECTION as SKIP (default: the --broker name)")
    ap.add_argument("--gaps-file", default=str(DEFAULT_GAPS))
    ap.add_argument("--save", metavar="NAME", help="save results as results/NAME.json and update the docs "
                    "(default with --broker: the broker's name)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--client-timeout", type=float, default=900.0, help="seconds per client (all its steps)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run-id", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return args
    if not (args.bootstrap or args.broker or args.render):
        ap.error("one of --bootstrap, --broker or --render is required")
    if args.broker and not args.expect_gaps:
        args.expect_gaps = args.broker
    if args.broker and not args.save and not args.no_save:
        args.save = args.broker
    return args


def write_docs() -> None:
    doc = COMPAT_DOC.read_text() if COMPAT_DOC.exists() else "# Compatibility\n"
    COMPAT_DOC.parent.mkdir(parents=True, exist_ok=True)
    COMPAT_DOC.write_text(compat.replace_region(doc, compat.render()))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop any broker this run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.worker:
        return worker(args)
    if args.render:
        write_docs()
        print(f"wrote {COMPAT_DOC}")
        return 0
    clients = split_list(args.clients, CLIENTS, "client")
    steps = split_list(args.steps, STEPS, "step")
    python = benchenv.venv_python()
    run_id = datetime.now(timezone.utc).strftime("%H%M%S") + secrets.token_hex(2)
    log_dir = benchenv.CACHE_DIR / "conformance" / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    peer = None
    if args.broker:
        from peers.control import Peer, PeerError
        peer = Peer(args.broker, log_dir / args.broker)
        try:
            peer.start()
        except PeerError as e:
            print(f"FAIL {args.broker} broker-start {e}")
            return 1
        bootstrap = peer.bootstrap
        print(f"# {args.broker} started on {bootstrap} (pid {peer.pid}); logs in {log_dir}", flush=True)
    else:
        bootstrap = args.bootstrap
    results: list[StepResult] = []
    try:
        for name in clients:
            results += run_client(name, bootstrap, steps, args, run_id, log_dir, python)
    finally:
        if peer is not None:
            peer.stop()
    print(summary_line(results))
    if args.save:
        meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "target": args.broker or bootstrap, "versions": client_versions(python)}
        path = compat.save(args.save, results, meta)
        write_docs()
        print(f"saved {path}; updated {COMPAT_DOC}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
