"""GPT-2's byte-level BPE from the two files shipped in gpt2_files/ (see its README for where they
come from and their licence): the tokenizer nanoGPT's sample.py falls back to for a checkpoint of
GPT-2's vocabulary without meta.pkl. Built in memory, once per process; nothing is downloaded."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from .bpe import BPETokenizer

FILES = Path(__file__).resolve().parent / "gpt2_files"
VOCAB_FILE, MERGES_FILE = FILES / "encoder.json.gz", FILES / "vocab.bpe.gz"
VOCAB_SIZE = 50257  # 50,000 merges + 256 bytes + <|endoftext|>
# nanoGPT's vocabulary sizes for GPT-2's BPE: the real one, and train.py's padding to a multiple of 64
VOCAB_SIZES = (VOCAB_SIZE, 50304)
END_OF_TEXT = "<|endoftext|>"  # id 50256; sample.py encodes it as one token (allowed_special)


def available() -> bool:
    """Whether the two files are here (a trimmed install may lack them)."""
    return VOCAB_FILE.is_file() and MERGES_FILE.is_file()


def vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """encoder.json as a token -> id dict, and vocab.bpe's merges in rank order."""
    vocab = json.loads(gzip.decompress(VOCAB_FILE.read_bytes()).decode("utf-8"))
    lines = gzip.decompress(MERGES_FILE.read_bytes()).decode("utf-8").splitlines()
    merges = [(a, b) for a, b in (line.split(" ") for line in lines[1:] if line)]  # line 0: "#version: 0.2"
    return vocab, merges


@lru_cache(maxsize=1)
def gpt2_tokenizer() -> BPETokenizer:
    """GPT-2's tokenizer: byte-level, no prefix space, <|endoftext|> one special token (id 50256).
    Shared by every checkpoint that falls back to it: the object is read-only."""
    vocab, merges = vocab_and_merges()
    tok = HFTokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(END_OF_TEXT, special=True)])
    return BPETokenizer(tok, "GPT-2's BPE (shipped with gptviz)")
