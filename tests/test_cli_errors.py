"""Every CLI error is one line on stderr, "error: ...", exit status 2, and never a traceback:
in real subprocesses for the cases the issue found, in-process (main()) for the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_model
from untrusted_helpers import nanogpt, native

import gptviz
from gptviz.cli import main

TOK = gptviz.CharTokenizer(list("abcdefghij "))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return gptviz.save(tiny_model(), tmp_path_factory.mktemp("ck") / "tiny", TOK)


def one_error_line(stderr: str, words: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert stderr.startswith("error: ") and stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert words in stderr, stderr


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--token-ids", "99999999999999999999999"], "token id 99999999999999999999… is outside the vocabulary"),
        (["--token-ids", "1", "--device", "bogus"], "device 'bogus' is not one gptviz knows"),
        (["--token-ids", "1", "--out", "/dev/full"], "/dev/full: cannot be written (No space left on device)"),
    ],
    ids=["huge-token-id", "device-bogus", "dev-full"],
)
def test_in_a_real_process(ckpt, tmp_path, extra, words):
    args = ["trace", "--checkpoint", str(ckpt), "--out", str(tmp_path / "t.npz"), *extra]
    p = subprocess.run([sys.executable, "-m", "gptviz", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    one_error_line(p.stderr, words)
    assert p.stdout == "" and not (tmp_path / "t.npz").exists()
    assert not Path("/dev/full.npz").exists()  # np.savez once appended .npz and wrote there instead


def run_main(capsys, *args) -> str:
    try:
        status = main(list(args))
    except SystemExit as e:  # argparse
        status = e.code
    out = capsys.readouterr()
    assert status == 2, out
    return out.err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--token-ids", "1.5"], "must be comma-separated integers"),
        (["--token-ids", "true"], "must be comma-separated integers"),
        (["--token-ids", "-1"], "must be comma-separated integers"),
        (["--token-ids", "²"], "must be comma-separated integers"),
        (["--token-ids", ""], "no --token-ids given"),
        (["--token-ids", "1", "--device", "cuda:x"], "device 'cuda:x' is not one gptviz knows"),
        (["--token-ids", "1", "--device", "meta"], "device 'meta' is not one gptviz runs on"),
        (["--token-ids", "1", "--device", "x" * 5000], "is not one gptviz knows"),
        (["--token-ids", "1", "--out", "/nonexistent-dir/t.npz"], "cannot be written (No such file"),
        (["--token-ids", "1", "--out", "/"], "/: cannot be written"),
        (["--prompt", "xyz\nabc"], "the tokenizer does not know"),
        (["--token-ids", "1", "--bogus"], "unrecognized arguments: --bogus (see python -m gptviz --help)"),
    ],
)
def test_trace_errors(ckpt, capsys, extra, words):
    args = ["trace", "--checkpoint", str(ckpt), "--out", "/tmp/gptviz-cli-errors-never.npz", *extra]
    if "--out" in extra:
        args = ["trace", "--checkpoint", str(ckpt), *extra]
    one_error_line(run_main(capsys, *args), words)
    assert not Path("/tmp/gptviz-cli-errors-never.npz").exists()


def test_a_missing_argument_is_one_line(capsys):
    one_error_line(run_main(capsys, "trace", "--checkpoint", "x"), "the following arguments are required")


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda r: native(r, {"norm_eps": "x"}), "norm_eps='x'"),
        (lambda r: native(r, {"n_layer": 1000}), "n_layer=1,000 is above gptviz's limit of 256"),
        (lambda r: native(r, {"n_layer": 200}), "weights missing for 2,376 keys, e.g."),
        (lambda r: _random(nanogpt(r) / "ckpt.pt"), "not a readable PyTorch file"),
    ],
    ids=["norm_eps", "n_layer-1000", "many-missing-keys", "random-ckpt"],
)
def test_info_on_bad_checkpoints(tmp_path, capsys, build, words):
    err = run_main(capsys, "info", "--checkpoint", str(build(tmp_path)))
    one_error_line(err, words)
    assert len(err) < 600, err


def _random(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 40)
    return path


def test_a_good_trace_still_writes_exactly_the_path_given(ckpt, tmp_path):
    assert main(["trace", "--checkpoint", str(ckpt), "--token-ids", "1,2", "--out", str(tmp_path / "t")]) == 0
    assert gptviz.Trace.from_npz(tmp_path / "t").token_ids.tolist() == [1, 2]  # "t", not "t.npz"
