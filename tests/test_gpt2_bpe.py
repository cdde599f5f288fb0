"""A nanoGPT checkpoint of GPT-2's vocabulary without meta.pkl falls back to GPT-2's BPE, as
nanoGPT's sample.py does, from the two files gptviz ships (byte for byte GPT-2's: the SHA-256 sums
tiktoken checks them against). Its ids are compared with the `tokenizers` library's own ByteLevel BPE
built from the same files; a tokenizer beside the checkpoint is taken before the fallback."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest
import test_nanogpt
import torch
from test_nanogpt import write_ckpt
from tokenizers import ByteLevelBPETokenizer, models
from tokenizers import Tokenizer as HFTokenizer

import gptviz
from gptviz.tokenizers import BPETokenizer, gpt2

# tiktoken_ext/openai_public.py (tiktoken 0.14.0) checks GPT-2's downloaded files against these
SHA256 = {
    "encoder.json.gz": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe.gz": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
TEXTS = [
    "Hello world",
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "  two spaces,\ttabs and 1234567 digits; don't, we'll, I'm",
    "naïve café — 東京 🙂 Ελληνικά",
    "def f(x):\n    return x ** 2  # code\n\n",
]


def test_the_shipped_files_are_gpt2s_own():
    for name, want in SHA256.items():
        data = gzip.decompress((gpt2.FILES / name).read_bytes())
        assert hashlib.sha256(data).hexdigest() == want, name


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> ByteLevelBPETokenizer:
    """`tokenizers`' own byte-level BPE over the same two files, written out as vocab.json + merges.txt."""
    tmp = tmp_path_factory.mktemp("gpt2")
    (tmp / "vocab.json").write_bytes(gzip.decompress(gpt2.VOCAB_FILE.read_bytes()))
    (tmp / "merges.txt").write_bytes(gzip.decompress(gpt2.MERGES_FILE.read_bytes()))
    return ByteLevelBPETokenizer(str(tmp / "vocab.json"), str(tmp / "merges.txt"), add_prefix_space=False)


def gpt2_ckpt(path: Path, monkeypatch, vocab_size: int) -> Path:
    """nanoGPT's ckpt.pt of a tiny model with GPT-2's vocabulary (50,257, or train.py's padded 50,304)."""
    monkeypatch.setitem(test_nanogpt.ARGS, "vocab_size", vocab_size)
    write_ckpt(path, meta=False)
    return path / "ckpt.pt"


@pytest.mark.parametrize("vocab_size", [50257, 50304])
def test_a_gpt2_vocabulary_without_meta_gets_gpt2s_bpe(tmp_path, monkeypatch, reference, vocab_size):
    bundle = gptviz.load(gpt2_ckpt(tmp_path / "out", monkeypatch, vocab_size))
    tok = bundle.tokenizer
    assert tok is not None and bundle.report.tokenizer == "bpe" and tok.vocab_size == 50257
    assert any("GPT-2's BPE, as nanoGPT's sample.py assumes" in w for w in bundle.report.warnings)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == reference.encode(text).ids, text
        assert tok.decode(ids) == text
    assert tok.encode("Hello world") == [15496, 995]  # GPT-2's ids, as every GPT-2 tokenizer gives them
    # sample.py encodes with allowed_special={"<|endoftext|>"}: one token, id 50256
    assert tok.encode("a<|endoftext|>b") == [64, 50256, 65]
    ids = gptviz.encode_prompt(tok, "ROMEO:", bundle.model.config.block_size)
    assert "".join(gptviz.trace(bundle.model, ids, tok).tokens) == "ROMEO:" and len(ids) > 1


def test_a_tokenizer_beside_the_checkpoint_comes_before_the_fallback(tmp_path, monkeypatch):
    ckpt = gpt2_ckpt(tmp_path / "out", monkeypatch, 50304)
    trained = BPETokenizer.train("the cat sat on the mat " * 50, vocab_size=300)
    trained.save(ckpt.parent)
    bundle = gptviz.load(ckpt)
    assert bundle.tokenizer.vocab_size == trained.vocab_size and bundle.report.warnings == []
    assert bundle.tokenizer.encode("the cat") == trained.encode("the cat")


def char_bpe(chars: str) -> BPETokenizer:
    """A BPE tokenizer.json without merges over these characters (one id each)."""
    return BPETokenizer(HFTokenizer(models.BPE({c: i for i, c in enumerate(chars)}, [])))


def test_another_vocabulary_says_exactly_what_to_put_beside_it(tmp_path):
    write_ckpt(tmp_path / "out", meta=False)  # 61 characters: not GPT-2's
    bundle = gptviz.load(tmp_path / "out")
    assert bundle.tokenizer is None
    (note,) = bundle.report.warnings
    assert "meta.pkl from data/<dataset>/" in note and "(tokenizer.json, or vocab.json + merges.txt)" in note
    # and what it says works: a tokenizer.json of the model's 61 characters beside ckpt.pt
    chars = "".join(test_nanogpt.CHARS)
    char_bpe(chars).save(tmp_path / "out")
    bundle = gptviz.load(tmp_path / "out")
    assert bundle.tokenizer.encode("ROMEO") == [chars.index(c) for c in "ROMEO"]
    # one larger than the model is refused, naming the folder
    char_bpe(chars + "#").save(tmp_path / "out")
    with pytest.raises(
        gptviz.CheckpointError, match="the tokenizer beside ckpt.pt has 62 tokens but the model only 61"
    ):
        gptviz.load(tmp_path / "out")


def test_the_fallback_loads_once_per_process():
    assert gpt2.gpt2_tokenizer() is gpt2.gpt2_tokenizer()
    assert torch.tensor(gpt2.gpt2_tokenizer().encode("Hello")).tolist() == [15496]


def test_nanogpt_padding_to_50304_is_no_warning_while_the_model_ignores_it(tmp_path, monkeypatch):
    """With GPT-2's BPE the 47 padding ids of nanoGPT's 50,304 can never be produced: fine (so
    `check --strict` passes) while the model gives them almost no probability, a warning once it does."""
    from gptviz.analysis.health import PAD_MASS_LIMIT, check_vocabulary

    ckpt = gpt2_ckpt(tmp_path / "out", monkeypatch, 50304)
    bundle = gptviz.load(ckpt)
    ids = bundle.tokenizer.encode("ROMEO: But soft")
    f = check_vocabulary(bundle.model, gptviz.trace(bundle.model, ids), bundle.tokenizer)
    assert f.status == "ok" and f.value == 47 and "padded to a multiple of 64" in f.message
    state = torch.load(ckpt, weights_only=True)
    wte = state["model"]["transformer.wte.weight"]
    top = int(bundle.model(torch.tensor([ids]))[0, -1].argmax())
    wte[50257:] = 3 * wte[top]  # the padding rows now outscore the model's own best token
    torch.save(state, ckpt)
    bundle = gptviz.load(ckpt)
    f = check_vocabulary(bundle.model, gptviz.trace(bundle.model, ids), bundle.tokenizer)
    assert f.status == "warn" and f.value == 47
    mass = float(f.message.split("gives them ")[1].split(" of its")[0])
    assert mass > PAD_MASS_LIMIT
