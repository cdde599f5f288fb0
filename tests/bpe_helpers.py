"""A tiny byte-level BPE tokenizer, trained in memory for tests (nothing downloaded)."""

from __future__ import annotations

from functools import cache

from gptviz.tokenizers.bpe import BPETokenizer

TEXT = """ROMEO. But soft, what light through yonder window breaks?
It is the east, and Juliet is the sun.
JULIET. O Romeo, Romeo! wherefore art thou Romeo?
\tDeny thy father and refuse thy name.
A café, a naïve façade, an em dash — and a check mark ✓, and 日本語 too.
"""


@cache
def tiny_bpe(vocab_size: int = 300) -> BPETokenizer:
    return BPETokenizer.train(TEXT * 20, vocab_size, special_tokens=["<|endoftext|>"])
