"""A steering vector named in words, so a link, a lesson slide and a page can carry it
(docs/features.md, "In the dashboard" and "In a lesson"): where the vector comes from (an SAE feature's
decoder row, a neuron's output direction, or prompt pairs), the block it is added after and its
coefficient. It holds no numbers of the model: `vector()` builds them from the model it is given.

    spec = SteeringSpec.from_text("feature:343@2*4")          # ?steer=feature:343@2*4
    spec.text                                                 # "feature:343@2*4"
    gptviz.generate(model, ids, 40, interventions=[spec.intervention(bundle, sae=sae)])

The text: `KIND:WHAT@LAYER*COEFF`, KIND one of
    feature:F                 the SAE's feature F (the SAE is the caller's: the sidebar's, a slide's)
    neuron:L.N                neuron N of block L's MLP
    pairs:POS|NEG␤POS|NEG…    prompt pairs, one "positive|negative" per line
and the vector added to blocks.LAYER.resid_post times COEFF at every position.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .errors import GptvizError
from .steering import Steer, neuron_direction, steer, steering_vector

KINDS = ("feature", "neuron", "pairs")
MAX_TEXT = 2000  # characters of a spec's text (the pairs are the long part)
MAX_PAIRS = 16
MAX_COEFF = 1000.0
MAX_INDEX = 1 << 22  # a feature or neuron index (the largest SAEs gptviz loads have 2^22 features)
_INT = re.compile(r"[0-9]{1,7}")


class SteeringSpecError(GptvizError, ValueError):
    """A steering spec that cannot be read: one line saying which part and what it should be."""


def _int(text: str, what: str) -> int:
    if not _INT.fullmatch(text) or int(text) > MAX_INDEX:
        raise SteeringSpecError(f"{what} must be a whole number from 0 to {MAX_INDEX}, not {text[:20]!r}")
    return int(text)


def _coeff(value, what: str = "the coefficient") -> float:
    try:
        c = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        c = math.nan
    if not math.isfinite(c) or abs(c) > MAX_COEFF:
        raise SteeringSpecError(
            f"{what} must be a number from -{MAX_COEFF:g} to {MAX_COEFF:g}, not {str(value)[:20]!r}"
        )
    return c


def _pair_text(text: str, what: str) -> str:
    if not isinstance(text, str) or not text.strip() or "|" in text or "\n" in text:
        raise SteeringSpecError(f"{what} must be text without '|' or a line break, not {str(text)[:40]!r}")
    return text


@dataclass(frozen=True)
class SteeringSpec:
    """A steering vector in words; frozen and hashable (a cache key, a session value, a slide field)."""

    kind: str  # "feature", "neuron" or "pairs"
    layer: int  # the vector is added to blocks.{layer}.resid_post
    coeff: float
    feature: int = 0  # kind "feature"
    neuron: tuple[int, int] = (0, 0)  # kind "neuron": (its block, its index)
    pairs: tuple[tuple[str, str], ...] = ()  # kind "pairs": (positive, negative) texts

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SteeringSpecError(f"a steering vector comes from {', '.join(KINDS)}, not {str(self.kind)[:20]!r}")
        _int(str(self.layer), "the layer")
        object.__setattr__(self, "coeff", _coeff(self.coeff))
        if self.kind == "pairs":
            if not self.pairs or len(self.pairs) > MAX_PAIRS:
                raise SteeringSpecError(
                    f"give 1 to {MAX_PAIRS} prompt pairs (positive|negative), not {len(self.pairs)}"
                )
            for pos, neg in self.pairs:
                _pair_text(pos, "a positive text")
                _pair_text(neg, "a negative text")
        if len(self.text) > MAX_TEXT:
            raise SteeringSpecError(f"the steering spec is {len(self.text)} characters long; at most {MAX_TEXT}")

    @property
    def site(self) -> str:
        return f"blocks.{self.layer}.resid_post"

    @property
    def text(self) -> str:
        """The spec as one line of text (a URL value); from_text(spec.text) == spec."""
        what = {
            "feature": str(self.feature),
            "neuron": f"{self.neuron[0]}.{self.neuron[1]}",
            "pairs": "\n".join(f"{p}|{n}" for p, n in self.pairs),
        }[self.kind]
        short = f"{self.coeff:g}"  # 4, not 4.0; repr where :g would round (1/3)
        return f"{self.kind}:{what}@{self.layer}*{short if float(short) == self.coeff else repr(self.coeff)}"

    @classmethod
    def from_text(cls, text: str) -> SteeringSpec:
        """The spec a text (spec.text) names; SteeringSpecError in one line if it names none."""
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise SteeringSpecError(f"a steering spec is text of at most {MAX_TEXT} characters")
        kind, colon, rest = text.partition(":")
        what, at, where = rest.rpartition("@")
        layer, star, coeff = where.partition("*")
        if not (colon and at and star):
            raise SteeringSpecError(f"{text[:60]!r} is not KIND:WHAT@LAYER*COEFF (e.g. feature:343@2*4)")
        if kind == "feature":
            return cls("feature", _int(layer, "the layer"), _coeff(coeff), feature=_int(what, "the feature"))
        if kind == "neuron":
            block, dot, index = what.partition(".")
            if not dot:
                raise SteeringSpecError(f"a neuron is BLOCK.INDEX (e.g. neuron:1.57), not {what[:20]!r}")
            neuron = (_int(block, "the neuron's block"), _int(index, "the neuron"))
            return cls("neuron", _int(layer, "the layer"), _coeff(coeff), neuron=neuron)
        if kind == "pairs":
            return cls("pairs", _int(layer, "the layer"), _coeff(coeff), pairs=parse_pairs(what))
        raise SteeringSpecError(f"a steering vector comes from {', '.join(KINDS)}, not {kind[:20]!r}")

    def vector(self, model, tokenizer=None, sae=None) -> np.ndarray:
        """The vector, [the width of the residual stream], built from `model` (a GPT or a Bundle):
        the SAE's decoder row (sae: the SAE whose feature it names), the neuron's output direction,
        or the mean difference of the pairs at the site. SteeringSpecError if the model has no such part."""
        from .formats import Bundle  # only to unwrap one

        if isinstance(model, Bundle):
            model, tokenizer = model.model, tokenizer or model.tokenizer
        n_layer = model.config.n_layer
        if self.layer >= n_layer:
            raise SteeringSpecError(
                f"steering after block {self.layer}, but the model has {n_layer} (0 … {n_layer - 1})"
            )
        if self.kind == "feature":
            if sae is None:
                raise SteeringSpecError("steering with an SAE feature needs the SAE: pick one")
            if not 0 <= self.feature < sae.d_sae:
                raise SteeringSpecError(f"the SAE has {sae.d_sae} features (0 … {sae.d_sae - 1}); not {self.feature}")
            if sae.d_in != model.config.n_embd:
                raise SteeringSpecError(f"the SAE reads {sae.site}, {sae.d_in} wide: not a residual-stream direction")
            return sae.W_dec[self.feature].detach().float().cpu().numpy()
        if self.kind == "neuron":
            block, index = self.neuron
            if block >= n_layer:
                raise SteeringSpecError(f"neuron {block}.{index}: the model has {n_layer} blocks (0 … {n_layer - 1})")
            return neuron_direction(model, block, index)
        return steering_vector(model, self.pairs, self.site, tokenizer)

    def intervention(self, model, tokenizer=None, sae=None) -> Steer:
        """gptviz.steer at the spec's site with its vector and coefficient."""
        return steer(self.site, self.vector(model, tokenizer, sae), self.coeff)

    @classmethod
    def from_table(cls, raw, where: str) -> SteeringSpec:
        """A spec from a lesson slide's `steer = { feature = 343, layer = 2, coeff = 4.0 }` (or
        `neuron = [1, 57]`, or `pairs = [["I love thee", "I hate thee"]]`); one line naming `where`."""
        if not isinstance(raw, dict):
            raise SteeringSpecError(f"{where}: 'steer' is a table, e.g. {{ feature = 343, layer = 2, coeff = 4.0 }}")
        extra = sorted(set(raw) - {"feature", "neuron", "pairs", "layer", "coeff"})
        if extra:
            raise SteeringSpecError(f"{where}: 'steer' has an unknown key {extra[0][:40]!r}")
        kinds = [k for k in KINDS if k in raw]
        if len(kinds) != 1 or "layer" not in raw or "coeff" not in raw:
            raise SteeringSpecError(f"{where}: 'steer' names one of {', '.join(KINDS)}, and a layer and a coeff")
        kind, value, layer = kinds[0], raw[kinds[0]], raw["layer"]
        try:
            if isinstance(layer, bool) or not isinstance(layer, int):
                raise SteeringSpecError(f"the layer must be a whole number, not {str(layer)[:20]!r}")
            if kind == "feature":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise SteeringSpecError(f"the feature must be a whole number, not {str(value)[:20]!r}")
                return cls("feature", layer, raw["coeff"], feature=value)
            if kind == "neuron":
                ok = isinstance(value, list) and len(value) == 2 and all(type(x) is int and x >= 0 for x in value)
                if not ok:
                    raise SteeringSpecError(f"a neuron is [block, index], not {str(value)[:30]!r}")
                return cls("neuron", layer, raw["coeff"], neuron=(value[0], value[1]))
            pairs = value if isinstance(value, list) else None
            if pairs is None or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise SteeringSpecError(f"pairs are [[positive, negative], ...], not {str(value)[:30]!r}")
            return cls("pairs", layer, raw["coeff"], pairs=tuple((p[0], p[1]) for p in pairs))
        except SteeringSpecError as e:
            raise SteeringSpecError(f"{where}: 'steer': {e}") from None


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """'positive|negative' per line (blank lines skipped) -> pairs; one line naming a line without '|'."""
    out = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if line.count("|") != 1:
            raise SteeringSpecError(f"line {n} of the pairs needs one '|' between its positive and negative text")
        pos, neg = line.split("|")
        out.append((pos, neg))
    if not out:
        raise SteeringSpecError("type at least one pair: positive | negative")
    return tuple(out)
