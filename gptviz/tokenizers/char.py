"""The character tokenizer: one token per character, nanoGPT's convention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..errors import UnknownCharacterError
from .base import display_token


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
