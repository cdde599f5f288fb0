"""Training TopK transcoders on the user's own model, one per layer, all layers at once.

As train_sae (training/sae.py, whose streaming this reuses): the corpus is read as token ids, a few
windows at a time run through the model up to the last layer's mlp.out, every chosen layer's mlp.in
and mlp.out rows go side by side into the shuffle buffer, and each minibatch trains every layer's
transcoder on its own pair. The last tenth of the windows is held out for the report.

    f     = relu of the k largest of (x_in @ W_enc.T + b_enc)
    loss  = Σ_l mean ‖out_l − (f @ W_dec + b_dec)‖²   (in training's units; + AuxK on dead features)

Each layer trains in units of order one (mlp.in divided by its RMS, mlp.out centred and divided by its
RMS: the loss is then the FVU), the scales folded back into the weights at the end; decoder rows are
kept at unit norm in those units after each step, as the TopK recipe does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ..checks import whole
from ..errors import GptvizError
from ..names import point
from ..progress import ProgressFn, Reporter
from ..training.sae import AUX_COEFF, DEAD_AFTER, held_and_stream
from .errors import TranscoderError
from .files import save_transcoders
from .sets import TranscoderSet
from .transcoder import Transcoder


@dataclass
class TranscoderReport:
    """What train_transcoders measured for one layer on the held-out windows (and how it ran)."""

    layer: int
    fvu: float  # Σ‖out − out_hat‖² / Σ‖out − mean out‖² on the true mlp.in (the NMSE fidelity reports)
    l0: float  # features firing per token
    dead: float  # share of features firing on no held-out token
    steps: int
    tokens: int
    seconds: float  # the whole run's wall time (all layers train together)
    cpu_seconds: float  # this process's CPU time over the same run (what a loaded machine's wall time hides)
    tokens_per_s: float
    engine: str = "local"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def sites_of(layers: Sequence[int]) -> str:
    """The comma-separated points the trainer streams: each layer's mlp.in, then its mlp.out."""
    return ",".join(point(site, l) for l in layers for site in ("mlp.in", "mlp.out"))


@dataclass
class _Units:
    """Per layer, the scales training works in: x_in / s_in -> (out − mu) / s_out, each of order one
    whatever the model's own units (an MLP whose output barely varies around a large mean trains as well
    as any), folded back into the weights once trained (fold)."""

    s_in: Tensor  # [L]: the RMS of mlp.in's entries
    mu: Tensor  # [L, C]: mlp.out's mean
    s_out: Tensor  # [L]: the RMS of mlp.out's entries around that mean

    @classmethod
    def of(cls, first: Tensor) -> _Units:
        x_in, out = first[:, :, 0], first[:, :, 1]  # [N, L, C] each
        mu = out.mean(0)
        rms = lambda t: t.pow(2).mean((0, 2)).sqrt().clamp_min(1e-8)  # noqa: E731
        return cls(rms(x_in), mu, rms(out - mu))

    def fold(self, tcs: list[Transcoder]) -> None:
        """The trained weights in the model's units: the same function of the raw mlp.in."""
        with torch.no_grad():
            for i, tc in enumerate(tcs):
                tc.W_enc.div_(self.s_in[i])
                tc.W_dec.mul_(self.s_out[i])
                tc.b_dec.mul_(self.s_out[i]).add_(self.mu[i])


def _init(tcs: list[Transcoder], seed: int) -> None:
    """Unit-norm random rows (pre-activations of order one on inputs of order one), zero biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tc in tcs:
            for w in (tc.W_dec, tc.W_enc):
                rows = torch.randn(tc.d_tc, tc.d_model, generator=g)
                w.copy_(rows / rows.norm(dim=-1, keepdim=True))
            tc.b_enc.zero_()
            tc.b_dec.zero_()


def _layer_loss(tc: Transcoder, x_in: Tensor, out: Tensor, dead: Tensor, k_aux: int):
    """(loss: squared error per model dimension, features that fired) of one layer on one minibatch in
    training's units (mean 0, variance 1 per entry: the loss is the FVU); sparse decode."""
    pre = tc.pre(x_in)  # [N, d_tc]
    top = torch.topk(pre, tc.k or 1, dim=-1)
    vals = top.values.relu()  # [N, k]
    out_hat = F.embedding_bag(top.indices, tc.W_dec, per_sample_weights=vals, mode="sum") + tc.b_dec
    err = out - out_hat
    loss = err.pow(2).mean()
    if k_aux and dead.any():  # AuxK: dead features learn to model what the live ones miss
        aux = torch.topk(pre.masked_fill(~dead, float("-inf")), min(k_aux, int(dead.sum())), dim=-1)
        e_hat = F.embedding_bag(aux.indices, tc.W_dec, per_sample_weights=aux.values.relu(), mode="sum")
        loss = loss + AUX_COEFF * torch.nan_to_num((err.detach() - e_hat).pow(2).mean())
    return loss, top.indices[vals > 0]


