"""nanoGPT checkpoints: the `ckpt.pt` that nanoGPT's train.py writes, and its `meta.pkl` vocabulary.

train.py saves one dict: `model` (the state dict, keys prefixed `_orig_mod.` when the model was
wrapped by torch.compile), `model_args` (n_layer, n_head, n_embd, block_size, bias, vocab_size,
dropout), `optimizer`, `iter_num`, `best_val_loss` and `config`. nanoGPT's model is our family
with exact GELU, learned positions, LayerNorm (eps 1e-5, bias optional) and a tied LM head, and
its module names are ours, so the state dict copies name for name.

Both files are pickles, so both are untrusted: the checkpoint goes through
`torch.load(weights_only=True)`, which rebuilds tensors and plain containers only, and meta.pkl
through `safe_unpickle`, which refuses every class or function a pickle names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import GPTConfig
from ..errors import CheckpointError, ConfigError, summarise
from ..progress import ProgressFn, begin
from ..tokenizers import CharTokenizer, Tokenizer, gpt2
from ..tokenizers.vet import VocabularyTooLarge
from .bundle import Bundle, LoadReport, check_shapes, compute_dtype, fill_from_state, finish
from .hf_decoders import hf_tokenizer
from .safe import safe_unpickle, shapes_of, state_dict, torch_load, torch_load_mapped
from .weights import Weights

CKPT_NAME = "ckpt.pt"
META_NAME = "meta.pkl"
SUFFIXES = (".pt", ".pth", ".ckpt")
PREFIX = "_orig_mod."  # added by torch.compile
MODEL_ARGS = {"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout"}


def vocab_from_meta(path: Path, vocab_size: int) -> CharTokenizer:
    """The character tokenizer nanoGPT's prepare.py stores in meta.pkl ({vocab_size, itos, stoi})."""
    meta = safe_unpickle(path)
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or not itos:
        raise CheckpointError(f"{path}: expected nanoGPT's meta.pkl, a dict with an 'itos' id -> character map")
    n = len(itos)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in itos):
        raise CheckpointError(f"{path}: 'itos' must map the ids 0..{n - 1} to single characters")
    if sorted(itos) != list(range(n)) or not all(isinstance(c, str) and len(c) == 1 for c in itos.values()):
        raise CheckpointError(f"{path}: 'itos' must map the ids 0..{n - 1} to single characters")
    if n > vocab_size:
        raise CheckpointError(f"{path}: the vocabulary has {n} characters but the model only {vocab_size} ids")
    try:
        return CharTokenizer([itos[i] for i in range(n)])
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None


# --- detection and loading ---------------------------------------------------------------------
def ckpt_file(path: Path) -> Path | None:
    if path.suffix in SUFFIXES and not path.is_dir():  # a FIFO or device too: torch_load says it is no file
        return path
    if path.is_dir() and (path / CKPT_NAME).is_file() and not (path / "config.json").exists():
        return path / CKPT_NAME
    return None


def is_nanogpt(path: Path) -> bool:
    """A .pt/.pth/.ckpt file, or a directory holding ckpt.pt (the content is checked on load)."""
    return ckpt_file(path) is not None


