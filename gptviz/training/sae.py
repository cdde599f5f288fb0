"""Training a TopK SAE on the user's own model (docs/architecture.md, "Features"; OpenAI's TopK recipe).

Activations are streamed: the corpus is read as token ids (scanning's reader, the same windows as
a scan), a few windows at a time run through the model only up to the SAE's site (the forward pass
stops there), their real tokens' rows go into a small shuffle buffer, and the SAE trains on
minibatches drawn from it. Memory holds one buffer of activations, never the corpus's.

The last tenth of the windows (at least one) is held out: the report's fraction of variance
unexplained, L0, dead features and spliced loss are measured there, after training.

    x_hat = b_dec + Σ_{top k} relu(pre_i) W_dec[i],   pre = (x − b_dec) W_enc + b_enc
    loss  = ‖x − x_hat‖² + α · ‖e − ê‖²   (AuxK: the k_aux largest dead latents model the residual e)

Decoder rows are kept at unit norm (after each step), as the recipe does.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..capture import edited
from ..checks import whole
from ..errors import GptvizError
from ..features.activations import as_rows, from_rows, site_rows
from ..features.files import save_sae
from ..features.sae import SAE, SAEConfig
from ..features.sites import SAEError, contract_site, site_width
from ..progress import ProgressFn, Reporter
from ..scanning.corpus import Window, read_corpus

BUFFER_TOKENS = 16384  # activations held at once (the shuffle buffer): 12 MB at C = 192
BATCH = 1024  # tokens per SAE step
REUSE = 4  # SAE passes over each buffer: the model's forward pass costs more than an SAE step
WINDOWS_PER_PASS = 32  # windows per forward pass of the model
DEAD_AFTER = 100_000  # tokens without firing before a latent counts as dead (AuxK trains it)
AUX_COEFF = 1 / 32


def _site_rows(model, site: str, windows: Sequence[Window]) -> Tensor:
    """[N, d_in]: the site's value at every real token of these windows (site_rows)."""
    return site_rows(model, site, [w.ids for w in windows])


def _groups(windows: Sequence[Window], rng: np.random.Generator) -> Iterator[list[Window]]:
    """Endless groups of WINDOWS_PER_PASS windows, each epoch in a new random order, drawn as the
    epoch's first group is asked for (the shuffle buffer draws from the same generator)."""
    while True:
        order = rng.permutation(len(windows))
        for start in range(0, len(order), WINDOWS_PER_PASS):
            yield [windows[i] for i in order[start : start + WINDOWS_PER_PASS]]


def _minibatches(rows: Iterator[Tensor], rng: np.random.Generator) -> Generator[Tensor, None, None]:
    """Minibatches [BATCH, d_in] from groups' activations, through a shuffle buffer of BUFFER_TOKENS
    rows, each buffer used REUSE times, each time in a new order."""
    buffer: list[Tensor] = []
    held = 0
    for got in rows:
        buffer.append(got)
        held += len(got)
        if held < BUFFER_TOKENS:
            continue
        pool = torch.cat(buffer)
        n = len(pool) // BATCH * BATCH
        for _ in range(REUSE):
            shuffled = pool[torch.from_numpy(rng.permutation(len(pool)))]
            for i in range(0, n, BATCH):
                yield shuffled[i : i + BATCH]
        buffer, held = [shuffled[n:]], len(pool) - n


def stream(model, site: str, windows: Sequence[Window], seed: int) -> Generator[Tensor, None, None]:
    """Endless minibatches of shuffled activations, the model run here (the local engine)."""
    rng = np.random.default_rng(seed)
    return _minibatches((_site_rows(model, site, g) for g in _groups(windows, rng)), rng)


def plan(windows: Sequence[Window], seed: int, steps: int) -> list[list[Window]]:
    """The groups stream() runs through the model for `steps` minibatches, in its order: the same
    generators run on rows of no width (the draws depend only on how many rows there are)."""
    rng = np.random.default_rng(seed)
    taken: list[list[Window]] = []

    def rows() -> Iterator[Tensor]:
        for group in _groups(windows, rng):
            taken.append(group)
            yield torch.empty(sum(len(w.ids) for w in group), 0)

    for _ in itertools.islice(_minibatches(rows(), rng), steps):
        pass
    return taken


