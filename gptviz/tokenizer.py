"""Tokenizers behind one small interface, and display strings that make whitespace visible.

A tokenizer turns text into ids and back, and names each id's token string. Display strings are
for axes and chips: a space, newline or tab must be seen, never drawn as nothing.
"""

from __future__ import annotations

from typing import Literal, Protocol, Sequence

from .errors import PromptError, UnknownCharacterError

# Visible stand-ins for characters that would otherwise draw as nothing.
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def display_token(s: str) -> str:
    """A token string as a person can see it: whitespace and control characters made visible."""
    out = []
    for ch in s:
        if ch in VISIBLE:
            out.append(VISIBLE[ch])
        elif not ch.isprintable():
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out) or "∅"


class Tokenizer(Protocol):
    kind: str  # "char", "bpe", ...
    vocab_size: int

    def encode(self, text: str, unknown: Literal["error", "drop"] = "error") -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def token_strings(self, ids: Sequence[int]) -> list[str]: ...

    def display(self, ids: Sequence[int]) -> list[str]: ...


class CharTokenizer:
    """One token per character, in nanoGPT's convention: itos[i] is the character of id i."""

    kind = "char"

    def __init__(self, chars: Sequence[str]):
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("a character vocabulary must be distinct single characters")
        self.itos = list(chars)
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str, unknown: Literal["error", "drop"] = "error") -> list[int]:
        missing = sorted({c for c in text if c not in self.stoi})
        if missing and unknown == "error":
            raise UnknownCharacterError(missing)
        return [self.stoi[c] for c in text if c in self.stoi]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.itos[i] for i in ids)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.itos[i] for i in ids]

    def display(self, ids: Sequence[int]) -> list[str]:
        return [display_token(s) for s in self.token_strings(ids)]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "chars": self.itos}


def encode_prompt(
    tokenizer: Tokenizer,
    text: str,
    block_size: int,
    unknown: Literal["error", "drop"] = "error",
    keep_last: bool = False,
) -> list[int]:
    """Prompt text -> ids the model can run, or a PromptError that says what to change.

    keep_last: a prompt longer than block_size keeps its last block_size tokens instead of failing.
    """
    if not text:
        raise PromptError("the prompt is empty: type some text")
    ids = tokenizer.encode(text, unknown=unknown)
    if not ids:
        raise PromptError("no character of the prompt is in the vocabulary, so nothing is left to run")
    if len(ids) > block_size:
        if not keep_last:
            raise PromptError(
                f"the prompt is {len(ids)} tokens but the model reads at most {block_size}; "
                f"shorten it or keep the last {block_size} tokens"
            )
        ids = ids[-block_size:]
    return ids
