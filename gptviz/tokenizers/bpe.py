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
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ..errors import CheckpointError, UnknownCharacterError
from ..limits import MAX_CONFIG, MAX_ENCODE_UNITS, MAX_EXPANSION, MAX_MERGES_PER_TOKEN
from . import padding, vet
from .base import display_token
from .panics import guard

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


def _has(part: object, kind: str) -> bool:
    """Whether a step of that type is anywhere in a normalizer / pre-tokenizer / decoder spec."""
    if not isinstance(part, dict):
        return False
    if part.get("type") == kind:
        return True
    steps = [p for key in ("decoders", "pretokenizers", "normalizers") for p in part.get(key) or []]
    return any(_has(p, kind) for p in steps)


def _is_byte_level(spec: dict) -> bool:
    return _has(spec.get("decoder"), "ByteLevel") or _has(spec.get("pre_tokenizer"), "ByteLevel")


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


def _is_metaspace(spec: dict) -> bool:
    """SentencePiece-converted (Llama, Gemma, Mistral): words start with `▁` instead of a space."""
    parts = (spec.get("pre_tokenizer"), spec.get("normalizer"), spec.get("decoder"))
    return any("▁" in json.dumps(p, ensure_ascii=False) or "Metaspace" in json.dumps(p) for p in parts if p)


def _steps_of(spec: dict) -> dict:
    """The parts of a spec the display and the bounds need (the vocabulary is left to the library)."""
    return {k: spec.get(k) for k in ("normalizer", "pre_tokenizer", "decoder")}


def _cuts(text: str, most: int) -> Iterator[str]:
    """text in pieces of at most `most` characters, cut where a line starts with a non-space, else
    before a space, so that a piece boundary is also one of the pre-tokenizer's word boundaries."""
    start, n = 0, len(text)
    while n - start > most:
        end = start + most
        cut = next((i + 1 for i in _rfind_all(text, "\n", start, end) if not text[i + 1 : i + 2].isspace()), None)
        if cut is None or cut <= start:
            cut = text.rfind(" ", start + 1, end)
        if cut <= start:
            cut = end
        yield text[start:cut]
        start = cut
    yield text[start:]


def _rfind_all(text: str, sub: str, start: int, end: int) -> Iterator[int]:
    i = text.rfind(sub, start, end)
    while i >= start:
        yield i
        i = text.rfind(sub, start, i)


