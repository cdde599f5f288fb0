"""Every bound gptviz puts on untrusted input, in one place.

A checkpoint is a few files a stranger wrote. Before anything is allocated, its config is held to
these sizes and its files to these byte counts, so a few kilobytes of edited JSON cannot make the
process allocate gigabytes. The model bounds are above the models people download for a laptop or a
workstation (Llama-3.1-8B: 32 layers, 4,096 wide, 128,256 tokens, 8 B parameters) and far below what
would exhaust a workstation. Raise them here if you really need a larger model.
"""

from __future__ import annotations

MiB = 2**20
GiB = 2**30

# --- model config: each field's upper bound, and the whole model's --------------------------------
MAX_CONFIG = {
    "vocab_size": 1_000_000,
    # The longest context a config may claim: a bound on the prompt, not an allocation (rotary models build
    # their tables and masks per prompt, learned positions are counted as parameters, a sinusoidal table is
    # held to MAX_POSITION_TABLE). Llama 3.x and Gemma 3 read 131,072, Qwen2.5-1M 1,010,000.
    "block_size": 10_485_760,
    "n_layer": 256,
    "n_head": 256,
    "n_embd": 12_288,  # GPT-3 175B's width: one such layer alone is 1.8 B parameters
}
# sizes of the other families' fields, 0 meaning "derived from the ones above" (gptviz/config.py)
MAX_DERIVED = {
    "n_kv_head": 256,  # at most n_head
    "head_size": 4_096,  # Gemma's 256 is the largest in use
    "n_inner": 65_536,  # the MLP's width: Llama 3 70B's is 28,672
    "sliding_window": 1_000_000,  # a window wider than block_size reads everything
    "rope_original_max": 10_000_000,  # llama3 rope scaling's original context (8,192 in Llama 3.1)
}
# A sinusoidal position table (block_size × n_embd, built in float64 and kept in float32) is a buffer the
# model holds whatever the prompt: 2^26 values is 16,384 positions at n_embd 4,096 (512 MB while built).
MAX_POSITION_TABLE = 2**26
# Llama-3.1-8B is 8.03 B (16 GB in bf16: a 24 GB laptop loads it in half precision); 20 B is 40 GB in
# bf16, a workstation's. Whether a model fits this machine is checked at load (devices.choose_dtype).
MAX_PARAMS = 20_000_000_000

# --- files, sized with stat before they are read --------------------------------------------------
MAX_JSON_BYTES = 1 * MiB  # config.json: a few KB in practice (a 256-layer layer_types list is 6 KB); parsed 4 times
MAX_LISTING_JSON_BYTES = 16 * MiB  # a weights index, a trainer's state: one entry per tensor or logged step
MAX_META_BYTES = 64 * MiB  # nanoGPT's meta.pkl: a character vocabulary
MAX_TOKENIZER_BYTES = 128 * MiB  # tokenizer.json, vocab.json, merges.txt: a few MB for 50k tokens
MAX_CORPUS_FILE_BYTES = 1 * GiB  # one file of a corpus scan (read whole, then tokenized): split a larger one

# --- torch zip checkpoints (ckpt.pt, pytorch_model.bin): what they unpack to ---------------------
# torch.save stores its entries uncompressed, so a real checkpoint unpacks to about its own size.
MAX_UNPACK_RATIO = 4  # refuse when the entries add up to more than this times the file's size ...
UNPACK_ALLOWANCE = 16 * MiB  # ... plus this (headers, a small pickle compressed by a re-zipping tool)
MAX_UNPACKED_BYTES = 32 * GiB  # and never more than this, whatever the file's size

# --- folder listings (a run folder, the checkpoints folder): what one listing reads at most --------
# A folder is listed entry by entry (names and kinds only, no stat) and the listing stops at either
# bound, saying so on the page. A listing is read once per change of the folder, never per rerun:
# 100,000 log files beside a run's checkpoints take about 0.3 s once.
MAX_LISTING_ENTRIES = 200_000
MAX_LISTING_SECONDS = 2.0
MAX_TIMELINE_STEPS = 100  # checkpoints a timeline scores; a longer run is thinned evenly, first and last kept

# --- tokenizers (gptviz/tokenizers/vet.py): a tokenizer.json is read as data and held to these ---
# A file's bytes against the model's vocabulary: real ones take 27 (GPT-2) to 126 (Gemma 3) bytes a
# token, so a 3M-entry file beside a 50k-token model is refused by its size, before it is parsed.
TOKENIZER_BYTES_PER_TOKEN = 256
TOKENIZER_BYTES_ALLOWANCE = 1 * MiB
MAX_MERGES_PER_TOKEN = 4  # Llama 3 lists 2.2 merges a token; GPT-2 one
MAX_TOKEN_CHARS = 512  # GPT-2's longest token is 128 characters
MAX_PATTERN_CHARS = 1_000  # a normalizer's or pre-tokenizer's regex: Llama 3's is 150
MAX_CONTENT_CHARS = 64  # what a Replace or Prepend step writes: a "▁" in practice
MAX_EXPANSION = 64  # bytes a step sequence may write per byte read (NFKC: 11; Llama's Replace: 3)
MAX_SPEC_ITEMS = 64  # steps in a Sequence, items in a post-processor template
# One call into `tokenizers` reads at most this many bytes times the tokenizer's expansion: about
# 150 bytes of memory go to each token the Rust side holds, so a call stays under ~40 MB.
MAX_ENCODE_UNITS = 250_000
MAX_PROMPT_CHARS = 100_000  # a prompt longer than this is refused before it is encoded ...
MAX_PROMPT_UNITS = 1_000_000  # ... and one whose bytes times the tokenizer's expansion pass this (~1 s)
