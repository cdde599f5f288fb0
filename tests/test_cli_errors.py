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
        (["--token-ids", "1", "--bogus"], "unrecognized arguments: --bogus (see gptviz --help)"),
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


# --- issue 21.7: every argument checked as it is parsed (gptviz/cli_args.py) ---------------------
NOT_UTF8 = "Romeo \udcff\udcfe"  # what Python's argv holds for the bytes b"Romeo \xff\xfe"


@pytest.fixture(scope="module")
def bpe_ckpt(tmp_path_factory) -> Path:
    from bpe_helpers import tiny_bpe

    tok = tiny_bpe()
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=16))
    return gptviz.save(model, tmp_path_factory.mktemp("bpe") / "bpe", tok)


ARGUMENT_CASES = {
    "trace-prompt-not-utf8": (["trace", "--prompt", NOT_UTF8, "--out", "/tmp/gptviz-never.npz"], "not valid UTF-8"),
    "check-prompt-not-utf8": (["check", "--prompt", NOT_UTF8], "argument --prompt: is not valid UTF-8 text"),
    "info-prompt-not-utf8": (["info", "--prompt", NOT_UTF8], "is not valid UTF-8 text (byte b'\\xff' at character 6)"),
    "patch-clean-not-utf8": (
        ["patch", "--clean", NOT_UTF8, "--corrupt", "a", "--answer", "a", "--wrong", "b", "--out", "/tmp/x.csv"],
        "argument --clean: is not valid UTF-8",
    ),
    "patch-answer-not-utf8": (
        ["patch", "--clean", "a", "--corrupt", "b", "--answer", "\udcff", "--wrong", "b", "--out", "/tmp/x.csv"],
        "argument --answer: is not valid UTF-8",
    ),
    "checkpoint-nul": (["info", "--checkpoint", "a\0b"], "argument --checkpoint: a path cannot contain a NUL byte"),
    "out-nul": (["trace", "--token-ids", "1", "--out", "x\0.npz"], "argument --out: a path cannot contain a NUL"),
    "bench-repeats-0": (["bench", "--tiny", "--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
    "bench-repeats-text": (["bench", "--tiny", "--repeats", "many"], "expected a whole number, got 'many'"),
    "bench-lengths-negative": (["bench", "--tiny", "--lengths", "-5"], "argument --lengths: must be at least 1"),
    "bench-lengths-float": (["bench", "--tiny", "--lengths", "16,1.5"], "expected a whole number, got '1.5'"),
    "bench-lengths-empty": (["bench", "--tiny", "--lengths", ","], "expected comma-separated whole numbers"),
    "bench-threads-negative": (["bench", "--tiny", "--threads", "-3"], "argument --threads: must be at least 1"),
    "bench-json-nul": (["bench", "--tiny", "--json", "a\0"], "argument --json: a path cannot contain a NUL"),
    "train-batch-size-0": (["train", "--out", "/tmp/x", "--batch-size", "0"], "argument --batch-size: must be at"),
    "train-lr-nan": (["train", "--out", "/tmp/x", "--lr", "nan"], "argument --lr: must be a finite number > 0"),
    "train-lr-0": (["train", "--out", "/tmp/x", "--lr", "0"], "argument --lr: must be a finite number > 0"),
    "train-lr-inf": (["train", "--out", "/tmp/x", "--lr", "inf"], "argument --lr: must be a finite number"),
    "train-min-lr-negative": (["train", "--out", "/tmp/x", "--min-lr", "-1"], "argument --min-lr: must be"),
    "train-max-steps-0": (["train", "--out", "/tmp/x", "--max-steps", "0"], "argument --max-steps: must be at least"),
    "train-eval-interval-0": (["train", "--out", "/tmp/x", "--eval-interval", "0"], "--eval-interval: must be"),
    "train-eval-batches-0": (["train", "--out", "/tmp/x", "--eval-batches", "0"], "--eval-batches: must be"),
    "train-threads-negative": (["train", "--out", "/tmp/x", "--threads", "-3"], "argument --threads: must be"),
    "train-max-minutes-nan": (["train", "--out", "/tmp/x", "--max-minutes", "nan"], "--max-minutes: must be"),
    "train-out-nul": (["train", "--out", "a\0"], "argument --out: a path cannot contain a NUL byte"),
}


@pytest.mark.parametrize("args, words", ARGUMENT_CASES.values(), ids=ARGUMENT_CASES.keys())
def test_a_bad_argument_is_one_line_before_anything_runs(bpe_ckpt, capsys, args, words):
    if args[0] in ("trace", "check", "info", "patch") and "--checkpoint" not in args:
        args = [args[0], "--checkpoint", str(bpe_ckpt), *args[1:]]
    one_error_line(run_main(capsys, *args), words)
    assert not Path("/tmp/gptviz-never.npz").exists() and not Path("/tmp/x.csv").exists()


def test_text_that_is_not_utf8_on_a_real_command_line(bpe_ckpt, tmp_path):
    """The bytes as a shell passes them: Python decodes them with surrogateescape, and the BPE
    tokenizer refused such a string with an error of its own ("unexpected ...; please report this")."""
    out = tmp_path / "t.npz"
    argv = [sys.executable.encode(), b"-m", b"gptviz", b"trace", b"--checkpoint", bytes(bpe_ckpt)]
    p = subprocess.run([*argv, b"--prompt", b"Romeo \xff\xfe", b"--out", bytes(out)], capture_output=True, timeout=120)
    assert p.returncode == 2, p.stderr
    one_error_line(p.stderr.decode("utf-8", "backslashreplace"), "argument --prompt: is not valid UTF-8 text")
    assert not out.exists()


@pytest.mark.parametrize("port", ["-1", "0", "70000", "http"])
def test_dashboard_port_out_of_range_is_one_line(port):
    """In a real process: before the check, -1 reached Streamlit, which printed a raw traceback."""
    cmd = [sys.executable, "-m", "gptviz", "dashboard", "--port", port]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    one_error_line(p.stderr, "argument --port:")


def test_good_numbers_still_parse():
    from gptviz.cli import build_parser

    bench = build_parser().parse_args(["bench", "--tiny", "--lengths", "16, 32", "--repeats", "1", "--threads", "2"])
    assert (bench.lengths, bench.repeats, bench.threads) == ([16, 32], 1, 2)
    train = build_parser().parse_args(
        ["train", "--out", "x", "--lr", "3e-4", "--batch-size", "8", "--max-minutes", "0"]
    )
    assert (train.lr, train.batch_size, train.max_minutes) == (3e-4, 8, 0.0)
    assert build_parser().parse_args(["dashboard", "--port", "8502"]).port == 8502
