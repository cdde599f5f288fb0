"""Hugging Face decoder directories of every common family: GPT-2, Llama, Mistral, Qwen2/3, Gemma
1/2/3, GPT-NeoX (Pythia), GPT-Neo, Phi-3, OLMo 1/2/3 (SmolLM, TinyLlama, TinyStories ... as people
download them). Nothing is ever downloaded.

Two maps per family, both from its record in families.py: config.json -> GPTConfig (hf_config.py),
and Hugging Face's weight names -> ours (weight_map here). Separate
q/k/v (and gate/up) projections are stacked into our fused c_attn (c_fc, c_gate); GPT-NeoX's fused
qkv interleaves q, k and v per head and is regrouped; Phi-3's fused qkv and gate_up are split
where they need to be; GPT-2's Conv1D weights are transposed. Every such step is a function of
the source tensors that runs first on "meta" tensors (shapes only) so the whole model's shapes
are checked against the config, from the safetensors headers, before any weight is read or anything allocated.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch

from ..config import GPTConfig
from ..errors import CheckpointError, summarise
from ..limits import MAX_LISTING_JSON_BYTES, MAX_TOKENIZER_BYTES
from ..progress import ProgressFn, begin
from ..tokenizers import BPETokenizer
from .bundle import Bundle, LoadReport, check_shapes, compute_dtype, fill_model, finish
from .families import FAMILIES
from .family_record import Tensor, shown
from .hf_config import (  # noqa: F401 (importable from here, as before the records)
    ACTIVATIONS,
    DECODERS,
    KNOWN,
    MOE,
    ROPE_TYPES,
    config_from_hf_decoder,
    refuse_model_type,
)
from .hf_llama_export import save_hf_llama  # noqa: F401 (the other direction, also importable from here)
from .safe import check_file, read_json
from .stop import eos_token_ids
from .weights import Stacked, Weights

# the tables of each family (what it reads, what it refuses, where its weights live) are its record in
# families.py; config.json is read through it in hf_config.py
FAMILY_NOTES = {kind: family.note for kind, family in FAMILIES.items()}
# buffers some transformers versions saved beside the weights: masks and rotary tables, never weights
BUFFERS = re.compile(
    r".*\.(attn\.bias|attn\.masked_bias|attention\.bias|attention\.masked_bias|inv_freq|rotary_emb\..*)$"
)
SAFETENSORS, PT_BIN = "model.safetensors", "pytorch_model.bin"
# GPT-2's Conv1D weights (stored [in, out], the transpose of nn.Linear's): families.py conv1d turns them
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def is_hf(path: Path) -> bool:
    """A directory with a Hugging Face config.json (any model type; the loader says if it is not GPT-2)."""
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file()):
        return False
    try:
        return "gptviz_format" not in read_json(cfg)
    except CheckpointError:
        return True  # unreadable or too large: let the loader name the problem


def hf_tokenizer(
    path: Path, vocab_size: int | None = None, context: int | None = None
) -> tuple[BPETokenizer | None, str]:
    """The tokenizer in an HF directory, and a note when there is none. Files are sized before read
    and checked against a model of vocab_size ids before the library builds them."""
    if (path / "tokenizer.json").exists():
        check_file(path / "tokenizer.json", MAX_TOKENIZER_BYTES, "tokenizer file")
        return BPETokenizer.from_file(path / "tokenizer.json", vocab_size=vocab_size, context=context), ""
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if vocab.exists() and merges.exists():
        check_file(vocab, MAX_TOKENIZER_BYTES, "tokenizer file")
        check_file(merges, MAX_TOKENIZER_BYTES, "tokenizer file")
        return BPETokenizer.from_vocab_merges(vocab, merges, vocab_size), ""
    if vocab.is_file() or merges.is_file():
        have, lack = (vocab, merges) if vocab.is_file() else (merges, vocab)
        return (
            None,
            f"no tokenizer: {have.name} is there but {lack.name} is missing, so text input is off; give token ids",
        )
    return None, (
        "no tokenizer: the directory has neither tokenizer.json nor vocab.json + merges.txt, "
        "so text input is off; give token ids"
    )


# --- weight names: Hugging Face -> ours ---------------------------------------------------------
@dataclass(frozen=True)
class Part:
    """One of our tensors, made from Hugging Face tensors by fn (cat, split, regroup)."""

    sources: tuple[str, ...]
    fn: Callable[..., torch.Tensor]


def _one(t: torch.Tensor) -> torch.Tensor:
    return t


def _cat(*ts: torch.Tensor) -> torch.Tensor:
    if ts and all(t.is_meta for t in ts):  # plan()'s shape check: torch's own meta cat imports its compiler
        rest = {tuple(t.shape[1:]) for t in ts}  # stack (sympy, dynamo: 72 MB of a 1B model's load peak)
        if len(rest) != 1 or ts[0].dim() == 0 or len({t.dtype for t in ts}) != 1:
            raise RuntimeError(f"cannot stack shapes {[list(t.shape) for t in ts]} along dimension 0")
        return torch.empty((sum(t.shape[0] for t in ts), *ts[0].shape[1:]), dtype=ts[0].dtype, device="meta")
    return torch.cat(ts, dim=0)


def weight_map(config: GPTConfig, kind: str, keys: set[str]) -> dict[str, Part]:
    """Our state-dict key -> how to build it from the file's keys (after their prefix is settled), from
    the family's layout: several sources are stacked, a fuse rule regroups, splits or transposes."""
    layout = FAMILIES[kind].layout
    parts: dict[str, Part] = {}

    def add(ours: str, theirs: tuple[str, ...], fn: Callable[..., torch.Tensor]) -> None:
        old = parts.get(ours)  # where a family has two names for one tensor, the one the file holds wins
        if old is None or (not all(s in keys for s in old.sources) and all(s in keys for s in theirs)):
            parts[ours] = Part(theirs, fn)

    def tensors(ours: str, theirs: str, entries: tuple[Tensor, ...]) -> None:
        for e in entries:
            plain = _one if len(e.theirs) == 1 else _cat
            fused = e.fuse(config) if e.fuse is not None else plain
            for p in ("weight", "bias"):  # those the file lacks are dropped by plan()
                fn = fused if p == "weight" or e.bias_too else plain
                add(f"{ours}{e.ours}.{p}", tuple(f"{theirs}{t}.{p}" for t in e.theirs), fn)

    tensors("", "", layout.outer)
    for i in range(config.n_layer):
        tensors(f"transformer.h.{i}.", layout.layer.format(i=i) + ".", layout.block)
    return parts


