"""BPE tokenizers (GPT-2's byte-level BPE and others) behind the same interface as CharTokenizer.

The `tokenizers` library does the encoding; this module adds what a visualizer needs: every
token's text as a person should see it. GPT-2's byte-level BPE spells bytes as printable
characters (a space is `Ġ`, a newline `Ċ`); a token can also hold part of a multi-byte UTF-8
character. Display strings undo the byte spelling, make whitespace visible (`Ġ` becomes `␣`),
and mark bytes that are not valid UTF-8 on their own as `<0xE2>`, so nothing is drawn as
mojibake.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ..errors import CheckpointError, UnknownCharacterError
from .base import display_token

TOKENIZER_FILE = "tokenizer.json"


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character -> the byte it spells (the inverse of bytes_to_unicode)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:  # bytes that would not print are shifted past 255
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def show_bytes(data: bytes) -> str:
    """Display string of raw bytes: valid UTF-8 runs as text (whitespace visible), other bytes as <0xNN>."""
    out = []
    while data:
        try:
            out.append(display_token(data.decode("utf-8")))
            break
        except UnicodeDecodeError as e:
            if e.start:
                out.append(display_token(data[: e.start].decode("utf-8")))
            out.extend(f"<0x{b:02X}>" for b in data[e.start : e.end])
            data = data[e.end :]
    return "".join(out) or "∅"


def _is_byte_level(tok: HFTokenizer) -> bool:
    spec = json.loads(tok.to_str())

    def has(part: dict | None) -> bool:
        if not part:
            return False
        if part.get("type") == "ByteLevel":
            return True
        return any(has(p) for p in part.get("decoders", []) + part.get("pretokenizers", []))

    return has(spec.get("decoder")) or has(spec.get("pre_tokenizer"))


def _first(e: Exception) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def _merge_pairs(text: str) -> list[tuple[str, str]]:
    """merges.txt as the pairs it lists, read as the tokenizers library reads the file: an optional
    first '#version' line, then one 'a b' pair per line."""
    pairs = []
    for n, line in enumerate(text.splitlines()):
        if not line or (n == 0 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"line {n + 1} of merges.txt is not two tokens separated by a space")
        pairs.append((parts[0], parts[1]))
    return pairs


BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _is_metaspace(tok: HFTokenizer) -> bool:
    """SentencePiece-converted (Llama, Gemma, Mistral): words start with `▁` instead of a space."""
    spec = json.loads(tok.to_str())
    parts = (spec.get("pre_tokenizer"), spec.get("normalizer"), spec.get("decoder"))
    return any("▁" in json.dumps(p, ensure_ascii=False) or "Metaspace" in json.dumps(p) for p in parts if p)


class BPETokenizer:
    """A `tokenizers` BPE tokenizer with display strings. Never adds special tokens on its own."""

    kind = "bpe"

    def __init__(self, tok: HFTokenizer, source: str = "", special_tokens: bool = False) -> None:
        """tok: the `tokenizers` object; source: where it came from, for messages and the load report.
        special_tokens: encode adds what the tokenizer's post-processor adds (a BOS), as
        `Tokenizer.encode(text)` does for Llama-style checkpoints; GPT-2's adds nothing either way."""
        self.tok = tok
        self.source = source
        self.special_tokens = special_tokens
        self.byte_level = _is_byte_level(tok)
        self.metaspace = _is_metaspace(tok)
        self._decoder = byte_decoder()

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, special_tokens: bool = False) -> BPETokenizer:
        """Load a tokenizer.json (a path, or a file held in memory: anything with read_text);
        CheckpointError naming the file if it is not one."""
        try:
            if isinstance(path, (str, os.PathLike)):
                return cls(HFTokenizer.from_file(str(path)), str(path), special_tokens)
            return cls(HFTokenizer.from_str(path.read_text()), str(path), special_tokens)
        except Exception as e:  # the Rust side raises plain Exception subclasses
            raise CheckpointError(f"{path}: not a readable tokenizer.json ({_first(e)})") from None

    @classmethod
    def from_vocab_merges(cls, vocab: str | Path, merges: str | Path) -> BPETokenizer:
        """GPT-2's vocab.json + merges.txt pair, set up the way GPT-2 uses it (byte-level, no prefix space).
        Paths, or files held in memory (anything with read_text)."""
        try:
            if isinstance(vocab, (str, os.PathLike)) and isinstance(merges, (str, os.PathLike)):
                model = models.BPE.from_file(str(vocab), str(merges))
            else:
                model = models.BPE(json.loads(vocab.read_text()), _merge_pairs(merges.read_text()))
            tok = HFTokenizer(model)
        except Exception as e:
            raise CheckpointError(
                f"{vocab} / {merges}: not a readable vocab.json + merges.txt pair ({_first(e)})"
            ) from None
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return cls(tok, f"{vocab} + {merges}")

    @classmethod
    def train(cls, text: str | Sequence[str], vocab_size: int, special_tokens: Sequence[str] = ()) -> BPETokenizer:
        """Train a GPT-2 style byte-level BPE on text (a string or a list of strings)."""
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(special_tokens),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: any text encodes
            show_progress=False,
        )
        chunks = [text] if isinstance(text, str) else list(text)
        # one chunk per line keeps the trainer's memory small; the pre-tokenizer splits words anyway
        lines = [line for chunk in chunks for line in chunk.splitlines(keepends=True)]
        tok.train_from_iterator(lines, trainer)
        return cls(tok, "trained")

    def save(self, directory: str | Path) -> Path:
        """Write tokenizer.json into directory; returns its path."""
        path = Path(directory) / TOKENIZER_FILE
        self.tok.save(str(path))
        return path

    def to_dict(self) -> dict:
        """What a native checkpoint's config.json stores (the tokenizer itself is tokenizer.json)."""
        out = {"kind": self.kind, "file": TOKENIZER_FILE, "vocab_size": self.vocab_size}
        return out | ({"special_tokens": True} if self.special_tokens else {})

    # --- the Tokenizer interface ------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """V, added tokens included."""
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, unknown: Literal["error", "drop"] = "error") -> list[int]:
        """Token ids of text. Byte-level BPE knows every byte, so `unknown` only matters for
        tokenizers with an unknown token; their unknown pieces are dropped or reported."""
        enc = self.tok.encode(text, add_special_tokens=self.special_tokens)
        unk = self.tok.model.unk_token if isinstance(self.tok.model, models.BPE) else None
        unk_id = self.tok.token_to_id(unk) if unk else None
        if unk_id is None or unk_id not in enc.ids:
            return list(enc.ids)
        if unknown == "drop":
            return [i for i in enc.ids if i != unk_id]
        chars = sorted({text[s:e] for i, (s, e) in zip(enc.ids, enc.offsets) if i == unk_id})
        raise UnknownCharacterError(chars)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of the ids, special tokens kept."""
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_bytes(self, i: int) -> bytes | None:
        """The bytes a byte-level token stands for; None for special or non-byte-level tokens."""
        piece = self.tok.id_to_token(int(i))
        if piece is None or not self.byte_level or any(c not in self._decoder for c in piece):
            return None
        return bytes(self._decoder[c] for c in piece)

    def _piece(self, i: int) -> tuple[str | None, bytes | None]:
        """A token's text as a person reads it, or its bytes: SentencePiece's `▁` is a space and its
        byte-fallback pieces (`<0x0A>`) are the byte they name."""
        piece = self.tok.id_to_token(int(i))
        if piece is None or not self.metaspace:
            return piece, None
        if BYTE_PIECE.fullmatch(piece):
            return None, bytes([int(piece[3:5], 16)])
        return piece.replace("▁", " "), None

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each token's own text. A byte-level token that is only part of a UTF-8 character keeps
        its bytes as \\xNN escapes rather than a replacement character."""
        out = []
        for i in ids:
            data = self.token_bytes(i)
            if data is None:
                piece, data = self._piece(i)
                if data is not None:
                    out.append(data.decode("utf-8", errors="backslashreplace"))
                    continue
                out.append(piece if piece is not None else f"<id {int(i)}>")
            else:
                out.append(data.decode("utf-8", errors="backslashreplace"))
        return out

    def display(self, ids: Sequence[int]) -> list[str]:
        """Each token made visible: byte-level pieces through show_bytes, others through display_token."""
        out = []
        for i in ids:
            data = self.token_bytes(i)
            if data is None:
                piece, data = self._piece(i)
                if data is not None:
                    out.append(show_bytes(data))
                    continue
                out.append(display_token(piece) if piece is not None else f"<id {int(i)}>")
            else:
                out.append(show_bytes(data))
        return out
