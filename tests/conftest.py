"""Shared test fixtures: random-weight models of any shape built in memory, and the dashboard's AppTest
session on a small random checkpoint (helpers for reading its pages are in apptest_helpers.py)."""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import streamlit as st
import torch
from apptest_helpers import RUNS, app_session, ok
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.bench.checkpoints import CONFIG, NAME, make_checkpoints
from gptviz.bench.cluster import free_port, leftovers, stop
from gptviz.dashboard import caches
from gptviz.dashboard.sources import checkpoints

VARIANTS = [
    dict(pos_encoding=p, norm=n, activation=a, bias=b, tie_weights=t)
    for p, n, a, b, t in itertools.product(
        ("learned", "sinusoidal"), ("layernorm", "rmsnorm"), ("gelu", "gelu_tanh", "relu"), (True, False), (True, False)
    )
]


def variant_id(v: dict) -> str:
    return "-".join(str(x) for x in v.values())


def one_error_line(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    """Run a command that must refuse: exit status 2 and one line on stderr, which is returned."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-3000:]
    return lines[0]


def tiny_model(seed: int = 0, **overrides) -> gptviz.GPT:
    """A small random-weight GPT in eval mode. Biases and norm gains are randomised too, so a test
    cannot pass because a parameter happens to be zero or one."""
    torch.manual_seed(seed)
    cfg = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)
    model = gptviz.GPT(gptviz.GPTConfig(**{**cfg, **overrides})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or "ln_f" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("weight") else 0.0))
    return model


@pytest.fixture
def model():
    return tiny_model()


# --- the dashboard's AppTest fixtures: a small random checkpoint, served with cold caches ---------
@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory) -> Path:
    return make_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def env(ckpt_root, monkeypatch):
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(ckpt_root))
    monkeypatch.delenv(checkpoints.DEFAULT_ENV, raising=False)
    monkeypatch.setenv(checkpoints.DEFAULT_ENV, NAME)
    st.cache_resource.clear()  # process-wide: every test starts with a cold cache
    RUNS.clear()
    real = caches.trace
    monkeypatch.setattr(caches, "trace", lambda *a, **k: RUNS.append(a[1]) or real(*a, **k))
    return ckpt_root


@pytest.fixture
def at(env) -> AppTest:
    return ok(app_session())


@pytest.fixture
def ids_only(tmp_path, monkeypatch, env):
    """A checkpoint with no tokenizer: prompts and lookups are token ids (vocabulary 95)."""
    torch.manual_seed(3)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / "ids-only")
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(tmp_path))
    monkeypatch.setenv(checkpoints.DEFAULT_ENV, "ids-only")
    return ok(app_session(prompt="1, 2, 3"))


def pytest_collection_modifyitems(config, items):
    """A `gpu` test is skipped, with one reason, where torch sees no CUDA GPU (`make test-gpu` runs them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here: `make test-gpu` on a machine with one runs these")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def one_ray_at_a_time(request):
    """A module marked `ray` holds a lock on this machine while it runs: two pytest workers starting
    Rays side by side on two cores timed out waiting for Ray's own start-up files (`make test`)."""
    if request.node.get_closest_marker("ray") is None:
        yield
        return
    with open(Path(tempfile.gettempdir()) / "gptviz-tests-ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="session")
def _ray_session_root():
    """One RAY_TMPDIR and HOME for the Rays of a whole pytest process: an in-process Ray keeps the auth
    token it met in ~/.ray first, so a second test's Ray under a new HOME never came up (its GCS port
    file awaited in vain: test_sae_train_ray after test_scan_ray on one worker)."""
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_files_here(monkeypatch, _ray_session_root):
    """A Ray started in this process keeps its session (logs, sockets) under RAY_TMPDIR and may write
    an auth token to ~/.ray: both go to the run's temporary folder, removed when the run ends, so no
    run of the suite leaves them on the machine. Yields the session root."""
    monkeypatch.setenv("RAY_TMPDIR", str(_ray_session_root))
    monkeypatch.setenv("HOME", str(_ray_session_root / "home"))
    return _ray_session_root


@pytest.fixture
def ray_head(tmp_path_factory):
    """`ray start --head --block` as its own process; yields its environment (RAY_ADDRESS, the token).
    Stopped by terminating that process, which stops what it started: `ray stop` would stop every
    Ray on the machine, other people's too."""
    port = free_port()
    temp = Path(os.path.realpath(f"/tmp/rs{port}"))  # short: Ray's socket paths must fit in 107 bytes
    env = {
        **{k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"},  # a head started without gptviz's
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),  # the workers import this gptviz
        "RAY_AUTH_MODE": "token",  # a cluster with a token, as Ray makes by default
        "RAY_AUTH_TOKEN": os.urandom(32).hex(),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",  # stop at once: nothing to drain in a test
    }
    cmd = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        f"--object-store-memory={96 * 2**20}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
        "--block",
    ]
    log = tmp_path_factory.mktemp("ray") / "head.log"
    with open(log, "w") as out:
        head = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert head.poll() is None, log.read_text()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the Ray head did not come up in 90 s"
                time.sleep(0.2)
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    finally:
        stop(head)  # SIGTERM, then its own session killed if it does not end in 60 s
        time.sleep(1)
        mine = leftovers(temp, port)
        for pid in mine:  # never expected; killed by pid so no later test inherits them
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)  # the head's sessions and logs: nothing of it stays in /tmp
        assert not mine, f"Ray processes left behind: {mine}"
