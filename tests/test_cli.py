"""`python -m gptviz`: real subprocesses, real files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import tiny_model

import gptviz

TOK = gptviz.CharTokenizer(list("abcdefghij "))


def run(*args):
    return subprocess.run([sys.executable, "-m", "gptviz", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return gptviz.save(tiny_model(), tmp_path_factory.mktemp("ck") / "tiny", TOK)


def test_trace_writes_a_contract_npz_equal_to_the_library_trace(ckpt, tmp_path):
    out = tmp_path / "t.npz"
    p = run("trace", "--checkpoint", str(ckpt), "--prompt", "bad cafe", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "wrote 31 tensors for 8 tokens" in p.stdout  # 3 + 14 per layer (z, out, mlp.in, hidden, mlp out)
    bundle = gptviz.load(ckpt)
    expected = gptviz.trace(bundle.model, TOK.encode("bad cafe"), TOK)
    with np.load(out) as f:
        assert set(f.files) == set(gptviz.contract_names(2)) | {"tokens", "token_ids"}
        assert list(f["tokens"]) == list("bad cafe")
        for name in expected.names:
            np.testing.assert_array_equal(f[name], expected[name])
            assert f[name].dtype == (np.bool_ if name.endswith("mask") else np.float32)


def test_trace_by_token_ids(ckpt, tmp_path):
    p = run("trace", "--checkpoint", str(ckpt), "--token-ids", "1,2,3", "--out", str(tmp_path / "t.npz"))
    assert p.returncode == 0, p.stderr
    assert gptviz.Trace.from_npz(tmp_path / "t.npz").token_ids.tolist() == [1, 2, 3]


def test_info_prints_card_report_and_shape_trace(ckpt):
    p = run("info", "--checkpoint", str(ckpt))
    assert p.returncode == 0, p.stderr
    for words in (
        "== model card",
        "n_layer",
        "== load report",
        "parameters",
        "== shape trace",
        "transformer.h.1.attn.c_attn",
        "(1, 8, 48)",
    ):
        assert words in p.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--prompt", "xyz"], "the tokenizer does not know 3 character(s)"),
        (["--prompt", ""], "the prompt is empty"),
        (["--token-ids", "1,99"], "token id 99 is outside the vocabulary [0, 10]"),
        (["--token-ids", "1,a"], "--token-ids must be comma-separated integers"),
    ],
)
def test_errors_are_one_line_and_exit_nonzero(ckpt, tmp_path, args, words):
    p = run("trace", "--checkpoint", str(ckpt), *args, "--out", str(tmp_path / "t.npz"))
    assert p.returncode == 2
    assert p.stderr.startswith("error: ") and words in p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "t.npz").exists()


def test_a_missing_checkpoint_is_one_line(tmp_path):
    p = run("info", "--checkpoint", str(tmp_path / "nope"))
    assert p.returncode == 2 and p.stderr == f"error: {tmp_path / 'nope'}: no such file or directory\n"
