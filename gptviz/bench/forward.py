"""`python -m gptviz bench`: what capture costs, in time and memory, against a plain forward pass.

Everything is measured in one process on the same weights, runs interleaved so that a busy
machine slows every contender alike; times are medians, ratios are against the baseline of the
same run. With --peers, Hugging Face transformers runs the same weights (and TransformerLens
too, when installed). A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..capture import trace
from ..config import GPTConfig
from ..devices import resolve_device
from ..formats.hf_decoders import CONV1D
from ..model import GPT
from ..names import point
from ..record import Trace

if TYPE_CHECKING:  # optional peers, imported only when --peers asks for them
    import plotly.graph_objects as go
    from transformer_lens import HookedTransformer
    from transformers import GPT2LMHeadModel

GPT2_SMALL = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, activation="gelu_tanh")
TINY = dict(vocab_size=97, block_size=64, n_layer=2, n_head=2, n_embd=32, activation="gelu_tanh")


def rss_bytes() -> int:
    """Resident memory of this process now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Peak resident memory above the start of a `with` block, sampled every millisecond.
    (Large tensors are mmap'd and given back when freed, so RSS follows the tensors.)"""

    def _now(self) -> int:
        return rss_bytes()

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = self._now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, self._now())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._now())
        self.bytes = self.peak - self.start


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        f = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
    except (OSError, AttributeError, TypeError):  # not glibc 2.33+
        return None
    f.restype = _MallInfo2
    return f


def allocated_bytes() -> int | None:
    """Bytes malloc has handed out and not taken back (glibc's mallinfo2: heap blocks in use plus
    mmap'd blocks), or None where it is missing. Unlike RSS, it does not count freed memory the
    allocator keeps for later, which makes a peak depend on what ran before."""
    f = _mallinfo2()
    if f is None:
        return None
    info = f()
    return info.uordblks + info.hblkhd


class PeakAllocated(PeakRSS):
    """Peak allocated bytes above the start (allocated_bytes), sampled every millisecond; RSS where
    the C library cannot tell."""

    def _now(self) -> int:
        n = allocated_bytes()
        return rss_bytes() if n is None else n


# Hugging Face's names for the family's GPT-2-style activations
HF_GPT2_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