def _train(tcs: list[Transcoder], batches: Iterator[Tensor], total: int, lr: float, seed: int, progress, device):
    """Tokens seen, after `total` Adam steps of every layer's transcoder on the minibatches (in the
    units of _Units, folded back at the end)."""
    torch.manual_seed(seed)
    L, C = len(tcs), tcs[0].d_model
    first = next(batches).view(-1, L, 2, C).to(device)
    units = _Units.of(first)
    _init(tcs, seed)
    opt = torch.optim.Adam([p for tc in tcs for p in tc.parameters()], lr=lr)
    decay_from = int(total * 0.8)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 1.0 if s < decay_from else max(0.0, (total - s) / max(1, total - decay_from))
    )
    last = torch.zeros(L, tcs[0].d_tc, dtype=torch.long, device=device)
    k_aux, seen, x = max(1, C // 2), 0, first
    reporter = Reporter(progress, "steps", total)
    reporter.start()
    for step in range(total):
        if step:
            x = next(batches).view(-1, L, 2, C).to(device)
        x_in = x[:, :, 0] / units.s_in[:, None]  # [N, L, C]
        out = (x[:, :, 1] - units.mu) / units.s_out[:, None]
        loss = torch.zeros((), device=device)
        fired = []
        for i, tc in enumerate(tcs):
            part, f = _layer_loss(tc, x_in[:, i], out[:, i], (seen - last[i]) > DEAD_AFTER, k_aux)
            loss = loss + part
            fired.append(f)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        seen += len(x)
        with torch.no_grad():
            for i, tc in enumerate(tcs):
                tc.W_dec.div_(tc.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8))
                last[i, fired[i].unique()] = seen
        reporter.tick()
    units.fold(tcs)
    return seen


def train_transcoders(
    model,
    data,
    layers: Sequence[int] | None = None,
    width: int = 8,
    k: int = 32,
    steps: int | None = None,
    out=None,
    progress: ProgressFn | None = None,
    *,
    engine: str = "local",
    tokenizer=None,
    lr: float = 1e-3,
    seed: int = 0,
    device: str | None = None,
    threads: int | None = None,
    ray_address: str | None = None,
    ray_timeout: float | None = None,
) -> TranscoderSet:
    """Train one TopK transcoder per layer (d_tc = width × d_model, k features per token) reading
    blocks.{l}.mlp.in and writing blocks.{l}.mlp.out of `model` over the corpus `data` (what
    gptviz.scan reads). model: a GPT, a Bundle or a checkpoint path. layers: which (default: all).
    steps: Adam steps of 1,024 tokens (default: about 16 passes over a small corpus, at most 3,000).
    out: also write circuit-tracer's transcoder_set layout there. progress: a gptviz.Progress of
    "steps" after each step. engine: "local" or "ray" (the activations computed on Ray workers, as
    train_sae's). Each transcoder carries `report` (a TranscoderReport) measured on held-out windows."""
    from ..scanning import _model_and_tokenizer

    if engine not in ("local", "ray"):
        raise GptvizError(f"unknown engine {engine!r}; choose local or ray")
    threads = None if threads is None else whole(threads, "threads", low=1)
    source = model
    started, cpu_started = time.perf_counter(), time.process_time()
    model, tokenizer, checkpoint = _model_and_tokenizer(source, tokenizer, device)
    model.eval()
    n_layer, C = model.config.n_layer, model.config.n_embd
    chosen = list(range(n_layer)) if layers is None else sorted({whole(l, "layer", low=0) for l in layers})
    if not chosen or chosen[-1] >= n_layer:
        raise TranscoderError(f"layers must lie in 0 … {n_layer - 1}, got {list(layers or [])}")
    width, k = whole(width, "width", low=1, high=256), whole(k, "k", low=1)
    if k > width * C:
        raise TranscoderError(f"k={k} is more than the transcoder's {width * C} features")
    ray_args = {"ray_address": ray_address, "ray_timeout": ray_timeout, "device": device, "threads": threads}
    on_workers = checkpoint if isinstance(source, (str, Path)) else model
    sites, d_in = sites_of(chosen), 2 * len(chosen) * C
    held, total, batches = held_and_stream(
        model, tokenizer, data, sites, d_in, seed, steps, engine, on_workers, ray_args, "transcoders"
    )
    tcs = [Transcoder(C, width * C, l, "topk", k=k).to(model.device) for l in chosen]
    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        with contextlib.closing(batches):  # Ray is let go (or stopped) once the steps are done
            seen = _train(tcs, batches, total, lr, seed, progress, model.device)
    finally:
        torch.set_num_threads(before)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    tset = TranscoderSet([tc.requires_grad_(False) for tc in tcs])
    # measured on the held-out windows: each layer's FVU, L0 and dead share, and the replacement model's
    measured = tset.fidelity(model, [w.ids for w in held], max_tokens=1 << 30)
    for l in chosen:
        tset[l].report = TranscoderReport(
            l, measured["nmse"][l], measured["l0"][l], measured["dead"][l], steps=total, tokens=seen,
            seconds=round(seconds, 2), cpu_seconds=round(cpu, 2), tokens_per_s=round(seen / seconds, 1), engine=engine,
        )  # fmt: skip
    tset.meta = {
        "model_name": str(checkpoint) if checkpoint else "in-memory model",
        "gptviz_training": {
            "data": str(data) if not isinstance(data, list) else "a list",
            "width": width,
            "lr": lr,
            "seed": seed,
            "layers": {l: tset[l].report.to_dict() for l in chosen},
            "held_out_fidelity": measured,
        },
    }
    if out is not None:
        save_transcoders(tset, out)
        tset.path = str(out)
    return tset