def canonical_names(keys: set[str], kind: str) -> dict[str, str]:
    """The file's keys as the ForCausalLM model spells them -> the file's own spelling. A file saved
    from the bare model (LlamaModel, GPTNeoXModel) lacks the `model.` (`gpt_neox.`, `transformer.`)
    prefix."""
    prefix = FAMILIES[kind].layout.prefix
    heads = ("lm_head.", "embed_out.")
    out = {}
    for k in keys:
        out[k if k.startswith((prefix, *heads)) else prefix + k] = k
    return out


def _layers_held(names: dict[str, str], kind: str) -> int:
    """How many layers the file's weights hold, by the family's layer names."""
    pattern = re.compile(re.escape(FAMILIES[kind].layout.layer).replace(r"\{i\}", r"(\d+)") + r"\.")
    found = [int(m.group(1)) for k in names if (m := pattern.match(k))]
    return max(found) + 1 if found else 0


# --- the files: single, sharded, safetensors or torch -------------------------------------------
def weight_files(path: Path) -> list[Path]:
    """The weight files of a directory: model.safetensors, pytorch_model.bin, or the shards an index
    names (each a plain file name in this folder, no path leading elsewhere)."""
    for name in (SAFETENSORS, PT_BIN):
        if (path / name).exists():
            return [path / name]
    for index_name in INDEXES:
        index = path / index_name
        if not index.exists():
            continue
        weight_map_ = read_json(index, "weights index", MAX_LISTING_JSON_BYTES).get("weight_map")
        if not isinstance(weight_map_, dict) or not weight_map_:
            raise CheckpointError(f"{index}: no 'weight_map' object naming the shard of each tensor")
        names = sorted(set(weight_map_.values()) if all(isinstance(v, str) for v in weight_map_.values()) else [])
        if not names:
            raise CheckpointError(f"{index}: the weight_map must name a shard file for each tensor")
        files = []
        for name in names:
            if Path(name).name != name or name in (".", "..") or "\\" in name:
                raise CheckpointError(f"{index}: shard {shown(name)} is not a file name in this folder")
            file = path / name
            if not file.is_file():
                raise CheckpointError(f"{file}: file not found; {index.name} names it as a shard")
            files.append(file)
        return files
    raise CheckpointError(f"{path}: no {SAFETENSORS} or {PT_BIN} beside config.json, nor a sharded weights index")