class BPETokenizer:
    """A `tokenizers` BPE tokenizer with display strings. Never adds special tokens on its own."""

    kind = "bpe"

    def __init__(
        self, tok: HFTokenizer, source: str = "", special_tokens: bool = False, steps: dict | None = None
    ) -> None:
        """tok: the `tokenizers` object; source: where it came from, for messages and the load report.
        special_tokens: encode adds what the tokenizer's post-processor adds (a BOS), as
        `Tokenizer.encode(text)` does for Llama-style checkpoints; GPT-2's adds nothing either way.
        steps: its normalizer, pre-tokenizer and decoder specs when a file was vetted (vet.py);
        else they are read from tok, which gptviz built itself."""
        padding.disable(tok)  # one prompt, never a batch: an encode holds the text's tokens, whatever a file said
        self.tok = tok
        self.source = source
        self.special_tokens = special_tokens
        if steps is None:
            with guard(source or "tokenizer"):
                steps = _steps_of(json.loads(tok.to_str()))
        self.byte_level = _is_byte_level(steps)
        self.metaspace = _is_metaspace(steps)
        try:  # how many bytes a call's text may be: a tokenizer that grows text reads less at once
            self.expansion = vet.normalizer_expansion(steps["normalizer"]) * vet.pre_tokenizer_expansion(
                steps["pre_tokenizer"]
            )
        except vet.Refused:
            self.expansion = float(MAX_EXPANSION)
        self._decoder = byte_decoder()
        self._specials: tuple[list[int], list[int]] | None = None

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(
        cls, path: str | Path, special_tokens: bool = False, vocab_size: int | None = None, context: int | None = None
    ) -> BPETokenizer:
        """Load a tokenizer.json (a path, or a file held in memory: anything with read_bytes) for a
        model of vocab_size ids reading `context` positions. The file is read and checked as data first
        (vet.py, padding.py): sized against the vocabulary, its tokens counted, its steps bounded and
        its padding held to the context before the library builds it.
        CheckpointError naming the file if it is not one, or is out of bounds."""
        most = MAX_CONFIG["vocab_size"] if vocab_size is None else vocab_size
        file = Path(path) if isinstance(path, (str, os.PathLike)) else path
        text = vet.read_text(file, most)
        vet.count_items(text, most, file)
        spec = vet.parse(text, file)
        try:
            vet.vet(spec, most)
            padding.check(spec, most, context)
        except vet.TooManyTokens as e:
            raise vet.VocabularyTooLarge(file, e.count, most) from None
        except vet.Refused as e:
            raise CheckpointError(f"{file}: refused: {e}") from None
        steps = _steps_of(spec)
        del spec  # the vocabulary as Python objects goes before the library builds its own
        with guard(f"{file}: not a readable tokenizer.json", CheckpointError):
            tok = HFTokenizer.from_str(text)
        return cls(tok, str(file), special_tokens, steps)

    @classmethod
    def from_vocab_merges(cls, vocab: str | Path, merges: str | Path, vocab_size: int | None = None) -> BPETokenizer:
        """GPT-2's vocab.json + merges.txt pair, set up the way GPT-2 uses it (byte-level, no prefix space).
        Paths, or files held in memory (anything with read_bytes). Both are read and counted against
        a model of vocab_size ids before the library builds anything."""
        most = MAX_CONFIG["vocab_size"] if vocab_size is None else vocab_size
        vocab = Path(vocab) if isinstance(vocab, (str, os.PathLike)) else vocab
        merges = Path(merges) if isinstance(merges, (str, os.PathLike)) else merges
        vocab_text = vet.read_text(vocab, most)
        vet.count_items(vocab_text, most, vocab)
        merges_text = vet.read_text(merges, most)
        try:
            entries = json.loads(vocab_text)
            if not isinstance(entries, dict):
                raise ValueError("not an object of token -> id")
            if merges_text.count("\n") > MAX_MERGES_PER_TOKEN * most + 1:
                raise ValueError(f"more merges than a BPE of {most:,} tokens has")
            vet.vocab_entries({"type": "BPE", "vocab": entries}, most)
            pairs = _merge_pairs(merges_text)
        except vet.TooManyTokens as e:
            raise vet.VocabularyTooLarge(vocab, e.count, most) from None
        except (ValueError, RecursionError) as e:
            raise CheckpointError(
                f"{vocab} / {merges}: not a readable vocab.json + merges.txt pair ({_first(e)})"
            ) from None
        with guard(f"{vocab} / {merges}: not a readable vocab.json + merges.txt pair", CheckpointError):
            tok = HFTokenizer(models.BPE(entries, pairs))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
        steps = {"normalizer": None, "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}
        return cls(tok, f"{vocab} + {merges}", steps=steps)

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
        with guard(self.source or "tokenizer"):
            return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, unknown: Literal["error", "drop"] = "error") -> list[int]:
        """Token ids of text. Byte-level BPE knows every byte, so `unknown` only matters for
        tokenizers with an unknown token; their unknown pieces are dropped or reported."""
        return [i for piece in self.encode_pieces(text, unknown) for i in piece]

    def encode_pieces(self, text: str, unknown: Literal["error", "drop"] = "error") -> Iterator[list[int]]:
        """encode's ids, in pieces: one call into the library reads at most MAX_ENCODE_UNITS bytes
        divided by what the tokenizer's steps can grow them by (vet.py), so no text makes one call
        hold more than a bounded number of tokens. A longer text is cut where a line starts (else
        before a space); the post-processor's special tokens go around the whole, once."""
        most = max(1, int(MAX_ENCODE_UNITS / self.expansion))
        if len(text) <= most // 4 or len(text.encode("utf-8", "surrogatepass")) <= most:
            yield self._encode_one(text, unknown, self.special_tokens)
            return
        prefix, suffix = self._special_ids() if self.special_tokens else ([], [])
        yield prefix
        for piece in _cuts(text, most // 4):  # a character is at most 4 bytes
            yield self._encode_one(piece, unknown, False)
        yield suffix

    def _encode_one(self, text: str, unknown: str, special: bool) -> list[int]:
        with guard(f"{self.source or 'tokenizer'}: cannot encode this text"):
            enc = self.tok.encode(text, add_special_tokens=special)
            unk = self.tok.model.unk_token if isinstance(self.tok.model, models.BPE) else None
            unk_id = self.tok.token_to_id(unk) if unk else None
            if unk_id is None or unk_id not in enc.ids:
                return list(enc.ids)
            ids, offsets = enc.ids, enc.offsets
        if unknown == "drop":
            return [i for i in ids if i != unk_id]
        chars = sorted({text[s:e] for i, (s, e) in zip(ids, offsets) if i == unk_id})
        raise UnknownCharacterError(chars)

    def _special_ids(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor puts before and after a text (a BOS; an EOS for some)."""
        if self._specials is None:
            with guard(self.source or "tokenizer"):
                full = self.tok.encode("a", add_special_tokens=True).ids
                plain = self.tok.encode("a", add_special_tokens=False).ids
            at = next((i for i in range(len(full)) if full[i : i + len(plain)] == plain), len(full))
            self._specials = (full[:at], full[at + len(plain) :])
        return self._specials

    def decode(self, ids: Sequence[int]) -> str:
        """The text of the ids, special tokens kept."""
        with guard(f"{self.source or 'tokenizer'}: cannot decode these ids"):
            return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def _to_token(self, i: int) -> str | None:
        with guard(self.source or "tokenizer", quiet=False):  # per token: no file juggling
            return self.tok.id_to_token(int(i))

    def token_bytes(self, i: int) -> bytes | None:
        """The bytes a byte-level token stands for; None for special or non-byte-level tokens."""
        piece = self._to_token(i)
        if piece is None or not self.byte_level or any(c not in self._decoder for c in piece):
            return None
        return bytes(self._decoder[c] for c in piece)

    def _piece(self, i: int) -> tuple[str | None, bytes | None]:
        """A token's text as a person reads it, or its bytes: SentencePiece's `▁` is a space and its
        byte-fallback pieces (`<0x0A>`) are the byte they name."""
        piece = self._to_token(i)
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
