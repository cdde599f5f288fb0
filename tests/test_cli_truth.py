"""The command line says what it does: `check --strict` fails on warnings and `--help` names the
failures, `info` without a tokenizer stays narrow, `dashboard --checkpoint PATH` opens on PATH,
with the checkout's Streamlit settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from conftest import tiny_model
from test_nanogpt import write_ckpt

import gptviz
from gptviz.analysis.health import ATTN_LOGIT_LIMIT
from gptviz.cli import CHECK_FAILS, STREAMLIT_FLAGS, build_parser, main
from gptviz.dashboard.sources.checkpoints import DEFAULT_ENV
from gptviz.lessons import tomllib

ROOT = Path(__file__).resolve().parents[1]
TOK = gptviz.CharTokenizer(list("abcdefghij "))  # 11 ids, as tiny_model's vocabulary


def sharp_attention(tmp_path: Path) -> str:
    """A checkpoint whose only trouble is an attention logit far above ATTN_LOGIT_LIMIT (a warning)."""
    model = tiny_model(seed=1)
    with torch.no_grad():
        C = model.config.n_embd
        model.transformer.h[0].attn.c_attn.weight[: 2 * C] *= 100  # q and k: their product 10,000 times larger
    return str(gptviz.save(model, tmp_path / "sharp", TOK))


def test_check_strict_fails_on_a_warning_that_plain_check_lets_pass(tmp_path, capsys):
    path = sharp_attention(tmp_path)
    assert main(["check", "--checkpoint", path, "--prompt", "abc abc abcj"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0]: line for line in out.splitlines()}
    assert lines["warn max_attention_logit"] and "fail" not in "".join(k.split()[0] for k in lines)
    top = float(out.split("the largest |q·k/√D| on a cell a query may read is ")[1].split(",")[0])
    assert top > ATTN_LOGIT_LIMIT
    assert main(["check", "--checkpoint", path, "--prompt", "abc abc abcj", "--strict"]) == 1
    assert "warn max_attention_logit" in capsys.readouterr().out
    # --strict fails exactly when some finding warns (a tiny random model may have uniform heads)
    clean = gptviz.save(tiny_model(seed=1), tmp_path / "clean", TOK)
    rc = main(["check", "--checkpoint", str(clean), "--prompt", "abc abc abcj", "--strict"])
    out = capsys.readouterr().out
    assert ("warn" in out.split()) == (rc == 1)


def test_check_help_names_what_fails_and_what_strict_adds():
    sub = build_parser()._subparsers._group_actions[0].choices["check"]
    text = " ".join(sub.format_help().split())
    assert "--strict" in text and "exit 1 on a warning too" in text
    assert "Exit status: 1 when a finding fails (NaN/Inf weights or activations" in text
    assert "an attention logit above 100" in text and "2 when the checkpoint or prompt cannot be used" in text
    root = Path(__file__).resolve().parents[1]  # the command line is documented in docs/library.md
    docs = " ".join((root / "docs" / "library.md").read_text().split())
    assert "--strict" in docs and CHECK_FAILS in docs


def test_info_without_a_tokenizer_keeps_its_tables_narrow(tmp_path, capsys):
    write_ckpt(tmp_path / "out", meta=False)
    assert main(["info", "--checkpoint", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    card, report = out.split("== load report")[0], out.split("== load report")[1].split("== shape trace")[0]
    assert max(map(len, card.splitlines())) < 40
    long = [line for line in report.splitlines() if len(line) > 30 and not line.startswith("path")]
    assert len(long) == 1 and long[0].startswith("warnings") and "no tokenizer" in long[0]
    assert all(line == line.rstrip() for line in (card + report).splitlines())
    assert "path             " + str(tmp_path / "out") in report


def test_dashboard_checkpoint_opens_the_server_on_that_path(tmp_path, monkeypatch, capsys):
    write_ckpt(tmp_path / "out")
    seen = {}

    def execv(exe, argv):  # stand in for becoming the server: record what it would have run
        seen["argv"], seen["env"] = argv, os.environ.get(DEFAULT_ENV)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.setattr("subprocess.call", lambda cmd: execv(None, cmd))
    monkeypatch.delenv(DEFAULT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["dashboard", "--port", "8599", "--checkpoint", "out/ckpt.pt"])
    assert seen["env"] == str(tmp_path / "out" / "ckpt.pt")  # absolute: the server resolves it the same
    assert "app.py" in " ".join(seen["argv"]) and "8599" in seen["argv"]
    seen.clear()
    assert main(["dashboard", "--checkpoint", "nowhere/ckpt.pt"]) == 2
    assert "no such file or folder" in capsys.readouterr().err and not seen
    with pytest.raises(SystemExit) as stop:  # refused by the argument parser itself: status 2
        main(["dashboard", "--checkpoint", "out\x00/ckpt.pt"])
    assert stop.value.code == 2 and "cannot contain a NUL byte" in capsys.readouterr().err and not seen
    with pytest.raises(SystemExit):
        main(["dashboard", "--checkpoint", "demo"])
    assert seen["env"] == "demo"


def test_the_cli_starts_streamlit_as_the_checkouts_config_does():
    """`gptviz dashboard` (an installed package has no .streamlit/config.toml beside the user) passes
    the checkout's settings as flags: the same values, the garbage collection after every script run
    off included (it cost every session's run 120 ms with the GIL held; README, A class of 30)."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False
    for flag, value in STREAMLIT_FLAGS.items():
        section, name = flag.split(".")
        assert str(config[section][name]).lower() == value, flag


def test_help_names_the_installed_command():
    """The console script is `gptviz` (pyproject's [project.scripts]); --help must say so."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "gptviz", "--help"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("usage: gptviz "), out.splitlines()[0]
    assert "python -m gptviz" not in out
