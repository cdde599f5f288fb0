"""Every command that runs a model: OpenMP waits passively (set before torch loads it) and --threads sets
torch's threads. The speed itself is measured by `gptviz bench --scan --parts threads`, never here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.cli import main

TOK = gptviz.CharTokenizer(list("abcdefghij \n"))
PROBE = (
    "import os, sys, gptviz; mods = list(sys.modules); "
    "print(os.environ.get('OMP_WAIT_POLICY'), mods.index('gptviz.threads') < mods.index('torch'))"
)


def probe(**env) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env={**clean, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_gptviz_sets_the_passive_wait_before_torch_loads():
    assert probe() == "PASSIVE True"


def test_a_wait_policy_the_user_set_stands():
    assert probe(OMP_WAIT_POLICY="ACTIVE") == "ACTIVE True"


@pytest.mark.parametrize("command", ["info", "scan"])
def test_threads_sets_torchs_threads(tmp_path, command):
    ckpt = gptviz.save(tiny_model(vocab_size=TOK.vocab_size), tmp_path / "ck", TOK)
    (tmp_path / "c.txt").write_text("abc def\nghij " * 4)
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    args = [command, "--checkpoint", str(ckpt), "--threads", str(want)]
    if command == "scan":
        args += ["--data", str(tmp_path / "c.txt"), "--out", str(tmp_path / "out"), "--window", "8"]
    try:
        assert main(args) == 0
        assert torch.get_num_threads() == want
    finally:
        torch.set_num_threads(before)


def test_threads_zero_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["info", "--checkpoint", "x", "--threads", "0"])
    assert e.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_a_local_scan_runs_with_its_threads_and_gives_this_process_its_own_back():
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    s = gptviz.scan(tiny_model(), [[1, 2, 3, 4, 5, 6]], window=4, k=2, threads=other)
    assert s.summary["threads"] == other and torch.get_num_threads() == before
    assert gptviz.scan(tiny_model(), [[1, 2, 3]], window=4, k=2).summary["threads"] == before
    with pytest.raises(gptviz.GptvizError, match="threads"):
        gptviz.scan(tiny_model(), [[1, 2, 3]], window=4, k=2, threads=0)