def used_sources(parts: dict[str, Part]) -> set[str]:
    return {s for part in parts.values() for s in part.sources}


def fill_order(parts: dict[str, Part], weights: Weights) -> Iterator[tuple[str, Callable[[], torch.Tensor]]]:
    """Our keys and how to make each from the file's tensors, for fill_model: a tensor that is the file's
    own or several stacked (q, k, v) as Stacked, which fill_model writes straight into the parameter. A
    tensor that feeds two of ours (Phi-3's gate_up_proj: gate and up) is read once and let go after its last use."""
    left = Counter(s for part in parts.values() for s in part.sources)
    read: dict[str, torch.Tensor] = {}

    def take(name: str) -> torch.Tensor:
        if name not in read:
            read[name] = weights.get(name)
        left[name] -= 1
        return read[name] if left[name] else read.pop(name)

    def make(part: Part) -> torch.Tensor:
        return part.fn(*(take(s) for s in part.sources))

    for ours, part in parts.items():
        alone = all(left[s] == 1 for s in part.sources)  # read for this tensor only
        stacked = alone and part.fn in (_one, _cat) and all(weights.shapes[s] for s in part.sources)
        yield ours, Stacked(weights, part.sources) if stacked else partial(make, part)


def plan(config: GPTConfig, kind: str, weights: Weights, source: Path, report: LoadReport) -> dict[str, Part]:
    """The map from the file's names to ours, checked against the config by shape alone (meta tensors)."""
    keys = {k for k in weights.shapes if not BUFFERS.match(k)}
    names = canonical_names(keys, kind)
    held = _layers_held(names, kind)
    if held > config.n_layer:  # the layers past n_layer would be dropped and the model cut short
        raise CheckpointError(
            f"{source}: the weights hold {held} layers but the config says n_layer={config.n_layer}; "
            f"loading them would cut the model short, so set n_layer to {held}"
        )
    order = {k: i for i, k in enumerate(weights.shapes)}  # the file's own order: its first misfit is named
    parts: dict[str, Part] = {}
    used: set[str] = set()
    mapped = weight_map(config, kind, set(names)).items()
    for ours, part in sorted(mapped, key=lambda item: min(order.get(names.get(s, ""), 0) for s in item[1].sources)):
        if all(s in names for s in part.sources):
            parts[ours] = Part(tuple(names[s] for s in part.sources), part.fn)
            used.update(parts[ours].sources)
    shapes = {}
    for ours, part in parts.items():
        try:
            meta = part.fn(*(torch.empty(weights.shapes[s], device="meta") for s in part.sources))
        except RuntimeError as e:  # sources that cannot be stacked: their shapes disagree
            raise CheckpointError(
                f"{source}: {', '.join(part.sources)} cannot form {ours} ({str(e).splitlines()[0][:120]}); "
                "the config does not describe these weights"
            ) from None
        shapes[ours] = tuple(meta.shape)
    check_shapes(config, shapes, report, source)
    extra = sorted(set(shapes) - set(config.state_shapes()))
    if extra:  # a bias the config says is not there would be dropped, and the model silently wrong
        raise CheckpointError(
            f"{source}: the weights hold {summarise(extra, 'tensors')} that the config does not describe "
            "(e.g. a bias where config.json says there is none)"
        )
    report.unexpected = sorted(keys - used)
    return parts