def to_hf_gpt2(model: GPT, attn_implementation: str = "eager", special_ids: bool = True) -> GPT2LMHeadModel:
    """The same weights in a Hugging Face GPT2LMHeadModel (its Conv1D stores W transposed).
    special_ids names the last id BOS and EOS, as GPT-2 does; without it the model has none."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.config
    hf = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=c.vocab_size,
            n_positions=c.block_size,
            n_embd=c.n_embd,
            n_layer=c.n_layer,
            n_head=c.n_head,
            activation_function=HF_GPT2_ACTIVATION[c.activation],
            tie_word_embeddings=c.tie_weights,
            layer_norm_epsilon=c.norm_eps,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=c.vocab_size - 1 if special_ids else None,
            eos_token_id=c.vocab_size - 1 if special_ids else None,
            attn_implementation=attn_implementation,
        )
    )
    state = {k: (v.t() if k.endswith(CONV1D) else v) for k, v in model.state_dict().items()}
    hf.load_state_dict(state, strict=False)  # HF's own causal-mask buffers are not in ours
    return hf.to(model.device).eval()


def contenders(model: GPT, peers: bool) -> tuple[dict[str, Callable], dict[str, str]]:
    """name -> function(ids [1, T]) returning something that holds what the run produced."""
    runs: dict[str, Callable] = {
        "gptviz plain": lambda idx: model(idx),
        "gptviz capture": lambda idx: trace(model, idx[0]),
    }
    notes = {}
    if peers:
        try:
            sdpa, eager = to_hf_gpt2(model, "sdpa"), to_hf_gpt2(model, "eager")
        except ImportError:
            notes["hf"] = "transformers is not installed: pip install transformers"
        else:
            runs["hf plain (sdpa)"] = lambda idx: sdpa(idx).logits
            runs["hf eager + attentions + hidden"] = lambda idx: eager(
                idx, output_attentions=True, output_hidden_states=True
            )
            tl = to_transformer_lens(sdpa)
            if isinstance(tl, str):
                notes["transformer_lens"] = tl
            else:
                runs["transformer_lens run_with_cache"] = lambda idx: tl.run_with_cache(idx)
    return runs, notes


def to_transformer_lens(hf: GPT2LMHeadModel) -> HookedTransformer | str:
    """The same weights in TransformerLens's HookedTransformer, converted by TransformerLens's own
    GPT-2 converter without folding or centring (its raw forward, as run_with_cache runs it);
    a string saying why not when it cannot be built."""
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
        from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
    except ImportError:
        return "TransformerLens 2.x/3.x (with HookedTransformer) is not installed; its rows are left out"
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer,
        d_model=c.n_embd,
        n_heads=c.n_head,
        d_head=c.n_embd // c.n_head,
        d_mlp=4 * c.n_embd,
        n_ctx=c.n_positions,
        d_vocab=c.vocab_size,
        act_fn="gelu_new",
        normalization_type="LN",
        eps=c.layer_norm_epsilon,
        positional_embedding_type="standard",
        default_prepend_bos=False,
        device=str(hf.device),
    )
    tl = HookedTransformer(cfg)
    tl.load_and_process_state_dict(
        convert_gpt2_weights(hf, cfg),
        fold_ln=False,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
    )
    return tl.eval()


def held_bytes(result: object) -> int:
    """Bytes a run's result keeps alive: a Trace says so itself; for HF outputs, count tensors."""
    if hasattr(result, "nbytes") and not isinstance(result, torch.Tensor):
        return result.nbytes
    tensors = []

    def walk(x: object) -> None:
        if isinstance(x, torch.Tensor):
            tensors.append(x)
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif hasattr(x, "values"):
            for y in x.values():
                walk(y)

    walk(result)
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def main_figures(t: Trace) -> dict[str, Callable[[], go.Figure]]:
    """Each dashboard page's main figure (its largest), built as the page builds it, for layer 0,
    head 0 and the last position: page -> function() returning the Plotly figure."""
    from .. import analysis, figures

    labels = figures.token_labels(t.tokens)
    last = t.n_tokens - 1
    return {
        "Overview: headline heatmap": lambda: figures.attention_heatmap(
            analysis.attention_matrix(t, 0, 0), labels, height=520
        ),
        "Attention: one head": lambda: figures.attention_heatmap(analysis.attention_matrix(t, 0, 0), labels),
        "Attention: heads of a layer": lambda: figures.head_grid(analysis.layer_weights(t, 0), labels, layer=0),
        "Attention: layer x head grid": lambda: figures.layer_head_grid(
            analysis.layer_weights(t, l) for l in range(t.n_layer)
        ),
        "Q / K / V: q of a head": lambda: figures.matrix_heatmap(
            t[point("attn.q", 0)][0], labels, title="q", value_name="q"
        ),
        "Shapes: flow": lambda: figures.shape_flow(analysis.shape_flow(t), analysis.dims(t)),
        "Residual stream: heatmap": lambda: figures.residual_heatmap(
            *analysis.residual_stat_grid(t, "norm"), labels, "norm"
        ),
        "Next token: per-token loss": lambda: figures.loss_bars(
            analysis.per_token_loss(t.tensor("logits"), t.token_ids), labels
        ),
        "Next token: top-k": lambda: figures.topk_bars(
            analysis.top_k(t.part("logits", last), 10), position_label=labels[last]
        ),
    }


def figure_payloads(t: Trace) -> list[dict]:
    """What each page's main figure sends to the browser (Streamlit sends plotly.io.to_json of the
    figure) and how long building it takes on the server."""
    import plotly.io

    rows = []
    for name, build in main_figures(t).items():
        t0 = time.perf_counter()
        payload = plotly.io.to_json(build(), validate=False)
        rows.append(dict(figure=name, bytes=len(payload.encode()), build_seconds=round(time.perf_counter() - t0, 4)))
    return rows


