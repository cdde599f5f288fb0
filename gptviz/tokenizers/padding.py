"""A tokenizer.json's `padding` and `truncation` blocks, held to the model's context.

The `tokenizers` library applies both inside every `encode`: `{"Fixed": 1000000000}` pads a one-word
prompt to a billion tokens (the process aborts), a huge `pad_to_multiple_of` does the same, and a
truncation `stride` one below `max_length` turns a long text into one overflowing window per token
(quadratic). So the blocks are checked as data here, before the library builds anything:
- padding: `BatchLongest` or `{"Fixed": n}` with n within the model's context, a `pad_to_multiple_of`
  within it too, a pad id of the model and a short pad token;
- truncation: a `max_length`, a `stride` of at most half of it, a strategy and a direction the library
  knows.
A sane block (Fixed 8, a multiple of 8, truncation at 2,048 with no stride) passes. Whatever a file says, the
loaded tokenizer then pads and truncates nothing (`disable`): gptviz encodes one prompt, never a batch,
as transformers' `tokenizer(text)` does (it turns both off for a call that asks for neither).
"""

from __future__ import annotations

from ..limits import MAX_CONFIG, MAX_SPEC_ITEMS, MAX_TOKEN_CHARS
from .vet import Refused

DIRECTIONS = ("Left", "Right")
TRUNCATION_STRATEGIES = ("LongestFirst", "OnlyFirst", "OnlySecond")
CONTEXT = " (the model's context)"
MAX_LENGTH = 2**32 - 1  # the library reads a length as a usize


def _count(value: object, what: str, low: int, high: int, bound: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Refused(f"{what} {str(value)[:40]} is not a whole number in [{low:,}, {high:,}]{bound}")
    return value


def _direction(block: dict, what: str) -> None:
    if block.get("direction", "Right") not in DIRECTIONS:
        raise Refused(f"a {what} direction must be Left or Right, got {str(block.get('direction'))[:40]!r}")


def check_padding(block: object, vocab_size: int, context: int) -> None:
    """Refused unless a padding block (or null) pads to at most `context` tokens with an id of the model."""
    if block is None:
        return
    if not isinstance(block, dict):
        raise Refused("padding must be an object or null")
    strategy = block.get("strategy", "BatchLongest")
    if isinstance(strategy, dict) and list(strategy) == ["Fixed"]:
        _count(strategy["Fixed"], "padding to a fixed length of", 1, context, CONTEXT)
    elif strategy != "BatchLongest":
        raise Refused(f"a padding strategy must be BatchLongest or {{'Fixed': n}}, got {str(strategy)[:40]}")
    multiple = block.get("pad_to_multiple_of")
    if multiple is not None:
        _count(multiple, "padding to a multiple of", 1, context, CONTEXT)
    _count(block.get("pad_id", 0), "a padding id of", 0, vocab_size - 1)
    _count(block.get("pad_type_id", 0), "a padding type id of", 0, MAX_SPEC_ITEMS)
    token = block.get("pad_token", "[PAD]")
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise Refused(f"a pad token must be a string of at most {MAX_TOKEN_CHARS} characters")
    _direction(block, "padding")


def check_truncation(block: object) -> None:
    """Refused unless a truncation block (or null) has a length and a stride of at most half of it.

    Truncation only cuts, so a length beyond the context is harmless (a real file may name the
    model's full 131,072); each overflowing window brings max_length - stride new tokens, so a stride
    of at most half keeps all the windows together under twice the text's tokens."""
    if block is None:
        return
    if not isinstance(block, dict):
        raise Refused("truncation must be an object or null")
    longest = _count(block.get("max_length"), "truncation to a length of", 1, MAX_LENGTH)
    stride = block.get("stride", 0)
    if isinstance(stride, bool) or not isinstance(stride, int) or not 0 <= stride <= longest // 2:
        raise Refused(
            f"a truncation stride of {str(stride)[:40]} must be a whole number of at most half of max_length {longest}"
        )
    if block.get("strategy", "LongestFirst") not in TRUNCATION_STRATEGIES:
        raise Refused(f"a truncation strategy must be one of {', '.join(TRUNCATION_STRATEGIES)}")
    _direction(block, "truncation")


def check(spec: dict, vocab_size: int, context: int | None) -> None:
    """Both blocks of a tokenizer.json for a model of vocab_size ids reading `context` positions
    (None: the largest context gptviz loads); Refused saying which value is out of bounds."""
    bound = MAX_CONFIG["block_size"] if context is None else max(1, min(context, MAX_CONFIG["block_size"]))
    check_padding(spec.get("padding"), vocab_size, bound)
    check_truncation(spec.get("truncation"))


def disable(tok) -> None:
    """Turn padding and truncation off on a built `tokenizers.Tokenizer`: whatever its file said, an
    encode returns the text's own tokens (and no overflowing windows), so its size is the prompt's."""
    tok.no_padding()
    tok.no_truncation()
