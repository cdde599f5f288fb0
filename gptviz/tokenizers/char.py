"""The character tokenizer: one token per character, nanoGPT's convention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..errors import UnknownCharacterError
from .base import display_token


class CharTokenizer:
    """One token per character, in nanoGPT's convention: itos[i] is the character of id i."""

    kind = "char"

    def __init__(self, chars: Sequence[str]) -> None:
        """chars: the vocabulary in id order, distinct single characters (ValueError otherwise)."""
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("a character vocabulary must be distinct single characters")
        self.itos = list(chars)
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The vocabulary of every character in text, sorted, as nanoGPT's prepare.py builds it."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        """V: the number of characters."""
        return len(self.itos)

    def encode(self, text: str, unknown: Literal["error", "drop"] = "error") -> list[int]:
        """One id per character; characters outside the vocabulary are reported (all of them at
        once) or dropped."""
        missing = sorted({c for c in text if c not in self.stoi})
        if missing and unknown == "error":
            raise UnknownCharacterError(missing)
        return [self.stoi[c] for c in text if c in self.stoi]

    def decode(self, ids: Sequence[int]) -> str:
        """The characters of the ids, joined."""
        return "".join(self.itos[i] for i in ids)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """The character of each id."""
        return [self.itos[i] for i in ids]

    def display(self, ids: Sequence[int]) -> list[str]:
        """The character of each id, whitespace made visible; an id past the characters (a vocabulary
        padded past them) by its number, as the other tokenizers show one they cannot produce."""
        n = len(self.itos)
        return [display_token(self.itos[i]) if 0 <= i < n else f"<id {int(i)}>" for i in ids]

    def to_dict(self) -> dict:
        """What a native checkpoint's config.json stores to rebuild this tokenizer."""
        return {"kind": self.kind, "chars": self.itos}
