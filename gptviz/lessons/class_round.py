"""The class against the model: a predict slide's poll scored by the model's own probabilities.

After the reveal every guess of the room is read as a token of the model and given the probability the
model puts on it at the prompt's last position (the softmax of the last logits: what the Next token
page shows), and its log-probability. The room's score is the mean of those probabilities over every
answer (a guess that is no token of the model counts 0): the chance that the model, sampling its next
token, would have written what a student of the room said. Beside it stands the model's own score,
the probability of its top token. For the room's favourite and for the model's answer, the logit lens
(gptviz.logit_lens) says at which site the token first becomes the lens's top-1 and its top-5, or that
it never does.

Pure (no Streamlit): the dashboard computes it once per revealed poll, the handout writes it, tests
compare it with gptviz.logit_lens and with a softmax by hand.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analysis.lens import logit_lens
from ..analysis.next_token import softmax
from ..tokenizers.base import VISIBLE
from .poll import OTHER, GuessError, normal_guess

TOP_K = 5  # the model's own top tokens a round lists, and the lens's "top-5"
_FORMS_KEPT = 4  # tokenizers whose guess forms are kept (one per shipped checkpoint in use)
_forms: OrderedDict[int, tuple[object, dict[str, list[int]]]] = OrderedDict()
_forms_lock = threading.Lock()


@dataclass(frozen=True)
class Guess:
    """One guess of the room, as the model reads it."""

    text: str  # as tallied (poll.normal_guess)
    votes: int
    token_id: int | None  # the token it names; None: no token of this model is written so
    prob: float | None  # the model's probability of that token at the last position
    logprob: float | None  # its natural log


@dataclass(frozen=True)
class Depth:
    """Where the logit lens first ranks one token at the top, through the model's sites."""

    who: str  # "the room's favourite" or "the model's answer"
    token_id: int
    token: str  # as displayed
    top1: str | None  # the first site (lens_sites) whose lens ranks it first; None: never
    top5: str | None  # the first site whose lens ranks it in its top 5; None: never


@dataclass(frozen=True)
class Round:
    guesses: tuple[Guess, ...]  # the tally's guesses, most votes first (OTHER left out); the favourite
    # is the first that names a token
    answers: int  # every answer, OTHER's included
    score: float  # mean over the answers of the model's probability of the answer (no token: 0)
    mean_logprob: float | None  # mean log-probability over the answers that name a token
    model_score: float  # the model's probability of its own top token
    top: pd.DataFrame  # the model's TOP_K tokens: token, token_id, probability, log-probability
    depths: tuple[Depth, ...]  # the room's favourite (when it names a token) and the model's answer
    position: int  # the prompt position read (its last)
    sites: tuple[str, ...]  # the lens's sites, in order


def guess_forms(tokenizer, vocab_size: int) -> dict[str, list[int]]:
    """Each guess a student could type that names a token, and the ids it names: a token's display
    form as a guess is tallied (␣ for a space), and, for a token that is a word after a space, the word
    alone too (a guess drops its leading space). Built once per tokenizer (the whole vocabulary)."""
    with _forms_lock:
        found = _forms.get(id(tokenizer))
        if found is not None and found[0] is tokenizer:
            _forms.move_to_end(id(tokenizer))
            return found[1]
    forms: dict[str, list[int]] = {}
    space = VISIBLE[" "]
    for i, shown in enumerate(tokenizer.display(range(vocab_size))):
        try:
            form = normal_guess(shown)
        except GuessError:  # a token no guess can write (an empty or control one)
            continue
        forms.setdefault(form, []).append(i)
        if len(form) > 1 and form.startswith(space):
            forms.setdefault(form[1:], []).append(i)
    with _forms_lock:
        _forms[id(tokenizer)] = (tokenizer, forms)
        while len(_forms) > _FORMS_KEPT:
            _forms.popitem(last=False)
    return forms


def guess_token(tokenizer, vocab_size: int, guess: str, probs: np.ndarray | None = None) -> int | None:
    """The token a guess names (the likeliest under probs where it names several, e.g. "the" and
    "␣the"; else the lowest id); None when it names none."""
    ids = guess_forms(tokenizer, vocab_size).get(guess)
    if not ids:
        return None
    if probs is None:
        return min(ids)
    return max(ids, key=lambda i: (probs[i], -i))


def check_guess(tokenizer, vocab_size: int, text: str) -> str:
    """A guess as tallied if it names a token of the model; GuessError (one line a student reads) if not."""
    guess = normal_guess(text)
    if guess_token(tokenizer, vocab_size, guess) is None:
        if getattr(tokenizer, "kind", "") == "char":
            raise GuessError("this model writes one character at a time: guess one character")
        raise GuessError(f"{guess!r} is not one token of this model: guess a shorter piece")
    return guess


