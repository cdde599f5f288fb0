"""A Ray address that does not answer ends `gptviz scan --engine ray` in one line within its timeout,
and SIGTERM stops it at once (it retried for over 100 s and needed SIGKILL). Real processes, real
sockets: nothing listening on a free port, and a port that accepts connections but never speaks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import one_error_line, tiny_model

import gptviz
from gptviz.scanning.ray_engine import DEFAULT_TIMEOUT, TIMEOUT_ENV, RayEngineError

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # each test starts a Python that imports torch and ray
TOK = gptviz.CharTokenizer(list("abcdefghij \n"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ray-connect")
    ckpt = gptviz.save(tiny_model(seed=4, vocab_size=TOK.vocab_size), root / "ck", TOK)
    (root / "a.txt").write_text("abc def\nghij " * 9)
    return ckpt, root / "a.txt"


@pytest.fixture
def env(tmp_path) -> dict:
    """No RAY_ADDRESS from the machine; Ray's session files and token under this test's folders."""
    out = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", TIMEOUT_ENV)}
    return {**out, "RAY_TMPDIR": str(tmp_path / "rt"), "HOME": str(tmp_path / "home"), "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture
def silent_port():
    """A port whose kernel accepts connections (the listen backlog) but no program ever answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s


def scan_cmd(files, tmp_path, address: str, *extra: str) -> list[str]:
    ckpt, data = files
    return [
        *(sys.executable, "-m", "gptviz", "scan", "--checkpoint", str(ckpt), "--data", str(data)),
        *("--out", str(tmp_path / "out"), "--engine", "ray", "--ray-address", address, *extra),
    ]


def test_nothing_listening_is_one_line_at_once(files, tmp_path, env):
    address = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    line = one_error_line(scan_cmd(files, tmp_path, address), env, timeout=120)
    took = time.monotonic() - t0
    assert address in line and "nothing listens there" in line, line
    assert took < DEFAULT_TIMEOUT, took  # a refused connection needs no waiting at all


def test_a_silent_address_ends_at_its_timeout_in_one_line(files, tmp_path, env, silent_port):
    address = f"127.0.0.1:{silent_port.getsockname()[1]}"
    line = one_error_line(scan_cmd(files, tmp_path, address, "--ray-timeout", "4"), env, timeout=180)
    assert f"the Ray cluster at {address} did not answer within 4 s" in line, line
    assert "--ray-timeout" in line


def test_sigterm_stops_a_scan_waiting_for_its_cluster(files, tmp_path, env, silent_port):
    """The scan connects (the silent port sees it), then waits up to 120 s: SIGTERM ends it at once."""
    address = f"127.0.0.1:{silent_port.getsockname()[1]}"
    proc = subprocess.Popen(
        scan_cmd(files, tmp_path, address, "--ray-timeout", "120"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        silent_port.settimeout(120)
        held = silent_port.accept()[0]  # the scan's own first connection, held open and silent (a close
        # could reach it as a reset and end the scan before the signal): it is waiting for Ray now
        time.sleep(2)  # and inside ray.init
        assert proc.poll() is None, proc.stderr.read().decode()[-1500:]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        assert time.monotonic() - t0 < 15
        assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what this test started
            proc.wait(10)
        if "held" in locals():
            held.close()


def test_the_timeout_is_an_argument_and_an_environment_variable(files, monkeypatch, env, silent_port):
    """gptviz.scan(..., ray_timeout=) in this process; $GPTVIZ_RAY_TIMEOUT read when it is not given,
    a bad one refused in one line before anything connects."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ckpt, data = files
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(RayEngineError, match="nothing listens there"):
        gptviz.scan(str(ckpt), data, engine="ray", ray_address=address, ray_timeout=5)
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(RayEngineError, match="must be a number of seconds, got 'soon'"):
        gptviz.scan(str(ckpt), data, engine="ray", ray_address=address)
    with pytest.raises(RayEngineError, match="between 0 and 3,600 seconds"):
        gptviz.scan(str(ckpt), data, engine="ray", ray_address=address, ray_timeout=-1)
