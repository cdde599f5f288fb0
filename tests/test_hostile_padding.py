"""A tokenizer.json's padding and truncation blocks: the library applies them inside every encode,
so `{"Fixed": 1000000000}` padded a one-word prompt to a billion tokens and aborted the process.
Each file sits beside a real checkpoint (11 tokens, 16 positions) and is loaded with gptviz.load."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models
from transformers import PreTrainedTokenizerFast
from untrusted_helpers import CHARS, native

import gptviz
from gptviz.errors import CheckpointError
from gptviz.tokenizers import BPETokenizer

V, CONTEXT = len(CHARS), 16


def spec(padding=None, truncation=None) -> dict:
    """The checkpoint's 11 characters as a tokenizer.json the library wrote, with these blocks."""
    out = json.loads(HFTokenizer(models.BPE({c: i for i, c in enumerate(CHARS)}, [])).to_str())
    return out | {"padding": padding, "truncation": truncation}


def pad(strategy: object = "BatchLongest", **fields) -> dict:
    block = {"strategy": strategy, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 10}
    return block | {"pad_type_id": 0, "pad_token": " "} | fields


def cut(max_length: object = 8, **fields) -> dict:
    return {"direction": "Right", "max_length": max_length, "strategy": "LongestFirst", "stride": 0} | fields


def beside_checkpoint(root, content: dict):
    path = native(root, tokenizer={"kind": "bpe", "file": "tokenizer.json"})
    (path / "tokenizer.json").write_text(json.dumps(content))
    return path


HOSTILE = {
    # the 27.6 KB file: every prompt padded to 10^9 tokens, the process aborted (exit 134)
    "fixed-1e9": (spec(padding=pad({"Fixed": 1_000_000_000})), "fixed length of 1000000000 is not"),
    "fixed-context+1": (spec(padding=pad({"Fixed": CONTEXT + 1})), "[1, 16] (the model's context)"),
    "fixed-zero": (spec(padding=pad({"Fixed": 0})), "fixed length of 0"),
    "fixed-float": (spec(padding=pad({"Fixed": 8.5})), "fixed length of 8.5"),
    "fixed-text": (spec(padding=pad({"Fixed": "8"})), "fixed length of 8 is not a whole number"),
    "multiple-huge": (spec(padding=pad(pad_to_multiple_of=2**40)), "multiple of 1099511627776"),
    "multiple-negative": (spec(padding=pad(pad_to_multiple_of=-8)), "multiple of -8"),
    "strategy-unknown": (spec(padding=pad("Longest")), "strategy must be BatchLongest or"),
    "strategy-two": (spec(padding=pad({"Fixed": 8, "Other": 1})), "strategy must be"),
    "pad-id-out": (spec(padding=pad(pad_id=V)), "padding id of 11"),
    "pad-token-long": (spec(padding=pad(pad_token="x" * 600)), "pad token must be a string"),
    "padding-not-object": (spec(padding=[1, 2]), "padding must be an object"),
    "padding-direction": (spec(padding=pad(direction="Up")), "direction must be Left or Right"),
    # a stride one below the length: one overflowing window per token, the text's tokens squared
    "stride-quadratic": (spec(truncation=cut(1000, stride=999)), "at most half of max_length 1000"),
    "stride-negative": (spec(truncation=cut(stride=-1)), "stride of -1"),
    "truncation-zero": (spec(truncation=cut(0)), "truncation to a length of 0"),
    "truncation-huge": (spec(truncation=cut(2**70)), "truncation to a length of"),
    "truncation-strategy": (spec(truncation=cut(strategy="All")), "truncation strategy must be"),
    "truncation-not-object": (spec(truncation="yes"), "truncation must be an object"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_padding_or_truncation_bomb_is_refused_at_load_in_one_line(tmp_path, name):
    content, words = HOSTILE[name]
    with pytest.raises(CheckpointError) as e:
        gptviz.load(beside_checkpoint(tmp_path, content))
    message = str(e.value)
    assert words in message, message
    assert "tokenizer.json" in message and "refused" in message and "\n" not in message and len(message) < 400


SANE = {
    "fixed-8": spec(padding=pad({"Fixed": 8})),
    "multiple-of-8": spec(padding=pad(pad_to_multiple_of=8)),
    "fixed-context-multiple-8": spec(padding=pad({"Fixed": CONTEXT}, pad_to_multiple_of=8, direction="Left")),
    "truncation-2048": spec(truncation=cut(2048)),  # longer than the context: it only cuts
    "truncation-stride-half": spec(truncation=cut(8, stride=4)),
    "both": spec(padding=pad({"Fixed": 8}), truncation=cut(4)),
}


@pytest.mark.parametrize("name", list(SANE))
def test_a_sane_padding_block_loads_and_encodes_as_transformers_tokenizer_of_text(tmp_path, name):
    """The file is kept; the ids are what transformers' `tokenizer(text)` gives for it (it turns padding
    and truncation off for a call that asks for neither): the prompt's own tokens, no pad, no cut."""
    path = beside_checkpoint(tmp_path, SANE[name])
    tok = gptviz.load(path).tokenizer
    text = "abc defghij abc"
    reference = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))(text)["input_ids"]
    assert tok.encode(text) == reference == [CHARS.index(c) for c in text]
    assert tok.encode("a") == [0]  # not padded to 8


def test_no_encode_pads_whatever_the_tokenizer_object_says():
    """The last line of defence: a tokenizer built in code, never vetted, that pads to 200,000 and cuts
    into overflowing windows, still encodes a 3-character text to 3 ids."""
    tok = HFTokenizer(models.BPE({c: i for i, c in enumerate(CHARS)}, []))
    tok.enable_padding(length=200_000, pad_id=10, pad_token=" ")
    tok.enable_truncation(max_length=2, stride=1)
    assert len(tok.encode("abc").ids) == 200_000  # the raw library does pad
    wrapped = BPETokenizer(tok, "hand-made")
    assert wrapped.encode("abc") == [0, 1, 2]
    assert wrapped.tok.padding is None and wrapped.tok.truncation is None