def ray_stream(
    source, site: str, d_in: int, windows: Sequence[Window], seed: int, steps: int, **ray_args
) -> Generator[Tensor, None, None]:
    """stream()'s first `steps` minibatches, the same ones in the same order, with the activations
    computed on Ray workers (scanning.ray_engine.site_activations) for exactly the groups they need
    (plan). source: a checkpoint path (each worker loads it) or a GPT (its weights go through the
    object store). Close it to let Ray go."""
    from ..scanning.ray_engine import site_activations

    groups = [[w.ids for w in g] for g in plan(windows, seed, steps)]
    on_workers = site_activations(source, site, d_in, groups, **ray_args)
    rng = np.random.default_rng(seed)

    def rows() -> Iterator[Tensor]:
        # the groups drawn again, as stream() draws them (its epochs' orders and the buffer's shuffles
        # come from one generator), each matched with the workers' rows of the same group
        for group, x in zip(_groups(windows, rng), on_workers):
            if len(x) != sum(len(w.ids) for w in group):
                raise RuntimeError("the Ray workers' activations are not those of the planned windows")
            yield torch.from_numpy(x.copy())

    try:
        yield from _minibatches(rows(), rng)
    finally:  # Ray let go (or stopped) as soon as the trainer closes this
        on_workers.close()


