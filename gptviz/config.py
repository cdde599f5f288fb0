"""GPTConfig: every variant of the model family, chosen by fields (DESIGN.md, "The model family")."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .errors import ConfigError

CHOICES = {
    "pos_encoding": ("learned", "sinusoidal"),
    "norm": ("layernorm", "rmsnorm"),
    "activation": ("gelu", "gelu_tanh", "relu"),
}


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
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name}={getattr(self, name)!r}: choose one of {', '.join(allowed)}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={value!r}: must be a positive integer")
        if self.n_embd % self.n_head:
            raise ConfigError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.pos_encoding == "sinusoidal" and self.n_embd % 2:
            raise ConfigError(f"sinusoidal positions need an even n_embd, got {self.n_embd}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout!r}: must be in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        return cls(**d)
