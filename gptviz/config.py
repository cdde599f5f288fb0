"""GPTConfig: every variant of the model family, chosen by fields (DESIGN.md, "The model family").

A config often comes from a file a stranger wrote (config.json, nanoGPT's model_args), so every
field is type-checked and held to the bounds in limits.py when the config is made, before any
model is built: a string is not a boolean, and 1e9 is not a vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from .errors import ConfigError
from .limits import MAX_CONFIG, MAX_PARAMS

CHOICES = {
    "pos_encoding": ("learned", "sinusoidal"),
    "norm": ("layernorm", "rmsnorm"),
    "activation": ("gelu", "gelu_tanh", "relu"),
}
SIZES = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")
FLAGS = ("bias", "tie_weights")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: object) -> str:
    """A field's value for a message, cut short: a config may hold a 10 MB string."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class GPTConfig:
    vocab_size: int = 65  # 65: the character set of Shakespeare's plays
    block_size: int = 256  # longest context the model can read
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128  # C, the width of the residual stream; D = C / H per head
    dropout: float = 0.0  # only active in train mode
    bias: bool = True  # biases in Linear and LayerNorm, as GPT-2
    pos_encoding: str = "learned"  # learned (GPT-2) | sinusoidal (fixed sin/cos)
    norm: str = "layernorm"  # layernorm (GPT-2) | rmsnorm
    activation: str = "gelu"  # gelu (exact) | gelu_tanh (GPT-2's gelu_new) | relu
    tie_weights: bool = True  # lm_head shares the token embedding, as GPT-2
    norm_eps: float = 1e-5

    def __post_init__(self):
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ConfigError(f"{name}={_shown(value)}: choose one of {', '.join(allowed)}")
        for name in SIZES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={_shown(value)}: must be a positive integer")
            if value > MAX_CONFIG[name]:
                raise ConfigError(
                    f"{name}={value:,} is above gptviz's limit of {MAX_CONFIG[name]:,} (gptviz/limits.py)"
                )
        for name in FLAGS:
            value = getattr(self, name)
            if not isinstance(value, bool):  # bool("no") is True: a string must not pass as a flag
                raise ConfigError(f"{name}={_shown(value)}: must be true or false")
        if not _is_number(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={_shown(self.dropout)}: must be in [0, 1)")
        if not _is_number(self.norm_eps) or not 0.0 <= self.norm_eps <= 1.0:
            raise ConfigError(f"norm_eps={_shown(self.norm_eps)}: must be a number in [0, 1], e.g. 1e-5")
        if self.n_embd % self.n_head:
            raise ConfigError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.pos_encoding == "sinusoidal" and self.n_embd % 2:
            raise ConfigError(f"sinusoidal positions need an even n_embd, got {self.n_embd}")
        n = self.num_params()
        if n > MAX_PARAMS:
            raise ConfigError(
                f"the config describes {n:,} parameters, above gptviz's limit of {MAX_PARAMS:,} (gptviz/limits.py)"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every key of GPT(self).state_dict() and its shape, worked out without building the model,
        so a checkpoint's tensors can be checked against its config before anything is allocated."""
        C, V = self.n_embd, self.vocab_size
        norm_keys = ("weight", "bias") if self.norm == "layernorm" and self.bias else ("weight",)

        def linear(prefix: str, n_out: int, n_in: int) -> dict[str, tuple[int, ...]]:
            out = {f"{prefix}.weight": (n_out, n_in)}
            if self.bias:
                out[f"{prefix}.bias"] = (n_out,)
            return out

        def norm(prefix: str) -> dict[str, tuple[int, ...]]:
            return {f"{prefix}.{k}": (C,) for k in norm_keys}

        shapes: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (V, C)}
        for i in range(self.n_layer):
            p = f"transformer.h.{i}"
            shapes |= norm(f"{p}.ln_1") | linear(f"{p}.attn.c_attn", 3 * C, C) | linear(f"{p}.attn.c_proj", C, C)
            shapes |= norm(f"{p}.ln_2") | linear(f"{p}.mlp.c_fc", 4 * C, C) | linear(f"{p}.mlp.c_proj", C, 4 * C)
        shapes |= norm("transformer.ln_f")
        if self.pos_encoding == "learned":
            shapes["transformer.wpe.weight"] = (self.block_size, C)
        shapes["lm_head.weight"] = (V, C)
        return shapes

    def num_params(self) -> int:
        """Parameters GPT(self) will hold (a tied head counted once), known before it is built."""
        C, V, L = self.n_embd, self.vocab_size, self.n_layer
        norm = C * (2 if self.norm == "layernorm" and self.bias else 1)
        per_layer = 2 * norm + 12 * C * C + (9 * C if self.bias else 0)
        positions = self.block_size * C if self.pos_encoding == "learned" else 0
        return V * C + positions + L * per_layer + norm + (0 if self.tie_weights else V * C)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"expected a JSON object of config fields, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(d) - known))
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown[:5])}")
        return cls(**d)
