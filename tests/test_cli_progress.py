"""The long CLI commands' progress bar: on stderr, only on a terminal unless --progress asks for it (here
stderr is captured, not a terminal), counting to the step's total; stdout keeps only the result lines."""

from __future__ import annotations

import re

import pytest
from conftest import tiny_model

import gptviz
from gptviz.cli import main

TOK = gptviz.CharTokenizer(list("abcdefghij \n"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return gptviz.save(tiny_model(vocab_size=TOK.vocab_size), tmp_path_factory.mktemp("ck") / "ck", TOK)


def bar_counts(err: str, desc: str) -> list[tuple[int, int]]:
    """Every 'done/total' a tqdm bar named desc drew."""
    return [(int(a), int(b)) for a, b in re.findall(re.escape(desc) + r":[^\r\n]*?\| *(\d+)/(\d+)", err)]


@pytest.mark.parametrize("flag", [[], ["--progress"]])
def test_patch_draws_its_bar_only_when_asked_off_a_terminal(ckpt, tmp_path, capsys, flag):
    out = tmp_path / "sweep.csv"
    args = ["patch", "--checkpoint", str(ckpt), "--clean", "abcd", "--corrupt", "abce", "--answer", "a"]
    assert main([*args, "--wrong", "b", "--out", str(out), *flag]) == 0
    got = capsys.readouterr()
    counts = bar_counts(got.err, "patching resid_pre")
    if flag:
        assert counts and counts[-1][0] == counts[-1][1] > 0  # drawn to the end
    else:
        assert not counts and "patching" not in got.err
    assert "patching resid_pre" not in got.out and out.is_file()


@pytest.mark.parametrize("flag", [[], ["--progress"]])
def test_scan_draws_its_bar_only_when_asked_off_a_terminal(ckpt, tmp_path, capsys, flag):
    (tmp_path / "c.txt").write_text("abc def\nghij " * 6)
    args = ["scan", "--checkpoint", str(ckpt), "--data", str(tmp_path / "c.txt"), "--out", str(tmp_path / "out")]
    assert main([*args, "--window", "16", "--k", "3", *flag]) == 0
    got = capsys.readouterr()
    n = len(gptviz.load_scan(tmp_path / "out").windows)
    counts = bar_counts(got.err, "scan")
    assert counts[-1] == (n, n) if flag else not counts


@pytest.mark.parametrize("command", ["trace", "info", "check"])
@pytest.mark.parametrize("flag", [[], ["--progress"]])
def test_the_load_and_the_run_draw_their_bars_only_when_asked(ckpt, tmp_path, capsys, command, flag):
    extra = ["--out", str(tmp_path / "t.npz")] if command == "trace" else []
    rc = main([command, "--checkpoint", str(ckpt), "--prompt", "abcd", *extra, *flag])
    assert rc in (None, 0, 1)  # check's exit status is its findings'
    got = capsys.readouterr()
    load, run = bar_counts(got.err, "loading"), bar_counts(got.err, "running")
    if not flag:
        assert not load and not run
        return
    model = gptviz.load(ckpt).model
    kb = -(-model.num_params() * 4 // 2**10)  # float32, in kB: a model under 16 MB
    assert load[-1] == (kb, kb) and run[-1] == (model.config.n_layer, model.config.n_layer)
    assert "kB" in got.err and "block" in got.err and "loading" not in got.out
