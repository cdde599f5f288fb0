"""The Generate page's text box and its "Use as prompt" text when a generated id lies past the
tokenizer's ids (a vocabulary padded for speed, as nanoGPT pads GPT-2's 50,257 ids to 50,304, or a
1B model's 128k rows over a smaller tokenizer): the id is shown by name, not dropped without a trace
(a BPE tokenizer decodes it to nothing) and not a crash (a character tokenizer has no such index)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gptviz
from gptviz.dashboard.panels.generating import prompt_text, text_pieces

ROOT = Path(__file__).resolve().parents[1]


def bpe():
    return gptviz.load(ROOT / "checkpoints" / "shakespeare-llama").tokenizer


@pytest.mark.parametrize("make", [lambda: gptviz.CharTokenizer(list("abc ")), bpe], ids=["char", "bpe"])
def test_an_id_past_the_tokenizer_is_shown_by_name(make):
    tok = make()
    known = tok.encode("ab c")
    past = tok.vocab_size + 5
    ids = [*known, past, known[0]]
    pieces = text_pieces(tok, tok.display, ids)
    assert pieces[len(known)] == f"<id {past}>"
    assert "".join(pieces[: len(known)]) == tok.decode(known) == "ab c" and pieces[-1] == tok.decode(known[:1])
    assert prompt_text(tok, ids) == tok.decode([*known, known[0]])  # the padding id has no text to type


def test_without_a_tokenizer_ids_are_the_text():
    assert text_pieces(None, lambda ids: [str(i) for i in ids], [3, 70]) == ["3 ", "70 "]
    assert prompt_text(None, [3, 70]) == "3, 70"
