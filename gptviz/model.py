"""The GPT model family: one decoder-only transformer, every variant chosen by GPTConfig.

Read top to bottom: norm -> attention -> MLP -> Block -> GPT. Submodule names equal
GPT-2 checkpoint keys (transformer.wte, transformer.h.0.attn.c_attn, ...), so importing
weights is a name-for-name copy. Probes (gptviz.probes) mark every point the Trace contract
names; nothing in here knows about capture.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import GPTConfig
from .errors import PromptError
from .probes import Probe

# Whether attention computes its weights as a tensor (probes on scores, mask and weights see
# them) or runs the fused kernel. Per thread and per call, never a module attribute: Streamlit
# serves every session from one shared model.
_explicit: contextvars.ContextVar[bool] = contextvars.ContextVar("gptviz_explicit_attention", default=False)


@contextlib.contextmanager
def explicit_attention(on: bool = True) -> Iterator[None]:
    """Within this block, attention in this thread builds its scores and weights explicitly."""
    token = _explicit.set(on)
    try:
        yield
    finally:
        _explicit.reset(token)


def make_norm(config: GPTConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.n_embd, eps=config.norm_eps)
    return nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)


def sinusoidal_positions(block_size: int, n_embd: int) -> Tensor:
    """The fixed sin/cos table of 'Attention Is All You Need': even columns sin, odd cos."""
    pos = torch.arange(block_size, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    freq = torch.exp(torch.arange(0, n_embd, 2, dtype=torch.float64) * (-math.log(10000.0) / n_embd))
    table = torch.zeros(block_size, n_embd, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.float()  # (T, C)


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """q kᵀ / √D for every query and key, before the mask: (..., T, D) x2 -> (..., T, T)."""
    return q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1)))


def causal_mask(T: int, device: torch.device | str = "cpu", offset: int = 0) -> Tensor:
    """(T, offset + T) bools, True where query i (at position offset + i) may read key j (j <= offset + i).
    offset: tokens already in a KV cache. Built per call: T² bytes, where a per-layer buffer of
    block_size² would be held by every layer for the model's lifetime."""
    return torch.ones(T, offset + T, dtype=torch.bool, device=device).tril_(offset)


