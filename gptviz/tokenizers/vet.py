"""A tokenizer.json is hostile until checked: it is read as JSON data and held to gptviz's bounds
before the `tokenizers` library builds anything from it.

What a stranger's file could do, and what stops it here:
- claim millions of tokens: its size is held against the model's vocabulary before it is parsed,
  its containers are counted before Python builds them, and its entries and ids after;
- make a prompt huge: every normalizer, pre-tokenizer and decoder step is one gptviz knows, and how
  many bytes each writes per byte read is bounded, so `expansion` bounds the tokens of any text;
- backtrack without end: a regex with a repeat inside a repeat (`(a+)+$`) or a back-reference is
  refused (the library's regex engine backtracks, and panics when it gives up);
- panic anyway: `guard` (panics.py) turns the library's PanicException (a BaseException) into one line.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from re import _constants as sre_constants  # type: ignore[attr-defined]  # re's own parser: a pattern's structure
from re import _parser as sre_parse  # type: ignore[attr-defined]

from ..errors import CheckpointError
from ..limits import (
    MAX_CONTENT_CHARS,
    MAX_EXPANSION,
    MAX_MERGES_PER_TOKEN,
    MAX_PATTERN_CHARS,
    MAX_SPEC_ITEMS,
    MAX_TOKEN_CHARS,
    MAX_TOKENIZER_BYTES,
    TOKENIZER_BYTES_ALLOWANCE,
    TOKENIZER_BYTES_PER_TOKEN,
)

# bytes written per byte read, worst case over every code point (unicodedata, measured): NFKC turns
# U+FDFA (3 bytes) into 18 Arabic letters (33 bytes); lowercasing U+0130 (2 bytes) gives 3 bytes
UNICODE_EXPANSION = {"NFC": 3, "NFD": 3, "NFKC": 11, "NFKD": 11}
LOWERCASE_EXPANSION = 1.5
PLAIN_NORMALIZERS = {"Strip": 1, "StripAccents": 1, "Nmt": 1, "Lowercase": LOWERCASE_EXPANSION, "ByteLevel": 2}
PRE_TOKENIZERS = {  # type -> bytes written per byte (ByteLevel spells a byte as a 2-byte character)
    "ByteLevel": 2,
    "Whitespace": 1,
    "WhitespaceSplit": 1,
    "BertPreTokenizer": 1,
    "Punctuation": 1,
    "Digits": 1,
    "UnicodeScripts": 1,
    "CharDelimiterSplit": 1,
    "FixedLength": 1,
    "Metaspace": 4,  # a space becomes the replacement character (at most 4 bytes)
    "Split": 1,
}
DECODERS = {"ByteLevel", "Metaspace", "WordPiece", "BPEDecoder", "CTC", "Fuse", "Strip", "ByteFallback", "Replace"}
POST_PROCESSORS = {"TemplateProcessing", "BertProcessing", "RobertaProcessing", "ByteLevel"}
MODELS = ("BPE", "WordPiece", "WordLevel", "Unigram")


# --- reading the file ------------------------------------------------------------------------------
def max_file_bytes(vocab_size: int) -> int:
    """The largest tokenizer file gptviz reads for a model of vocab_size ids."""
    return min(MAX_TOKENIZER_BYTES, TOKENIZER_BYTES_ALLOWANCE + TOKENIZER_BYTES_PER_TOKEN * max(vocab_size, 0))


def read_text(path, vocab_size: int, what: str = "tokenizer file") -> str:
    """The file's text, read at most up to its bound (a Path, or an in-memory file with read_bytes);
    CheckpointError when it is larger than a tokenizer for this model can be, or not UTF-8."""
    limit = max_file_bytes(vocab_size)
    try:
        size = path.stat().st_size
        if size > limit:
            data = b""
        elif hasattr(path, "open"):
            with path.open("rb") as f:
                data = f.read(limit + 1)  # a file that grew since stat is still read only up to the bound
        else:
            data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if size > limit or len(data) > limit:
        raise CheckpointError(
            f"{path}: {size:,} bytes is more than a {what} for a model of {vocab_size:,} tokens can be "
            f"(gptviz reads at most {limit:,}: {TOKENIZER_BYTES_PER_TOKEN} bytes a token plus 1 MiB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text (byte {e.start:,}); is it a {what}?") from None


def count_items(text: str, vocab_size: int, path) -> None:
    """Refuse a file whose JSON holds more containers or items than a tokenizer of vocab_size tokens
    can: counted on the raw text, so a file of a million `{}` is refused before Python builds them.
    Commas and brackets inside strings only make the counts larger, never smaller."""
    merges = MAX_MERGES_PER_TOKEN * vocab_size
    most_items = vocab_size * 2 + merges * 2 + 10_000  # vocab, added tokens, merges as ["a", "b"]
    most_containers = vocab_size + merges + 10_000
    items, containers = text.count(","), text.count("{") + text.count("[")
    if items > most_items or containers > most_containers:
        raise CheckpointError(
            f"{path}: holds {max(items, containers):,} JSON items, more than a tokenizer of {vocab_size:,} tokens "
            "can have; is it the tokenizer of this model?"
        )


def parse(text: str, path) -> dict:
    """The JSON object of a tokenizer file, or CheckpointError naming the file."""
    try:
        spec = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a readable tokenizer.json ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise CheckpointError(f"{path}: not a tokenizer.json (no 'model' object)")
    return spec


# --- checking the spec -----------------------------------------------------------------------------
class Refused(ValueError):
    """One part of the spec is outside gptviz's bounds; the message says which and why."""


