"""Tokenizers: text -> ids and back, and every token's text as a person should see it."""

from . import gpt2
from .base import Tokenizer, display_token, encode_prompt, parse_ids
from .bpe import BPETokenizer
from .char import CharTokenizer

__all__ = ["gpt2", "BPETokenizer", "CharTokenizer", "Tokenizer", "display_token", "encode_prompt", "parse_ids"]