def attention_weights(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the keys each query may read (mask True); the others get exactly 0."""
    return F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


class LayerCache:
    """One layer's keys and values of the tokens run so far, (B, H, t, D) each, in buffers that grow
    by doubling (or hold `capacity` tokens from the start): a step writes only its own token's k and v,
    where concatenating would copy every earlier one again."""

    def __init__(self, capacity: int = 0) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._n = 0
        self._capacity = capacity

    def __len__(self) -> int:
        return self._n

    @property
    def k(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, : self._n]

    @property
    def v(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, : self._n]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new tokens' keys and values (B, H, T, D); return every key and value so far."""
        n, T = self._n, k.size(2)
        if self._k is None or n + T > self._k.size(2):
            size = max(self._capacity, 2 * (n + T))
            grown_k, grown_v = k.new_empty(*k.shape[:2], size, k.size(3)), v.new_empty(*v.shape[:2], size, v.size(3))
            if n:
                grown_k[:, :, :n], grown_v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
            self._k, self._v = grown_k, grown_v
        self._k[:, :, n : n + T], self._v[:, :, n : n + T] = k, v
        self._n = n + T
        return self.k, self.v


class KVCache:
    """The keys and values of every layer for the tokens already run: an input of the forward pass
    (`model(idx, cache=cache)`), which appends the new tokens' k, v and attends over all of them,
    so a step of generation runs only the new token. One cache per sequence (and per thread).
    capacity: the tokens it will hold at most, when known (its buffers are then allocated once)."""

    def __init__(self, n_layer: int, capacity: int = 0) -> None:
        self.layers = [LayerCache(capacity) for _ in range(n_layer)]

    def __len__(self) -> int:
        """Tokens held: the position the next token will take."""
        return len(self.layers[0])


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.q, self.k, self.v = Probe(), Probe(), Probe()
        self.scores, self.weights = Probe(), Probe()
        self.mask = Probe(batched=False)
        self.z, self.out = Probe(), Probe()  # each head's output before the merge; what the sub-layer adds

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        B, T, C = x.size()
        H, D = self.n_head, C // self.n_head
        P = len(cache) if cache is not None else 0  # tokens before these: the queries' position offset
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = self.q(q.view(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
        k = self.k(k.view(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
        v = self.v(v.view(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H, P + T, D)
        if _explicit.get():  # the attention weights exist as a tensor only on this path
            scores = self.scores(attention_scores(q, k))  # (B, H, T, P + T)
            mask = self.mask(causal_mask(T, x.device, P))  # (T, P + T)
            weights = self.weights(attention_weights(scores, mask))  # (B, H, T, P + T)
            y = self.attn_dropout(weights) @ v  # (B, H, T, D)
        else:
            p = self.attn_dropout.p if self.training else 0.0
            # is_causal aligns the mask top-left: right only without a cache; one new token reads every key
            causal = dict(is_causal=True) if P == 0 else dict(attn_mask=None if T == 1 else causal_mask(T, x.device, P))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, **causal)  # (B, H, T, D)
        y = self.z(y)  # heads still separate: where a head can be read or ablated on its own
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # merge heads: (B, T, C)
        return self.out(self.resid_dropout(self.c_proj(y)))


ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
}


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.hidden, self.out = Probe(), Probe()  # the neurons after the nonlinearity; what the sub-layer adds

    def forward(self, x: Tensor) -> Tensor:
        h = self.hidden(self.act(self.c_fc(x)))  # (B, T, 4C)
        return self.out(self.dropout(self.c_proj(h)))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config)
        self.mlp = MLP(config)
        self.resid_pre, self.resid_mid, self.resid_post = Probe(), Probe(), Probe()

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        x = self.resid_pre(x)
        x = self.resid_mid(x + self.attn(self.ln_1(x), cache))
        return self.resid_post(x + self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """A GPT-style decoder. `model(idx)` maps [B, T] token ids to [B, T, V] logits."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                embed=Probe(),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=make_norm(config),
            )
        )
        if config.pos_encoding == "learned":
            self.transformer.wpe = nn.Embedding(config.block_size, config.n_embd)
        else:
            self.register_buffer("sinusoid", sinusoidal_positions(config.block_size, config.n_embd), persistent=False)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2: scale residual projections by depth
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight

    @staticmethod
    def _init_weights(module: nn.Module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def device(self) -> torch.device:
        return self.transformer.wte.weight.device

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights counted once

    def check_ids(self, idx: Tensor, past: int = 0) -> None:
        """Raise PromptError, with the reason, for input the model cannot run (the ids' range is
        checked in eval mode only). past: tokens already in the KV cache."""
        if idx.dim() != 2:
            raise PromptError(f"expected token ids of shape [B, T], got {list(idx.shape)}")
        if idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise PromptError(f"token ids must be integers, got {idx.dtype}")
        T = idx.size(1)
        if T == 0:
            raise PromptError("the prompt is empty: give at least one token")
        if past and self.config.block_size < past + T:
            raise PromptError(
                f"the cache holds {past} tokens and {T} more were given, but the model reads at most "
                f"block_size={self.config.block_size}"
            )
        if self.config.block_size < T:
            raise PromptError(
                f"the prompt has {T} tokens but the model reads at most block_size={self.config.block_size}; "
                f"keep the last {self.config.block_size}"
            )
        if self.training:  # reading the ids' range syncs a GPU: not on every training step
            return
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= self.config.vocab_size:
            bad = lo if lo < 0 else hi
            raise PromptError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size - 1}]")

    def forward(self, idx: Tensor, explicit: bool = False, cache: KVCache | None = None) -> Tensor:
        """Logits at every position of idx. explicit=True builds the attention weights as a tensor (see
        explicit_attention); the default runs fused scaled_dot_product_attention. cache: the keys and
        values of the tokens before idx (KVCache), which this call extends by idx's; idx then starts at
        position len(cache)."""
        past = len(cache) if cache is not None else 0
        self.check_ids(idx, past)
        with explicit_attention() if explicit else contextlib.nullcontext():
            return self._logits(idx, cache, past)

    def _logits(self, idx: Tensor, cache: KVCache | None = None, past: int = 0) -> Tensor:
        B, T = idx.size()
        tok = self.transformer.wte(idx)  # (B, T, C)
        if self.config.pos_encoding == "learned":
            pos = self.transformer.wpe(torch.arange(past, past + T, device=idx.device))  # (T, C)
        else:
            pos = self.sinusoid[past : past + T]  # (T, C)
        x = self.transformer.embed(self.transformer.drop(tok + pos))
        for l, block in enumerate(self.transformer.h):
            x = block(x) if cache is None else block(x, cache.layers[l])
        return self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