class TooManyTokens(Refused):
    """The tokenizer has more tokens than the model has ids (counted before anything is built)."""

    def __init__(self, count: int, vocab_size: int):
        self.count, self.vocab_size = count, vocab_size
        super().__init__(f"the tokenizer has {count} tokens but the model only {vocab_size} ids")


class VocabularyTooLarge(CheckpointError):
    """TooManyTokens, as the loaders raise it: the file named, the counts kept for their messages."""

    def __init__(self, path, count: int, vocab_size: int):
        self.count, self.vocab_size = count, vocab_size
        super().__init__(f"{path}: the tokenizer has {count} tokens but the model only {vocab_size} ids")


def _whole(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < high:
        raise Refused(f"{what} {str(value)[:40]} is not an id in [0, {high})")
    return value


def _text(value: object, what: str, most: int) -> str:
    if not isinstance(value, str):
        raise Refused(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > most:
        raise Refused(f"{what} is {len(value):,} characters; gptviz reads at most {most}")
    return value


def _steps(part: dict, key: str, what: str) -> list:
    steps = part.get(key)
    if not isinstance(steps, list) or len(steps) > MAX_SPEC_ITEMS:
        raise Refused(f"a {what} Sequence must list at most {MAX_SPEC_ITEMS} steps")
    return steps


def vocab_entries(model: dict, vocab_size: int) -> int:
    """How many tokens the model part holds, its ids and token lengths checked; Refused otherwise."""
    kind = model.get("type")
    vocab = model.get("vocab")
    if kind not in MODELS:
        raise Refused(f"model type {str(kind)[:40]!r} is not one gptviz reads ({', '.join(MODELS)})")
    if not isinstance(vocab, list if kind == "Unigram" else dict):
        shape = "a list of [piece, score]" if kind == "Unigram" else "an object of token -> id"
        raise Refused(f"a {kind} model's vocab must be {shape}")
    if len(vocab) > vocab_size:  # counted before anything is built from them
        raise TooManyTokens(len(vocab), vocab_size)
    if isinstance(vocab, list):
        for entry in vocab:
            if not isinstance(entry, list) or len(entry) != 2:
                raise Refused("a Unigram vocab entry must be [piece, score]")
            _text(entry[0], "a token", MAX_TOKEN_CHARS)
    else:
        for token, i in vocab.items():
            _text(token, "a token", MAX_TOKEN_CHARS)
            _whole(i, f"token {token[:20]!r} has id", 0, vocab_size)
    if kind == "BPE":
        merges = model.get("merges", [])
        if not isinstance(merges, list) or len(merges) > MAX_MERGES_PER_TOKEN * vocab_size:
            raise Refused(f"a BPE model of {vocab_size:,} tokens has at most {MAX_MERGES_PER_TOKEN}x as many merges")
    return len(vocab)


def _replace(part: dict, what: str) -> float:
    """Bytes written per byte read by a Replace step (normalizer or decoder); its regex checked."""
    content = _text(part.get("content"), f"a {what} Replace's content", MAX_CONTENT_CHARS)
    pattern = part.get("pattern")
    if not isinstance(pattern, dict) or len(pattern) != 1:
        raise Refused(f"a {what} Replace's pattern must be {{'String': ...}} or {{'Regex': ...}}")
    ((kind, value),) = pattern.items()
    if kind == "Regex":
        check_regex(value, f"a {what} Replace's regex")
    elif kind == "String":
        _text(value, f"a {what} Replace's pattern", MAX_PATTERN_CHARS)
        if value:  # each match of len(value) bytes is replaced by content
            return max(1.0, len(content.encode()) / len(value.encode()))
    else:
        raise Refused(f"a {what} Replace's pattern must be a String or a Regex")
    return 1.0 + len(content.encode())  # a regex may match nothing: content written at every position


def _growth(part: object, what: str, key: str, step: Callable[[dict, object], float], depth: int = 0) -> float:
    """Bytes written per byte read by a normalizer, pre-tokenizer or decoder: none grows nothing, a
    Sequence multiplies its steps' growth, step(part, type) gives one step's."""
    if part is None:
        return 1.0
    if not isinstance(part, dict) or depth > 8:
        raise Refused(f"a {what} must be an object (Sequences nested at most 8 deep)")
    if part.get("type") != "Sequence":
        return step(part, part.get("type"))
    out = 1.0
    for inner in _steps(part, key, what):
        out *= _growth(inner, what, key, step, depth + 1)
    return out


def normalizer_expansion(part: object) -> float:
    """Bytes a normalizer writes per byte it reads, at most; Refused for steps gptviz does not know."""
    return _growth(part, "normalizer", "normalizers", _normalizer_step)


def pre_tokenizer_expansion(part: object) -> float:
    """Bytes a pre-tokenizer writes per byte it reads, at most; its regexes checked."""
    return _growth(part, "pre-tokenizer", "pretokenizers", _pre_tokenizer_step)


def decoder_expansion(part: object) -> float:
    """Bytes a decoder writes per byte of token text, at most; its regexes checked."""
    return _growth(part, "decoder", "decoders", _decoder_step)


def _normalizer_step(part: dict, kind: object) -> float:
    if kind in UNICODE_EXPANSION:
        return UNICODE_EXPANSION[kind]
    if kind in PLAIN_NORMALIZERS:
        return PLAIN_NORMALIZERS[kind]
    if kind == "Replace":
        return _replace(part, "normalizer")
    if kind == "Prepend":
        _text(part.get("prepend"), "a Prepend normalizer's text", MAX_CONTENT_CHARS)
        return 1.0  # written once, at the start
    if kind == "BertNormalizer":  # spaces around CJK characters (3 bytes -> 5), accents off, lowercase
        return 5 / 3 * UNICODE_EXPANSION["NFD"] * LOWERCASE_EXPANSION
    if kind == "Precompiled":
        return precompiled_expansion(part.get("precompiled_charsmap"))
    raise Refused(f"normalizer {str(kind)[:40]!r} is not one gptviz knows")


def precompiled_expansion(charsmap: object) -> float:
    """SentencePiece's compiled normalization table: a trie, then the replacement strings, each ended
    by a NUL. A replacement stands for at least one byte read, so the longest one bounds the growth."""
    if charsmap is None or charsmap == "":
        return 1.0
    if not isinstance(charsmap, str):
        raise Refused("a Precompiled normalizer's charsmap must be base64 text")
    try:
        blob = base64.b64decode(charsmap, validate=True)
    except ValueError:
        raise Refused("a Precompiled normalizer's charsmap is not base64") from None
    if len(blob) < 4:
        raise Refused("a Precompiled normalizer's charsmap is too short")
    trie = int.from_bytes(blob[:4], "little")
    if trie > len(blob) - 4:
        raise Refused("a Precompiled normalizer's charsmap is cut short")
    longest = max((len(s) for s in blob[4 + trie :].split(b"\0")), default=0)
    return max(1.0, float(longest))


def _pre_tokenizer_step(part: dict, kind: object) -> float:
    if kind not in PRE_TOKENIZERS:
        raise Refused(f"pre-tokenizer {str(kind)[:40]!r} is not one gptviz knows")
    if kind == "Split":
        pattern = part.get("pattern")
        if not isinstance(pattern, dict) or len(pattern) != 1:
            raise Refused("a Split pre-tokenizer's pattern must be {'String': ...} or {'Regex': ...}")
        ((which, value),) = pattern.items()
        if which == "Regex":
            check_regex(value, "a Split pre-tokenizer's regex")
        else:
            _text(value, "a Split pre-tokenizer's pattern", MAX_PATTERN_CHARS)
    if kind == "Metaspace":
        _text(part.get("replacement", "▁"), "a Metaspace replacement", 1)
    return float(PRE_TOKENIZERS[kind])


def _decoder_step(part: dict, kind: object) -> float:
    if kind not in DECODERS:
        raise Refused(f"decoder {str(kind)[:40]!r} is not one gptviz knows")
    if kind == "Replace":
        return _replace(part, "decoder")
    if kind == "WordPiece":
        _text(part.get("prefix", "##"), "a WordPiece decoder's prefix", MAX_CONTENT_CHARS)
    return 1.0


def check_post_processor(part: object, vocab_size: int, depth: int = 0) -> None:
    """The special tokens a post-processor adds: few, each an id of the model."""
    if part is None:
        return
    if not isinstance(part, dict) or depth > 8:
        raise Refused("a post-processor must be an object")
    kind = part.get("type")
    if kind == "Sequence":
        for step in _steps(part, "processors", "post-processor"):
            check_post_processor(step, vocab_size, depth + 1)
        return
    if kind not in POST_PROCESSORS:
        raise Refused(f"post-processor {str(kind)[:40]!r} is not one gptviz knows")
    if kind == "TemplateProcessing":
        for key in ("single", "pair"):
            if not isinstance(part.get(key, []), list) or len(part.get(key, [])) > MAX_SPEC_ITEMS:
                raise Refused(f"a post-processor template lists at most {MAX_SPEC_ITEMS} pieces")
        specials = part.get("special_tokens", {})
        if not isinstance(specials, dict) or len(specials) > MAX_SPEC_ITEMS:
            raise Refused(f"a post-processor names at most {MAX_SPEC_ITEMS} special tokens")
        for name, special in specials.items():
            ids = special.get("ids") if isinstance(special, dict) else None
            if not isinstance(ids, list) or len(ids) > MAX_SPEC_ITEMS:
                raise Refused(f"special token {name[:20]!r} must list at most {MAX_SPEC_ITEMS} ids")
            for i in ids:
                _whole(i, f"special token {name[:20]!r} has id", 0, vocab_size)


def vet(spec: dict, vocab_size: int) -> float:
    """Check a tokenizer.json's data against gptviz's bounds and a model of vocab_size ids; returns
    how many bytes its steps write per byte of input at most (tokens per byte are no more).
    Raises Refused saying what is out of bounds."""
    count = vocab_entries(spec["model"], vocab_size)
    added = spec.get("added_tokens") or []
    if not isinstance(added, list):
        raise Refused("added_tokens must be a list")
    if len(added) > vocab_size:
        raise TooManyTokens(len(added), vocab_size)
    ids = set()
    for token in added:
        if not isinstance(token, dict):
            raise Refused("each of added_tokens must be an object with an id and a content")
        ids.add(_whole(token.get("id"), "an added token's id", 0, vocab_size))
        _text(token.get("content"), "an added token", MAX_TOKEN_CHARS)
    if count + len(ids) > vocab_size and len(ids) > 0:
        vocab = spec["model"]["vocab"]
        known = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab)))
        if len(known | ids) > vocab_size:
            raise TooManyTokens(len(known | ids), vocab_size)
    check_post_processor(spec.get("post_processor"), vocab_size)
    decoder = decoder_expansion(spec.get("decoder"))
    expansion = normalizer_expansion(spec.get("normalizer")) * pre_tokenizer_expansion(spec.get("pre_tokenizer"))
    for what, factor in (("normalizer and pre-tokenizer", expansion), ("decoder", decoder)):
        if factor > MAX_EXPANSION:
            raise Refused(
                f"its {what} can write {factor:,.0f} bytes for each byte they read; gptviz allows {MAX_EXPANSION}"
            )
    return expansion


