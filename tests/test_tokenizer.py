"""The character tokenizer, display strings, and prompt checks."""

from __future__ import annotations

import pytest

import gptviz
from gptviz import CharTokenizer, PromptError, UnknownCharacterError, display_token, encode_prompt

TOK = CharTokenizer(list("\n !abcdeh"))


def test_round_trip_in_nanogpt_convention():
    ids = TOK.encode("hea d!\n")
    assert ids == [TOK.stoi[c] for c in "hea d!\n"] and TOK.itos[ids[0]] == "h"
    assert TOK.decode(ids) == "hea d!\n"
    assert TOK.vocab_size == 9


def test_unknown_characters_are_named_and_can_be_dropped():
    with pytest.raises(UnknownCharacterError) as err:
        TOK.encode("bad zebra?")
    assert err.value.chars == ["?", "r", "z"]
    assert "'?', 'r', 'z'" in str(err.value) and "unknown='drop'" in str(err.value)
    assert TOK.decode(TOK.encode("bad zebra?", unknown="drop")) == "bad eba"


def test_display_strings_make_whitespace_visible():
    assert TOK.display(TOK.encode("a b\n")) == ["a", "␣", "b", "↵"]
    assert display_token("\t") == "⇥"
    assert display_token("\x07") == "\\x07"
    assert display_token("") == "∅"


def test_encode_prompt_checks_empty_and_too_long():
    with pytest.raises(PromptError, match="empty"):
        encode_prompt(TOK, "", block_size=8)
    with pytest.raises(PromptError, match="no character of the prompt"):
        encode_prompt(TOK, "zzz", block_size=8, unknown="drop")
    with pytest.raises(PromptError, match="is 11 tokens but the model reads at most 8; shorten it or keep the last 8"):
        encode_prompt(TOK, "abcdeabcdea", block_size=8)
    assert encode_prompt(TOK, "abcdeabcdea", block_size=8, keep_last=True) == TOK.encode("deabcdea")


def test_a_char_vocabulary_must_be_distinct_characters():
    with pytest.raises(ValueError):
        CharTokenizer(["a", "a"])
    with pytest.raises(ValueError):
        CharTokenizer(["ab"])


def test_trace_names_tokens_with_the_tokenizer():
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=TOK.vocab_size, block_size=8, n_layer=1, n_head=1, n_embd=8))
    tr = gptviz.trace(model.eval(), TOK.encode("a b"), TOK)
    assert tr.tokens == ["a", " ", "b"]
