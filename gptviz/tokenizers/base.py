"""The tokenizer interface, display strings that make whitespace visible, and prompt parsing.

A tokenizer turns text into ids and back, and names each id's token string. Display strings are
for axes and chips: a space, newline or tab must be seen, never drawn as nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol

from ..errors import PromptError
from ..limits import MAX_PROMPT_CHARS, MAX_PROMPT_UNITS

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
    """What every tokenizer offers the model, the Trace and the dashboard."""

    kind: str  # "char", "bpe", ...

    @property
    def vocab_size(self) -> int:
        """How many ids it makes (read-only: BPETokenizer computes it; an attribute serves too)."""
        ...

    def encode(self, text: str, unknown: Literal["error", "drop"] = "error") -> list[int]:
        """Token ids of text; text the vocabulary cannot hold raises UnknownCharacterError, or is
        left out with unknown="drop"."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of a sequence of ids."""
        ...

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each id's own token string, as the tokenizer produced it."""
        ...

    def display(self, ids: Sequence[int]) -> list[str]:
        """Each id's token string made visible for axes and chips (see display_token)."""
        ...


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
    # before the tokenizer sees it: a tokenizer whose steps grow text (vet.py) reads fewer characters
    expansion = getattr(tokenizer, "expansion", 1.0)
    if len(text) > MAX_PROMPT_CHARS or len(text.encode("utf-8", "surrogatepass")) * expansion > MAX_PROMPT_UNITS:
        most = min(MAX_PROMPT_CHARS, int(MAX_PROMPT_UNITS / expansion / 4))
        raise PromptError(
            f"the prompt is {len(text):,} characters; gptviz reads at most {most:,} with this tokenizer "
            "(or more of the ones that take fewer bytes)"
        )
    pieces = getattr(tokenizer, "encode_pieces", None)
    if pieces is None:
        ids = tokenizer.encode(text, unknown=unknown)
    else:  # the token count is held to the block while encoding, piece by piece
        ids = []
        for piece in pieces(text, unknown):
            ids = (ids + piece)[-block_size - 1 :] if keep_last else ids + piece
            if len(ids) > 4 * block_size and not keep_last:
                raise PromptError(
                    f"the prompt is more than {len(ids):,} tokens but the model reads at most {block_size}; "
                    f"shorten it or keep the last {block_size} tokens"
                )
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


def parse_ids(text: str, vocab_size: int | None = None, what: str = "token ids") -> list[int]:
    """Typed token ids -> a list of ints: one grammar for the CLI, the sidebar and the lookup.
    Separators are commas and/or whitespace ("1, 2 3"); each id is a plain non-negative integer
    below vocab_size when that is given. `what` names the input in messages. Anything else is a
    PromptError that says what was wrong."""
    ids = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        if not re.fullmatch(r"[0-9]+", part):  # ASCII digits only: "²" passes str.isdigit, not int()
            raise PromptError(f"{what} must be comma-separated integers, e.g. 1, 2, 3: {part[:40]!r} is not one")
        if len(part) > 12 or (vocab_size is not None and int(part) >= vocab_size):
            top = f" [0, {vocab_size - 1}]" if vocab_size is not None else ""
            raise PromptError(f"token id {part[:20]}{'…' if len(part) > 20 else ''} is outside the vocabulary{top}")
        ids.append(int(part))
    if not ids:
        raise PromptError(f"no {what} given: type comma-separated integers, e.g. 1, 2, 3")
    return ids