# --- regexes ---------------------------------------------------------------------------------------
# Oniguruma syntax the `tokenizers` library accepts and Python's parser does not: each becomes a
# stand-in of the same shape (a class matching one character), since only the structure is checked
ONIG = [
    (re.compile(r"\\[pP]\{\^?[A-Za-z_ &=-]+\}|\\[pP][A-Za-z]|\\[hH]|\\x\{[0-9A-Fa-f]+\}"), r"\\w"),
    (re.compile(r"\(\?<([A-Za-z_]\w*)>"), r"(?P<\1>"),
    (re.compile(r"\\z"), r"\\Z"),
]
# a possessive repeat gives nothing back, but what it holds still backtracks while it matches
REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT)


def check_regex(pattern: object, what: str) -> None:
    """Refuse a regex that can backtrack catastrophically: a variable repeat or an alternation inside
    a repeat (`(a+)+`, `(a|aa)*`), or a back-reference. A regex Python cannot parse is refused too."""
    text = _text(pattern, what, MAX_PATTERN_CHARS)
    for onig, stand_in in ONIG:
        text = onig.sub(stand_in, text)
    try:
        tree = sre_parse.parse(text)
    except (re.error, RecursionError, OverflowError) as e:
        raise Refused(f"{what} {str(pattern)[:60]!r} cannot be checked ({e})") from None
    danger = _danger(tree, inside_repeat=False)
    if danger:
        raise Refused(f"{what} {str(pattern)[:60]!r} can backtrack catastrophically ({danger}); gptviz refuses it")


def _danger(items, inside_repeat: bool) -> str | None:
    for op, av in items:
        if op == sre_constants.GROUPREF or op == sre_constants.GROUPREF_EXISTS:
            return "a back-reference"
        if op in REPEATS:
            low, high, body = av
            if inside_repeat and low != high:
                return "a repeat inside a repeat"
            found = _danger(body, inside_repeat or high > 1)
        elif op == sre_constants.BRANCH:
            if inside_repeat:
                return "alternatives inside a repeat"
            found = next((d for d in (_danger(b, inside_repeat) for b in av[1]) if d), None)
        elif op == sre_constants.SUBPATTERN:
            found = _danger(av[-1], inside_repeat)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            found = _danger(av[1], inside_repeat)
        elif op == sre_constants.ATOMIC_GROUP:
            found = _danger(av, inside_repeat)
        else:
            found = None
        if found:
            return found
    return None
