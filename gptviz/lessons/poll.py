"""A "predict the next token" poll: each student's guess, tallied for the teacher's screen.

Anonymous (a voter is an opaque id, the follower's session: never shown, never stored beside the
text anywhere but here) and one answer per voter (a second answer replaces the first: a student may
change their mind until the teacher reveals the model's answer, which closes the poll). Bounded in
every direction a room could push: a guess's length, answers per poll, and the distinct answers the
teacher's screen shows (the rest are counted together as "other"). Pure: the dashboard keeps one
Tally per predict slide of a class code (dashboard/live.py) behind its lock.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..figures.style import BLUE, ORANGE, plotly_text, style
from ..tokenizers.base import VISIBLE

MAX_GUESS_CHARS = 24  # a next token is a character or a word piece: 24 is plenty
MAX_ANSWERS = 500  # voters per poll (a class code nudges at most 500 followers: live.MAX_FOLLOWERS)
MAX_SHOWN = 10  # distinct guesses on the teacher's screen; the rest are one bar, OTHER
OTHER = "(other guesses)"


class GuessError(ValueError):
    """A guess that is not taken: the message is one line a student reads."""


def normal_guess(text: str) -> str:
    """A guess as it is tallied: NFC, no control characters, one space or newline as its sign (the
    signs the dashboard's token chips use), leading and trailing space dropped from a longer one;
    GuessError if nothing is left or it is too long."""
    if not isinstance(text, str):
        raise GuessError("a guess is text")
    t = unicodedata.normalize("NFC", text[: MAX_GUESS_CHARS * 4])
    if t in VISIBLE:  # a char model's space or newline is a token of its own
        return VISIBLE[t]
    t = "".join(ch for ch in t if unicodedata.category(ch)[0] != "C").strip()
    if not t:
        raise GuessError("type a guess first (a space is ␣)")
    if len(t) > MAX_GUESS_CHARS:
        raise GuessError(f"a guess has at most {MAX_GUESS_CHARS} characters")
    return t


@dataclass(frozen=True)
class Snapshot:
    """What the teacher's screen shows of a poll at one moment."""

    counts: tuple[tuple[str, int], ...]  # (guess, how many), most first, at most MAX_SHOWN + OTHER
    answers: int  # voters who answered
    revealed: bool  # the model's answer is shown and the poll is closed
    version: int  # grows with every change


@dataclass
class Tally:
    """One poll's answers: voter id -> normalised guess."""

    answers: dict[str, str] = field(default_factory=dict)
    revealed: bool = False
    version: int = 0
    clients: dict[str, str] = field(default_factory=dict)  # voter id -> the address it answered from

    def vote(self, voter: str, text: str, client: str = "", per_client: int | None = None) -> str:
        """Take (or replace) this voter's guess; the guess as tallied. GuessError when the poll is
        closed, the guess is not one, MAX_ANSWERS others have answered, or per_client voters (None:
        no bound) have answered from this client's address ('' is one address too)."""
        if self.revealed:
            raise GuessError("the teacher has revealed the answer: this poll is closed")
        guess = normal_guess(text)
        if voter not in self.answers and len(self.answers) >= MAX_ANSWERS:
            raise GuessError(f"this poll has its {MAX_ANSWERS} answers")
        # one address fills at most half of the poll, whatever its teacher allows it
        full = per_client is not None and sum(c == client for c in self.clients.values()) >= min(
            per_client, MAX_ANSWERS // 2
        )
        if full and voter not in self.answers:
            one = "one answer" if per_client == 1 else f"{per_client} answers"
            raise GuessError(f"this computer has given its {one} to this poll (the same page may change it)")
        self.clients[voter] = client
        if self.answers.get(voter) != guess:
            self.answers[voter] = guess
            self.version += 1
        return guess

    def reveal(self) -> None:
        if not self.revealed:
            self.revealed = True
            self.version += 1

    def snapshot(self) -> Snapshot:
        """The counts, most first (ties in the order of the guess text, so the screen is stable)."""
        ranked = sorted(Counter(self.answers.values()).items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ranked[:MAX_SHOWN]
        rest = sum(n for _, n in ranked[MAX_SHOWN:])
        counts = tuple(shown) + (((OTHER, rest),) if rest else ())
        return Snapshot(counts, len(self.answers), self.revealed, self.version)


def tally_table(snap: Snapshot, model: pd.DataFrame | None) -> pd.DataFrame:
    """The class's guesses beside the model's probabilities (model: top_k's rows, token and
    probability; None before the reveal): one row per guess or model token, the class's share and
    the model's probability, both as percentages."""
    share = {g: n / snap.answers for g, n in snap.counts} if snap.answers else {}
    prob: dict[str, float] = {}
    if model is not None:
        for tok, p in zip(model["token"], model["probability"], strict=True):
            prob.setdefault(_tallied(str(tok)), float(p))
    tokens = list(dict.fromkeys([*share, *prob]))
    return pd.DataFrame(
        {
            "token": tokens,
            "class %": [100 * share.get(t, 0.0) for t in tokens],
            "model %": [100 * prob[t] if t in prob else np.nan for t in tokens],
        }
    )


def _tallied(token: str) -> str:
    """A model token as a guess of it is tallied (its display form: ␣ for a space)."""
    try:
        return normal_guess(token)
    except GuessError:
        return token


def tally_figure(table: pd.DataFrame, answers: int, revealed: bool, height: int = 400) -> go.Figure:
    """Bars of the class's guesses (percent of the answers), and once revealed the model's
    probability beside each."""
    x = [plotly_text(t) for t in table["token"]]  # a student's text, never markup
    fig = go.Figure(go.Bar(name=f"class ({answers} answers)", x=x, y=table["class %"], marker_color=BLUE))
    if revealed:
        fig.add_bar(name="model", x=x, y=table["model %"].fillna(0.0), marker_color=ORANGE)
    title = f"The class's guesses: {answers} answer{'' if answers == 1 else 's'}" + (" · the model" if revealed else "")
    style(fig, title, height=height)
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.2))
    fig.update_yaxes(title_text="%", range=[0, 100])  # of the answers; the model's: its probability (the caption)
    fig.update_xaxes(type="category")
    return fig