def recorded_iter_num(path: Path) -> int | None:
    """The iter_num nanoGPT's train.py wrote into the checkpoint (path: the file or its folder), or None
    when it has none or cannot be read (the loader will say why). Through the same safe torch.load as
    a load (weights_only, sized first), with the tensors memory-mapped, not read: the pickle's cost."""
    file = ckpt_file(path) or path
    try:
        ckpt = torch_load(file, mmap=True)
    except CheckpointError:
        return None
    n = ckpt.get("iter_num") if isinstance(ckpt, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def config_from_args(args: dict, source: Path) -> GPTConfig:
    missing = sorted({"n_layer", "n_head", "n_embd", "block_size", "vocab_size"} - set(args))
    if missing:
        raise CheckpointError(f"{source}: model_args lacks {', '.join(missing)}")
    extra = sorted(str(k)[:40] for k in set(args) - MODEL_ARGS - {"use_rmsnorm"})
    if extra:
        raise CheckpointError(
            f"{source}: model_args has fields nanoGPT's model does not ({summarise(extra, 'fields')}); "
            "a modified model cannot be loaded as nanoGPT's without changing what it computes"
        )
    rms = args.get("use_rmsnorm", False)
    if not isinstance(rms, bool):
        raise CheckpointError(f"{source}: model_args do not describe a valid model (use_rmsnorm must be true or false)")
    try:
        return GPTConfig(
            vocab_size=args["vocab_size"],
            block_size=args["block_size"],
            n_layer=args["n_layer"],
            n_head=args["n_head"],
            n_embd=args["n_embd"],
            dropout=args.get("dropout", 0.0),  # checked by GPTConfig: bool("no") would be True
            bias=args.get("bias", True),
            pos_encoding="learned",
            norm="rmsnorm" if rms else "layernorm",
            activation="gelu",  # nanoGPT's MLP uses nn.GELU(), the exact form
            tie_weights=True,  # nanoGPT always ties lm_head to wte
            norm_eps=1e-5,
        )
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{source}: model_args do not describe a valid model ({e})") from None


def strip_prefix(state: dict) -> tuple[dict, bool]:
    """The state dict without torch.compile's `_orig_mod.` prefix, and whether it had one."""
    had = any(k.startswith(PREFIX) for k in state)
    return {k.removeprefix(PREFIX): v for k, v in state.items()}, had


def nanogpt_tokenizer(file: Path, vocab_size: int, meta: Path | None = None) -> tuple[Tokenizer | None, str]:
    """The tokenizer of a nanoGPT checkpoint, and a note for the load report (empty when none is due).

    In order: meta.pkl (the one given, else the one beside the file); a tokenizer beside it
    (tokenizer.json, or vocab.json + merges.txt); GPT-2's BPE, shipped with gptviz, when the
    vocabulary is GPT-2's (50,257, or 50,304 padded), as nanoGPT's sample.py falls back to it;
    else none, and the note says what to put beside the checkpoint."""
    meta_path = meta or file.parent / META_NAME
    if meta_path.is_file():
        return vocab_from_meta(meta_path, vocab_size), ""
    if meta is not None:
        raise CheckpointError(f"{meta}: no such file")
    try:
        beside, _ = hf_tokenizer(file.parent, vocab_size)
        count = beside.vocab_size if beside is not None else 0
    except VocabularyTooLarge as e:  # counted before the library built it
        beside, count = None, e.count
    if count > vocab_size:
        raise CheckpointError(
            f"{file.parent}: the tokenizer beside {file.name} has {count} tokens but the model only {vocab_size} ids"
        )
    if beside is not None:
        return beside, ""
    if vocab_size in gpt2.VOCAB_SIZES and gpt2.available():
        return gpt2.gpt2_tokenizer(), (
            f"tokenizer: GPT-2's BPE, as nanoGPT's sample.py assumes: there is no {META_NAME} beside {file.name} "
            f"and the vocabulary is GPT-2's ({vocab_size:,}); put the right tokenizer beside it if it is another"
        )
    return None, (
        f"no tokenizer: there is no {META_NAME} beside {file.name}, so text input is off; give token ids, or put "
        "beside the checkpoint nanoGPT's meta.pkl from data/<dataset>/, or the tokenizer it was trained with "
        "(tokenizer.json, or vocab.json + merges.txt)"
    )


def checked_ckpt(ckpt: object, file: Path) -> tuple[dict, GPTConfig, dict[str, torch.Tensor], bool]:
    """train.py's checkpoint dict, its config, and its model's state (torch.compile's prefix and
    nanoGPT's mask buffers removed); whether the prefix was there."""
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        got = (
            f"a dict with keys {', '.join(map(str, list(ckpt)[:6]))}" if isinstance(ckpt, dict) else type(ckpt).__name__
        )
        raise CheckpointError(
            f"{file}: not a nanoGPT checkpoint: expected train.py's dict with 'model' and 'model_args', found {got}"
        )
    state_dict(ckpt["model"], file, "'model'")
    if not isinstance(ckpt["model_args"], dict):
        raise CheckpointError(f"{file}: 'model_args' is not a dict")
    config = config_from_args(ckpt["model_args"], file)
    state, compiled = strip_prefix(ckpt["model"])
    # nanoGPT's slow attention path registers its causal mask as the buffer attn.bias; ours is built in
    state = {k: v for k, v in state.items() if not (k.endswith(".attn.bias") and v.dim() == 4)}
    return ckpt, config, state, compiled


def load_nanogpt(
    path: Path,
    device: torch.device,
    dtype: str = "auto",
    meta: Path | None = None,
    progress: ProgressFn | None = None,
) -> Bundle:
    """Load nanoGPT's ckpt.pt (path: the file or its directory); meta: a meta.pkl other than the one beside it."""
    file = ckpt_file(path) or path
    report = LoadReport(path=str(path), format="nanogpt")
    # first with its tensors mapped, not read: the shapes are checked against model_args before the
    # weights (and the optimizer's state beside them) are allocated; then read, as a file rewritten
    # under a mapping by a training run would crash the server
    begin(progress, f"reading {file.name}")
    raw, mapped = torch_load_mapped(file)
    ckpt, config, state, compiled = checked_ckpt(raw, file)
    check_shapes(config, shapes_of(state), report, file)
    if mapped:
        del raw, ckpt, state
        ckpt, config, state, compiled = checked_ckpt(torch_load(file), file)
    stored = Weights.of_state(state, file).floating_dtypes()
    dtype_ = compute_dtype(stored, dtype, config, device, report)
    ckpt.pop("model", None), ckpt.pop("optimizer", None)  # their tensors go as each is filled, not at the end
    # the shapes (and layer count) checked again on what was read; each tensor let go once filled
    model = fill_from_state(config, state, dtype_, device, report, file, progress)

    tokenizer, note = nanogpt_tokenizer(file, config.vocab_size, meta)
    if tokenizer is not None:
        report.tokenizer = tokenizer.kind
    if note:
        report.warnings.append(note)
    iter_num = ckpt.get("iter_num")
    card = {"source": "nanoGPT train.py", "iter_num": iter_num if isinstance(iter_num, int) else None}
    if compiled:
        card["key_prefix"] = f"{PREFIX} (torch.compile), removed on load"
    best = ckpt.get("best_val_loss")
    if isinstance(best, torch.Tensor) and best.numel() == 1:
        best = best.item()
    if isinstance(best, (int, float)) and not isinstance(best, bool):
        card["best_val_loss"] = round(float(best), 4)
    cfg = ckpt.get("config")
    if isinstance(cfg, dict) and isinstance(cfg.get("dataset"), str):
        card["dataset"] = cfg["dataset"][:200]
    return Bundle(finish(model, report, device), tokenizer, report, card)