def measure_memory(f: Callable, idx: torch.Tensor, device: torch.device) -> tuple[int, int]:
    """(peak bytes while f runs, bytes its result holds). The peak is host RSS on the CPU and
    allocated memory on a CUDA GPU, above what was in use before."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
    with PeakRSS() as rss:
        result = f(idx)
        synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - start if device.type == "cuda" else rss.bytes
    return peak, held_bytes(result)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work: a GPU returns before it has computed anything."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@torch.no_grad()
def run_bench(config: dict, lengths: list[int], repeats: int, peers: bool, seed: int = 0, device: str = "cpu") -> dict:
    """Time and size every contender on a random-weight model of `config` at each prompt length:
    one row per (T, contender) with the median seconds, the ratio to the baseline, and the bytes
    held and at peak; plus what each page's main figure sends to the browser, and notes."""
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**config)).to(dev).eval()
    runs, notes = contenders(model, peers)
    rows, payloads = [], []
    for T in lengths:
        idx = torch.randint(0, model.config.vocab_size, (1, T), device=dev)
        times: dict[str, list[float]] = {name: [] for name in runs}
        memory = {}
        for name, f in runs.items():  # warm-up, and one measured pass for memory
            memory[name] = measure_memory(f, idx, dev)
        for _ in range(repeats):
            for name, f in runs.items():
                synchronize(dev)
                t0 = time.perf_counter()
                f(idx)
                synchronize(dev)
                times[name].append(time.perf_counter() - t0)
        base = "hf plain (sdpa)" if "hf plain (sdpa)" in runs else "gptviz plain"
        base_s = statistics.median(times[base])
        for name in runs:
            s = statistics.median(times[name])
            rows.append(
                dict(
                    T=T,
                    run=name,
                    seconds=round(s, 5),
                    ratio=round(s / base_s, 3),
                    baseline=base,
                    held_bytes=memory[name][1],
                    peak_bytes=memory[name][0],
                )
            )
        payloads += [dict(T=T, **p) for p in figure_payloads(trace(model, idx[0]))]
    idx = torch.randint(0, model.config.vocab_size, (1, min(lengths)), device=dev)
    if "hf plain (sdpa)" in runs:
        diff = (model(idx) - runs["hf plain (sdpa)"](idx)).abs().max().item()
        notes["hf_logits_max_abs_diff"] = f"{diff:.2e} (the same weights in both: a sanity check)"
    if "transformer_lens run_with_cache" in runs:
        diff = (model(idx) - runs["transformer_lens run_with_cache"](idx)[0]).abs().max().item()
        notes["transformer_lens_logits_max_abs_diff"] = f"{diff:.2e}"
    return dict(
        config=config,
        repeats=repeats,
        threads=torch.get_num_threads(),
        device=str(dev),
        torch=torch.__version__,
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        rows=rows,
        figures=payloads,
        notes=notes,
    )


def format_table(result: dict) -> str:
    """run_bench's result as the plain-text tables the command prints."""
    lines = [f"{'T':>5}  {'run':<32} {'seconds':>9} {'ratio':>7} {'held MB':>9} {'peak MB':>12}"]
    for r in result["rows"]:
        lines.append(
            f"{r['T']:>5}  {r['run']:<32} {r['seconds']:>9.4f} {r['ratio']:>6.2f}x "
            f"{r['held_bytes'] / 2**20:>9.1f} {r['peak_bytes'] / 2**20:>12.1f}"
        )
    base = result["rows"][0]["baseline"] if result["rows"] else ""
    lines.append(f"ratio: median time / median time of '{base}' at the same T, same run")
    peak = "allocated GPU memory" if result.get("device", "cpu").startswith("cuda") else "host RSS"
    lines.append(f"held: bytes the result keeps; peak: {peak} above the start while it runs")
    lines += ["", f"{'T':>5}  {'page: main figure':<32} {'sent KB':>9} {'build s':>8}"]
    for f in result["figures"]:
        lines.append(f"{f['T']:>5}  {f['figure']:<32} {f['bytes'] / 1024:>9.1f} {f['build_seconds']:>8.3f}")
    lines.append("sent: the figure as Streamlit sends it to the browser (plotly.io.to_json); build: on the server")
    lines += [f"note: {k}: {v}" for k, v in result["notes"].items()]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    """`python -m gptviz bench`: run, print the tables, and write the JSON when asked."""
    config = TINY if args.tiny else GPT2_SMALL
    lengths = (
        args.lengths if args.lengths else ([16, 32] if args.tiny else [64, 256, 1024])  # checked by cli_args
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run_bench(config, lengths, args.repeats, args.peers, device=args.device)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