# --- the tokenizer ------------------------------------------------------------------------------
def decoder_tokenizer(path: Path, vocab_size: int, context: int | None = None) -> tuple[BPETokenizer | None, str]:
    """tokenizer.json through the `tokenizers` library, its post-processor (a BOS) included; else
    GPT-2's vocab.json + merges.txt, or a note saying what is missing."""
    file = path / "tokenizer.json"
    if not file.exists():
        tokenizer, note = hf_tokenizer(path, vocab_size, context)
        if tokenizer is None:
            return None, note
    else:
        check_file(file, MAX_TOKENIZER_BYTES, "tokenizer file")
        tokenizer = BPETokenizer.from_file(file, special_tokens=True, vocab_size=vocab_size, context=context)
    if tokenizer.vocab_size > vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {vocab_size} ids"
        )
    return tokenizer, ""


def load_hf_decoder(
    path: Path, device: torch.device, dtype: str = "auto", progress: ProgressFn | None = None
) -> Bundle:
    """A Hugging Face directory of any family in families.py: config.json, weights, tokenizer."""
    cfg_file = path / "config.json"
    hf = read_json(cfg_file)
    kind = hf.get("model_type")
    config, notes = config_from_hf_decoder(hf, cfg_file)
    assert isinstance(kind, str)  # config_from_hf_decoder refused any model_type but a known name
    config = replace(config, eos_token_id=eos_token_ids(hf, path, config.vocab_size))
    report = LoadReport(path=str(path), format=f"hf-{kind}")
    report.warnings.extend(notes)
    files = weight_files(path)
    begin(progress, f"reading the headers of {len(files)} weight file{'s' if len(files) > 1 else ''}")
    weights = Weights(files)
    source = files[0] if len(files) == 1 else path
    if config.tie_weights and any(k.endswith(("lm_head.weight", "embed_out.weight")) for k in weights.shapes):
        # Hugging Face keeps a head the file holds apart from the embedding, tie_word_embeddings or not
        config = replace(config, tie_weights=False)
        report.warnings.append("the weights hold their own lm_head although tie_word_embeddings is set: read untied")
    parts = plan(config, kind, weights, source, report)
    report.format = f"hf-{kind} ({files[0].name if len(files) == 1 else f'{len(files)} shards'})"
    begin(progress, "reading the tokenizer")  # a 128k vocabulary is checked as data first: a second or two
    tokenizer, note = decoder_tokenizer(path, config.vocab_size, config.block_size)
    dtype_ = compute_dtype(weights.floating_dtypes(used_sources(parts)), dtype, config, device, report)
    model = fill_model(config, fill_order(parts, weights), dtype_, device, report, source, progress)
    report.reshaped = sorted(k for k, p in parts.items() if len(p.sources) > 1 or p.fn is not _one)
    if tokenizer is not None:
        report.tokenizer = tokenizer.kind
    else:
        report.warnings.append(note)
    # a card gptviz wrote beside Hugging Face's keys (formats/hf_llama_export.py): how it was made, its prompt
    written = hf.get("card")
    written = written if isinstance(written, dict) else {}
    card = {**written, "source": f"Hugging Face {kind} directory", "family": FAMILY_NOTES[kind]}
    if isinstance(hf.get("_name_or_path"), str) and hf["_name_or_path"]:
        card["name_or_path"] = hf["_name_or_path"][:200]
    if report.unexpected:
        report.warnings.append(f"ignored {summarise(report.unexpected, 'tensors')}")
    return Bundle(finish(model, report, device), tokenizer, report, card)
