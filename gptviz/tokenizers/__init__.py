"""Tokenizers: text -> ids and back, and every token's text as a person should see it."""

from .base import Tokenizer, display_token, encode_prompt, parse_ids
from .bpe import BPETokenizer
from .char import CharTokenizer

__all__ = ["BPETokenizer", "CharTokenizer", "Tokenizer", "display_token", "encode_prompt", "parse_ids"]
