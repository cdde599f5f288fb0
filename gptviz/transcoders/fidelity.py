"""Fidelity first: how well the replacement model stands in for the real one, before any graph is
drawn from it. The replacement model is the model with every MLP that has a transcoder replaced by
it, all at once (each transcoder reading the replacement model's own mlp.in), so errors compound as
they would in a graph built without error nodes.

    top1_agreement   share of predicted tokens where both models' most likely next token agree
    kl               KL(model ‖ replacement) in nats per token
    nmse             per layer: Σ‖mlp.out − tc(mlp.in)‖² / Σ‖mlp.out − mean‖², on the real model's mlp.in
    dead             per layer: share of features that fire on no token of the data
    l0               per layer: features firing per token
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..capture import edited
from ..interventions import seen
from ..names import point
from .errors import TranscoderError

WINDOWS_PER_PASS = 16
POOR_AGREEMENT = 0.8  # below it, a graph of the replacement model explains another model than yours
POOR_NMSE = 0.3


def _padded(windows) -> tuple[Tensor, Tensor]:
    """([B, T] ids, [B, T] bool: real tokens) of a group of windows."""
    T = max(len(w.ids) for w in windows)
    idx = torch.zeros(len(windows), T, dtype=torch.long)
    real = torch.zeros(len(windows), T, dtype=torch.bool)
    for b, w in enumerate(windows):
        idx[b, : len(w.ids)] = torch.as_tensor(w.ids)
        real[b, : len(w.ids)] = True
    return idx, real


def _replace(tc):
    """mlp.out -> the transcoder's estimate from this pass's own mlp.in."""

    def fn(out: Tensor) -> Tensor:
        return tc(seen(tc.input_site).float())[0].to(out.dtype)

    return fn


def _record(tcs, held: dict):
    def keeper(name: str):
        def keep(out: Tensor) -> None:
            held[name] = out.detach()

        return keep

    return {p: keeper(p) for l in tcs.layers for p in (point("mlp.in", l), point("mlp.out", l))}


@torch.no_grad()
def fidelity(tcs, model, data, *, tokenizer=None, max_tokens: int = 16384) -> dict:
    """The replacement model's fidelity over the corpus `data` (what gptviz.scan reads; its first
    `max_tokens` tokens): top1_agreement, kl (nats / token), loss and replacement_loss (nats / token),
    nmse, dead and l0 per layer, tokens, and `warning` (a sentence, or None) when agreement is poor."""
    from ..scanning import _model_and_tokenizer
    from ..scanning.corpus import read_corpus

    model, tokenizer, _ = _model_and_tokenizer(model, tokenizer, None)
    tcs.check_fits(model)
    corpus = read_corpus(data, tokenizer, model.config.block_size, model.config.vocab_size)
    windows, taken = [], 0
    for w in corpus.windows:
        if taken >= max_tokens:
            break
        windows.append(w)
        taken += len(w.ids)
    layers, dev = tcs.layers, model.device
    err = dict.fromkeys(layers, 0.0)
    sq = dict.fromkeys(layers, 0.0)
    total = {l: torch.zeros(tcs.d_model, dtype=torch.float64) for l in layers}
    fired = {l: torch.zeros(tcs[l].d_tc, dtype=torch.bool) for l in layers}
    l0 = dict.fromkeys(layers, 0)
    n_tok = agree = 0
    kl = loss = rep_loss = 0.0
    replace = {point("mlp.out", l): _replace(tcs[l]) for l in layers}
    reads = [point("mlp.in", l) for l in layers]
    for start in range(0, len(windows), WINDOWS_PER_PASS):
        idx, real = _padded(windows[start : start + WINDOWS_PER_PASS])
        idx, real = idx.to(dev), real.to(dev)
        held: dict[str, Tensor] = {}
        with edited(model, _record(tcs, held)):
            logits = model(idx).float()  # [B, T, V]
        with edited(model, replace, reads):
            rep = model(idx).float()
        pred = real[:, 1:]  # positions whose next token is in the window
        logp, logq = F.log_softmax(logits, -1), F.log_softmax(rep, -1)
        kl += float((logp.exp() * (logp - logq)).sum(-1)[real].sum())
        agree += int((logits.argmax(-1) == rep.argmax(-1))[real].sum())
        n_tok += int(real.sum())
        target = idx[:, 1:]
        for acc, lp in (("loss", logp), ("rep", logq)):
            nll = -lp[:, :-1].gather(-1, target[..., None])[..., 0][pred].sum()
            if acc == "loss":
                loss += float(nll)
            else:
                rep_loss += float(nll)
        for l in layers:
            x_in, out = held[point("mlp.in", l)][real].float(), held[point("mlp.out", l)][real].float()
            out_hat, f = tcs[l](x_in)
            err[l] += float((out - out_hat).double().pow(2).sum())
            sq[l] += float(out.double().pow(2).sum())
            total[l] += out.double().sum(0).cpu()
            fired[l] |= (f > 0).any(0).cpu()
            l0[l] += int((f > 0).sum())
    if not n_tok:
        raise TranscoderError("the data has no token to measure fidelity on")
    n_pred = max(sum(len(w.ids) - 1 for w in windows), 1)
    nmse = {}
    for l in layers:
        var = sq[l] - float(total[l].pow(2).sum()) / n_tok
        nmse[l] = err[l] / max(var, 1e-12)
    result = dict(
        top1_agreement=agree / n_tok,
        kl=kl / n_tok,
        loss=loss / n_pred,
        replacement_loss=rep_loss / n_pred,
        nmse=nmse,
        dead={l: 1.0 - float(fired[l].float().mean()) for l in layers},
        l0={l: l0[l] / n_tok for l in layers},
        tokens=n_tok,
    )
    result["warning"] = warning(result)
    return result


def warning(result: dict) -> str | None:
    """A plain sentence when the replacement model is a poor stand-in for the real one, else None."""
    worst = max(result["nmse"].items(), key=lambda kv: kv[1])
    if result["top1_agreement"] < POOR_AGREEMENT:
        return (
            f"the replacement model agrees with yours on only {100 * result['top1_agreement']:.0f}% of next "
            f"tokens (KL {result['kl']:.2f} nats/token): a graph drawn from it may explain another model; "
            "train wider transcoders or for longer"
        )
    if worst[1] > POOR_NMSE:
        return f"layer {worst[0]}'s transcoder misses {100 * worst[1]:.0f}% of its MLP's output variance"
    return None
