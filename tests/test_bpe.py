"""BPE tokenizers behind the CharTokenizer interface, and display strings a person can read."""

from __future__ import annotations

import json

import pytest
import torch
from bpe_helpers import TEXT, tiny_bpe
from conftest import tiny_model
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

import gptviz
from gptviz.tokenizers.bpe import BPETokenizer, byte_decoder, show_bytes

MOJIBAKE = ("Ġ", "Ċ", "ĉ", "Ã", "â", "\ufffd")  # GPT-2's byte spellings, Latin-1 misreadings, replacement char


@pytest.fixture(scope="module")
def gpt2_style(tmp_path_factory):
    """A GPT-2 layout vocab.json + merges.txt, written by hand: every byte, then Ġt, Ġth, Ġthe, Ã©."""
    d = tmp_path_factory.mktemp("gpt2")
    vocab = {ch: i for i, ch in enumerate(sorted(byte_decoder(), key=byte_decoder().get))}
    merges = ["Ġ t", "Ġt h", "Ġth e", "Ã ©"]
    for m in merges:
        vocab[m.replace(" ", "")] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab))
    (d / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return BPETokenizer.from_vocab_merges(d / "vocab.json", d / "merges.txt")


def test_byte_decoder_is_gpt2s_table():
    table = byte_decoder()
    assert len(table) == 256 and sorted(table.values()) == list(range(256))
    assert (table["Ġ"], table["Ċ"], table["ĉ"], table["A"]) == (0x20, 0x0A, 0x09, 0x41)


def test_gpt2_space_newline_tab_are_visible(gpt2_style):
    ids = gpt2_style.encode(" the\n\tend")
    assert gpt2_style.tok.id_to_token(ids[0]) == "Ġthe"
    assert gpt2_style.display(ids) == ["␣the", "↵", "⇥", "e", "n", "d"]
    assert gpt2_style.token_strings(ids) == [" the", "\n", "\t", "e", "n", "d"]


def test_merged_multibyte_character_shows_as_itself(gpt2_style):
    ids = gpt2_style.encode("café")
    assert gpt2_style.display(ids)[-1] == "é"
    assert gpt2_style.token_strings(ids)[-1] == "é"


def test_partial_utf8_bytes_are_marked_not_mojibake(gpt2_style):
    ids = gpt2_style.encode("✓")  # three bytes E2 9C 93, no merges for them
    assert gpt2_style.display(ids) == ["<0xE2>", "<0x9C>", "<0x93>"]
    assert gpt2_style.token_strings(ids) == ["\\xe2", "\\x9c", "\\x93"]
    assert gpt2_style.decode(ids) == "✓"


def test_show_bytes_mixes_text_and_marked_bytes():
    assert show_bytes("a é\n".encode()) == "a␣é↵"
    assert show_bytes(b"ab\xe2\x9c") == "ab<0xE2><0x9C>"
    assert show_bytes(b"\x93x y") == "<0x93>x␣y"
    assert show_bytes(b"") == "∅"


def test_no_display_string_is_mojibake():
    tok = tiny_bpe()
    text = TEXT + " ✓ 日本語 😀 naïve\r\n"
    shown = tok.display(tok.encode(text))
    assert not [s for s in shown if any(m in s for m in MOJIBAKE)]
    assert "␣" in "".join(shown) and "↵" in "".join(shown) and "⇥" in "".join(shown)


def test_interface_matches_char_tokenizer():
    tok = tiny_bpe()
    for name in ("kind", "vocab_size", "encode", "decode", "token_strings", "display", "to_dict", "save"):
        assert hasattr(tok, name)
    assert tok.kind == "bpe" and tok.vocab_size == 300
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT
    assert "".join(tok.token_strings(ids)).encode("utf-8", "backslashreplace")  # each token has a string
    assert len(tok.display(ids)) == len(ids) == len(tok.token_strings(ids))
    assert tok.to_dict() == {"kind": "bpe", "file": "tokenizer.json", "vocab_size": 300}
    assert tok.encode(TEXT, unknown="drop") == ids  # byte-level: nothing is unknown


def test_special_tokens_are_not_added_and_display_as_themselves():
    tok = tiny_bpe()
    eot = tok.tok.token_to_id("<|endoftext|>")
    assert tok.encode("hello")[0] != eot
    assert tok.encode("<|endoftext|>") == [eot]
    assert tok.display([eot]) == ["<|endoftext|>"] and tok.token_strings([eot]) == ["<|endoftext|>"]


def test_saved_in_a_native_checkpoint(tmp_path):
    tok = tiny_bpe()
    model = tiny_model(vocab_size=tok.vocab_size)
    gptviz.save(model, tmp_path / "ck", tok)
    bundle = gptviz.load(tmp_path / "ck")
    assert bundle.report.tokenizer == "bpe"
    assert bundle.tokenizer.encode(TEXT) == tok.encode(TEXT)
    assert bundle.tokenizer.display(tok.encode(TEXT)) == tok.display(tok.encode(TEXT))
    t = gptviz.trace(bundle.model, tok.encode("O Romeo")[:16], bundle.tokenizer)
    assert t.tokens == tok.token_strings(tok.encode("O Romeo")[:16])


def test_native_checkpoint_without_its_tokenizer_file(tmp_path):
    tok = tiny_bpe()
    gptviz.save(tiny_model(vocab_size=tok.vocab_size), tmp_path / "ck", tok)
    (tmp_path / "ck" / "tokenizer.json").unlink()
    with pytest.raises(gptviz.CheckpointError, match=r"tokenizer.json: file not found"):
        gptviz.load(tmp_path / "ck")


def test_encode_prompt_works_with_bpe():
    tok = tiny_bpe()
    ids = gptviz.encode_prompt(tok, TEXT, block_size=8, keep_last=True)
    assert ids == tok.encode(TEXT)[-8:]


def test_non_byte_level_tokenizer_with_unknown_token():
    """A classic BPE with an unknown token (not byte-level): unknown pieces are named or dropped."""
    vocab = {"[UNK]": 0, "a": 1, "b": 2, "ab": 3}
    tok = HFTokenizer(models.BPE(vocab, [("a", "b")], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe = BPETokenizer(tok)
    assert not bpe.byte_level
    assert bpe.encode("ab a") == [3, 1]
    assert bpe.display([3, 1]) == ["ab", "a"]
    with pytest.raises(gptviz.UnknownCharacterError, match=r"'z'"):
        bpe.encode("ab z")
    assert bpe.encode("ab z", unknown="drop") == [3]


def test_trained_tokenizer_is_deterministic():
    a = BPETokenizer.train(TEXT * 5, 280)
    b = BPETokenizer.train(TEXT * 5, 280)
    assert a.tok.get_vocab() == b.tok.get_vocab()


def test_ids_run_through_a_model():
    tok = tiny_bpe()
    model = tiny_model(vocab_size=tok.vocab_size, block_size=64)
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode(TEXT)[:64]]))
    assert logits.shape == (1, 64, tok.vocab_size)