def _init(sae: SAE, sample: Tensor, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = torch.randn(sae.d_sae, sae.d_in, generator=g)
        sae.W_dec.copy_(w / w.norm(dim=-1, keepdim=True))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_enc.zero_()
        sae.b_dec.copy_(sample.mean(0))  # the data's centre: the recipe's geometric median, cheaply


def _topk_step(sae: SAE, x: Tensor, dead: Tensor, k_aux: int) -> tuple[Tensor, Tensor]:
    """(loss, indices of the latents that fired) of one minibatch; sparse decode (embedding_bag)."""
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc  # [N, d_sae]
    assert sae.k is not None  # SAE.__init__ refuses a topk SAE without k
    top = torch.topk(pre, sae.k, dim=-1)
    vals = top.values.relu()  # [N, k]
    x_hat = F.embedding_bag(top.indices, sae.W_dec, per_sample_weights=vals, mode="sum") + sae.b_dec  # [N, d_in]
    err = x - x_hat
    loss = err.pow(2).sum(-1).mean()
    if k_aux and dead.any():  # AuxK: dead latents learn to model what the live ones miss
        masked = pre.masked_fill(~dead, float("-inf"))
        aux = torch.topk(masked, min(k_aux, int(dead.sum())), dim=-1)
        e_hat = F.embedding_bag(aux.indices, sae.W_dec, per_sample_weights=aux.values.relu(), mode="sum")
        aux_loss = (err.detach() - e_hat).pow(2).sum(-1).mean()
        loss = loss + AUX_COEFF * torch.nan_to_num(aux_loss)
    return loss, top.indices[vals > 0]


@dataclass
class TrainReport:
    """What train_sae measured on the held-out windows (and how it ran)."""

    fvu: float  # fraction of variance unexplained: Σ‖x − x_hat‖² / Σ‖x − mean x‖²
    l0: float  # mean number of features firing per token
    dead: float  # share of features firing on no held-out token
    loss: float  # the model's mean next-token loss on those windows (nats)
    spliced_loss: float  # the same with the SAE's reconstruction in place of the site
    steps: int
    tokens: int  # training tokens seen
    seconds: float
    tokens_per_s: float
    engine: str = "local"

    @property
    def loss_increase(self) -> float:
        return self.spliced_loss - self.loss

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["loss_increase"] = self.loss_increase
        return d


@torch.no_grad()
def evaluate(model, sae: SAE, windows: Sequence[Window]) -> dict:
    """FVU, L0, dead share and the loss with and without the SAE spliced in, over these windows."""
    fired = torch.zeros(sae.d_sae, dtype=torch.bool)
    sq_err = total_var = 0.0
    n_tok = l0 = 0
    losses = {"loss": 0.0, "spliced_loss": 0.0}
    predicted = 0
    for start in range(0, len(windows), WINDOWS_PER_PASS):
        group = windows[start : start + WINDOWS_PER_PASS]
        x = _site_rows(model, sae.site, group)  # [N, d_in]
        x_hat, f = sae(x)
        sq_err += float((x - x_hat).pow(2).sum())
        total_var += float((x - x.mean(0)).pow(2).sum())
        n_tok += len(x)
        l0 += int((f > 0).sum())
        fired |= (f > 0).any(0).cpu()
        lengths = torch.tensor([len(w.ids) for w in group])
        T = int(lengths.max())
        idx = torch.zeros(len(group), T, dtype=torch.long)
        for b, w in enumerate(group):
            idx[b, : len(w.ids)] = torch.as_tensor(w.ids)
        idx = idx.to(model.device)
        splice = {
            sae.site: lambda out: from_rows(sae.reconstruct(as_rows(out, sae.site, True)).to(out.dtype), out, sae.site)
        }
        for key, hooks in (("loss", {}), ("spliced_loss", splice)):
            with edited(model, hooks):
                logits = model(idx)  # [B, T, V]
            for b, n in enumerate(lengths.tolist()):
                losses[key] += float(F.cross_entropy(logits[b, : n - 1].float(), idx[b, 1:n], reduction="sum"))
        predicted += int((lengths - 1).sum())
    return dict(
        fvu=sq_err / max(total_var, 1e-12),
        l0=l0 / max(n_tok, 1),
        dead=1.0 - float(fired.float().mean()),
        loss=losses["loss"] / predicted,
        spliced_loss=losses["spliced_loss"] / predicted,
    )


def held_and_stream(
    model, tokenizer, data, site: str, d_in: int, seed: int, steps, engine: str, on_workers, ray_args, what: str
):
    """(the held-out windows, the number of steps, the training minibatches) of a trainer: the corpus
    cut into windows, a tenth of them (at least one) held out, the rest streamed at `site` (d_in wide)
    on this machine or on Ray workers (on_workers: a checkpoint path or the model; ray_args: where)."""
    corpus = read_corpus(data, tokenizer, model.config.block_size, model.config.vocab_size)
    windows = corpus.windows
    if len(windows) < 2:
        raise SAEError(f"the corpus is too small to train {what}: it makes fewer than two windows")
    order = np.random.default_rng(seed).permutation(len(windows))
    n_eval = max(1, len(windows) // 10)
    held = [windows[i] for i in sorted(order[:n_eval])]
    train = [windows[i] for i in order[n_eval:]]
    total = whole(steps, "steps", low=1) if steps is not None else _steps_for(sum(len(w.ids) for w in train))
    if engine == "ray":
        return held, total, ray_stream(on_workers, site, d_in, train, seed, total, **ray_args)
    return held, total, stream(model, site, train, seed)


def _steps_for(tokens: int) -> int:
    """The default budget: about 16 passes over a small corpus, at most 3,000 steps (3 M tokens)."""
    return int(min(3000, max(200, math.ceil(16 * tokens / BATCH))))


def train_sae(
    model,
    data,
    site: str,
    width: int = 8,
    k: int = 32,
    steps: int | None = None,
    engine: str = "local",
    out=None,
    progress: ProgressFn | None = None,
    *,
    tokenizer=None,
    lr: float = 1e-3,
    seed: int = 0,
    device: str | None = None,
    threads: int | None = None,
    ray_address: str | None = None,
    ray_timeout: float | None = None,
) -> SAE:
    """Train a TopK SAE with d_sae = width × d_in and k features per token on `site` of `model`'s
    activations over the corpus `data` (what gptviz.scan reads: a .txt file, a folder, .jsonl,
    .parquet, a list of texts or of id lists). model: a GPT, a Bundle or a checkpoint path.
    steps: SAE steps of 1,024 tokens (default: about 16 passes over a small corpus, at most 3,000).
    out: also write it in SAELens's format there (with the report in cfg.json). progress: called
    with a gptviz.Progress of "steps" after each step (raise gptviz.Cancelled in it to stop).
    The returned SAE carries `report` (a TrainReport), measured on held-out windows.
    engine: "local" (the model runs here) or "ray" (it runs on Ray workers, as the scan's Ray engine
    does: the cluster ray_address or $RAY_ADDRESS names, else a Ray started here and stopped after;
    ray_timeout: seconds to wait for it). The SAE trains here on the same minibatches in the same
    order either way. threads: torch threads here, and of each Ray worker."""
    from ..scanning import _model_and_tokenizer

    if engine not in ("local", "ray"):
        raise GptvizError(f"unknown engine {engine!r}; choose local or ray")
    threads = None if threads is None else whole(threads, "threads", low=1)
    source = model
    started = time.perf_counter()
    model, tokenizer, checkpoint = _model_and_tokenizer(source, tokenizer, device)
    model.eval()
    site = contract_site(site)
    d_in = site_width(model, site)
    width, k = whole(width, "width", low=1, high=256), whole(k, "k", low=1)
    if k > width * d_in:
        raise SAEError(f"k={k} is more than the SAE's {width * d_in} features")
    ray_args = {"ray_address": ray_address, "ray_timeout": ray_timeout, "device": device, "threads": threads}
    on_workers = checkpoint if isinstance(source, (str, Path)) else model
    held, total, batches = held_and_stream(
        model, tokenizer, data, site, d_in, seed, steps, engine, on_workers, ray_args, "an SAE"
    )
    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        with contextlib.closing(batches):  # Ray is let go (or stopped) once the steps are done
            sae, seen = _steps(
                model, SAEConfig("topk", d_in, width * d_in, site, k=k), batches, total, lr, seed, progress
            )
    finally:
        torch.set_num_threads(before)
    sae.requires_grad_(False)
    train_seconds = time.perf_counter() - started
    measured = evaluate(model, sae, held)
    sae.report = TrainReport(
        **measured,
        steps=total,
        tokens=seen,
        seconds=round(train_seconds, 2),
        tokens_per_s=round(seen / train_seconds, 1),
        engine=engine,
    )
    sae.cfg.extra = {
        "metadata": {"model_name": str(checkpoint) if checkpoint else "in-memory model"},
        "gptviz_training": {**sae.report.to_dict(), "data": str(data) if not isinstance(data, list) else "a list"},
    }
    if out is not None:
        save_sae(sae, out)
        sae.path = str(out)
    return sae


def _steps(model, cfg: SAEConfig, batches: Iterator[Tensor], total: int, lr: float, seed: int, progress):
    """(the trained SAE, tokens seen): `total` Adam steps on the minibatches, the last fifth decaying."""
    torch.manual_seed(seed)
    sae = SAE(cfg).to(model.device)
    d_in = cfg.d_in
    first = next(batches)
    _init(sae, first, seed)
    opt = torch.optim.Adam(sae.parameters(), lr=lr, betas=(0.9, 0.999))
    decay_from = int(total * 0.8)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 1.0 if s < decay_from else max(0.0, (total - s) / max(1, total - decay_from))
    )
    last_fired = torch.zeros(sae.d_sae, dtype=torch.long, device=model.device)
    k_aux = max(1, d_in // 2)
    seen = 0
    x = first
    reporter = Reporter(progress, "steps", total)
    reporter.start()
    for step in range(total):
        if step:
            x = next(batches)
        x = x.to(model.device)
        dead = (seen - last_fired) > DEAD_AFTER
        loss, fired = _topk_step(sae, x, dead, k_aux)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            sae.W_dec.div_(sae.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8))
        seen += len(x)
        last_fired[fired.unique()] = seen
        reporter.tick()
    return sae, seen