def site_words(site: str | None) -> str:
    """A lens site as a class reads it (the residual stream after that sub-layer); 'never' for None."""
    if site is None:
        return "never"
    if site == "embed":
        return "the embedding"
    _, layer, kind = site.split(".")
    return f"layer {layer}'s " + ("attention" if kind == "resid_mid" else "MLP")


def depth_words(d: Depth) -> str:
    """Where the lens first ranks a token in its top 5 and first, in words."""
    if d.top5 is None:
        return f"never in the logit lens's top {TOP_K}"
    top5 = f"in the lens's top {TOP_K} from {site_words(d.top5)}"
    return f"{top5}, never first" if d.top1 is None else f"{top5}, first from {site_words(d.top1)}"


def _first(ranks: np.ndarray, below: int, sites: Sequence[str]) -> str | None:
    hit = np.flatnonzero(ranks < below)
    return sites[int(hit[0])] if hit.size else None


def class_round(model, trace, tokenizer, counts: Sequence[tuple[str, int]], k: int = TOP_K) -> Round:
    """The room's guesses (a poll's counts: (guess as tallied, votes), OTHER for the rest) against the
    model run in `trace`, at the prompt's last position."""
    T = trace.n_tokens
    V = model.config.vocab_size
    logits = np.asarray(trace.part("logits", -1), dtype=np.float64)  # [V]
    p = softmax(logits)  # float64
    logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    answers = sum(n for _, n in counts)
    guesses = []
    for text, n in counts:
        if text == OTHER:
            continue
        tid = guess_token(tokenizer, V, text, p)
        guesses.append(
            Guess(
                text,
                int(n),
                tid,
                None if tid is None else float(p[tid]),
                None if tid is None else float(logp[tid]),
            )
        )
    named = [g for g in guesses if g.token_id is not None]
    score = sum(g.votes * (g.prob or 0.0) for g in guesses) / answers if answers else 0.0
    votes = sum(g.votes for g in named)
    mean_logprob = sum(g.votes * (g.logprob or 0.0) for g in named) / votes if votes else None
    order = np.argsort(-p, kind="stable")[:k]
    shown = tokenizer.display([int(i) for i in order]) if tokenizer is not None else [str(int(i)) for i in order]
    top = pd.DataFrame(
        {
            "token": shown,
            "token_id": [int(i) for i in order],
            "probability": [float(p[i]) for i in order],
            "log-probability": [float(logp[i]) for i in order],
        }
    )
    wanted = [("the model's answer", int(order[0]))]
    if named and named[0].token_id != int(order[0]):
        wanted.insert(0, ("the room's favourite", named[0].token_id))
    elif named:
        wanted = [("the room's favourite and the model's answer", int(order[0]))]
    depths = []
    sites: tuple[str, ...] = ()
    for who, tid in wanted:
        lens = logit_lens(model, trace, k=1, target=tid, positions=[T - 1])
        sites = tuple(lens.sites)
        ranks = lens.target_rank[:, 0]  # [S]
        name = tokenizer.display([tid])[0] if tokenizer is not None else str(tid)
        depths.append(Depth(who, tid, name, _first(ranks, 1, sites), _first(ranks, k, sites)))
    return Round(tuple(guesses), answers, score, mean_logprob, float(p[order[0]]), top, tuple(depths), T - 1, sites)


def round_table(r: Round) -> pd.DataFrame:
    """The room's guesses as a class reads them: votes, the model's probability (%) and log-probability."""
    return pd.DataFrame(
        {
            "guess": [g.text for g in r.guesses],
            "votes": [g.votes for g in r.guesses],
            "model %": ["no token" if g.prob is None else f"{100 * g.prob:.2f}" for g in r.guesses],
            "log p": ["—" if g.logprob is None else f"{g.logprob:.2f}".replace("-", "−") for g in r.guesses],
        }
    )


def score_words(r: Round) -> str:
    n = f"{r.answers} answer{'' if r.answers == 1 else 's'}"
    return (
        f"The room scores {100 * r.score:.2f} %, the model's own answer {100 * r.model_score:.2f} % "
        f"(the model's probability of each answer, averaged over {n})."
    )


def depth_line(d: Depth) -> str:
    return f"{d.token!r}, {d.who}: {depth_words(d)}."


def round_lines(r: Round) -> list[str]:
    """The round's verdict in a few plain lines (the handout's; the slide shows the same words)."""
    return [score_words(r), *(depth_line(d) for d in r.depths)]
