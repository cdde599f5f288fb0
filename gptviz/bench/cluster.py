"""A Ray "cluster" of several nodes on this machine, for `bench --scan --parts cluster`: a head and
worker nodes joining it, each its own `ray start --block` process on 127.0.0.1 with bounded CPUs and
object store, as a person with a cluster starts one per machine. It asks for a token (RAY_AUTH_MODE=token,
a fresh random one); the driver that uses it is a process started with that environment (Ray reads the
token once, when it loads).

Each is stopped by ending its own `ray start` process (which stops what it started), never with
`ray stop`, which stops every Ray on the machine, other people's too; the processes left are then
looked for by their temporary folder and port, and counted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose gptviz the workers import


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """End a `ray start --block` process (which stops what it started); its own session killed if it lingers."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what the caller started
        proc.wait(10)


def leftovers(temp: Path, port: int) -> list[int]:
    """Pids of processes that name this cluster's temporary folder or port."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    me = os.getpid()
    return [
        int(line.split()[0])
        for line in out.splitlines()[1:]
        if (str(temp) in line or f"127.0.0.1:{port}" in line or f"--port={port}" in line) and int(line.split()[0]) != me
    ]


def wait_for_nodes(nodes: int, timeout: float = 120) -> None:
    """In a driver joined to the cluster (ray.init): wait until `nodes` nodes are alive."""
    import ray

    deadline = time.monotonic() + timeout
    while sum(1 for n in ray.nodes() if n.get("Alive")) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {nodes} Ray nodes came up in {timeout:g} s")
        time.sleep(0.5)


@contextlib.contextmanager
def local_cluster(
    nodes: int = 2, cpus: int = 1, store_bytes: int = 96 * 2**20, report=None
) -> Iterator[tuple[str, dict[str, str]]]:
    """Start a head and nodes - 1 worker nodes, each with `cpus` CPUs. Yields the address and the
    environment a driver needs (its token; PYTHONPATH to this gptviz). report(pids) is called after the
    stop with the pids of its processes still found (killed then)."""
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix=f"rc{port}-", dir="/tmp"))  # short: Ray's socket paths fit in 107 bytes
    token = os.urandom(32).hex()
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env = {**os.environ, **auth, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    ray_bin = str(Path(sys.executable).with_name("ray"))
    common = ["--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", f"--object-store-memory={store_bytes}", "--block"]
    head = [ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"]
    head += [f"--temp-dir={temp}", *common]
    worker = [ray_bin, "start", f"--address=127.0.0.1:{port}", *common]
    procs: list[subprocess.Popen] = []
    with open(temp / "start.log", "w") as log:
        try:
            procs.append(subprocess.Popen(head, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            deadline = time.monotonic() + 120
            while True:
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                if procs[0].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Ray head did not start; see {temp / 'start.log'}")
                time.sleep(0.2)
            for _ in range(nodes - 1):
                procs.append(
                    subprocess.Popen(worker, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                )
            yield f"127.0.0.1:{port}", env
        finally:
            for proc in reversed(procs):  # the workers first, then the head
                stop(proc)
            time.sleep(1)
            left = leftovers(temp, port)
            for pid in left:  # never expected: killed by pid, so nothing of it outlives the bench
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(temp, ignore_errors=True)
            if report is not None:
                report(left)
