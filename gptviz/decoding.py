"""What a step of decoding reads, laid out for it: the KV cache, and on the CPU the weight layouts a
one-row product reads fastest (the block weights [in, out], the LM head's [C, V] copy). generation.py
runs the steps; the model reads the cache and the head copy, and knows nothing else of decoding."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


class LayerCache:
    """One layer's keys and values of the tokens run so far, (B, H_kv, t, D) each, in buffers that grow
    by doubling (or hold `capacity` tokens from the start): a step writes only its own token's k and v,
    where concatenating would copy every earlier one again. Keys are kept after rotary: a key's
    rotation depends on its own position only."""

    def __init__(self, capacity: int = 0) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._n = 0
        self._capacity = capacity

    def __len__(self) -> int:
        return self._n

    @property
    def past(self) -> int:
        """Tokens before the next pass's: its queries' position offset."""
        return self._n

    @property
    def k(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, : self._n]

    @property
    def v(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, : self._n]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new tokens' keys and values (B, H_kv, T, D); return every key and value so far."""
        n, T = self._n, k.size(2)
        if self._k is None or self._v is None or n + T > self._k.size(2):
            size = max(self._capacity, 2 * (n + T))
            grown_k, grown_v = k.new_empty(*k.shape[:2], size, k.size(3)), v.new_empty(*v.shape[:2], size, v.size(3))
            if n and self._k is not None and self._v is not None:
                grown_k[:, :, :n], grown_v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
            self._k, self._v = grown_k, grown_v
        self._k[:, :, n : n + T], self._v[:, :, n : n + T] = k, v
        self._n = n + T
        return self._k[:, :, : self._n], self._v[:, :, : self._n]


@dataclass(frozen=True, eq=False)
class StaticPosition:
    """Where the new tokens of a pass on a StaticKVCache stand: `at`, a 0-dim int64 tensor on the device
    (a captured step reads it afresh at every replay), with `keys` slots of keys behind every query."""

    at: Tensor
    keys: int

    def positions(self, T: int) -> Tensor:
        return self.at + torch.arange(T, device=self.at.device)  # (T,)


class StaticLayerCache:
    """One layer's keys and values in buffers of a fixed size, zeros where no token is yet: a pass writes
    its tokens' k and v at their positions and attends over every slot, masked to the ones written (a
    zero weight on a zero value adds nothing). Shapes and addresses never change, so a step can be
    captured once and replayed (cuda_steps.py)."""

    def __init__(self, k: Tensor, v: Tensor, position: StaticPosition) -> None:
        self.k, self.v, self.past = k, v, position

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        at = self.past.positions(k.size(2))
        self.k.index_copy_(2, at, k)
        self.v.index_copy_(2, at, v)
        return self.k, self.v


class StaticKVCache:
    """Every layer's StaticLayerCache, filled from a KVCache (the prompt's pass) and moved on by
    advance(); its position lives on the device."""

    def __init__(self, cache: KVCache, capacity: int) -> None:
        first = cache.layers[0]
        assert first.k is not None, "a StaticKVCache starts from a KVCache that holds the prompt"
        self.position = StaticPosition(torch.tensor(len(cache), device=first.k.device), capacity)
        self.layers = []
        for layer in cache.layers:
            k, v = layer.k, layer.v
            assert k is not None and v is not None
            buffers = [x.new_zeros(*x.shape[:2], capacity, x.size(3)) for x in (k, v)]
            buffers[0][:, :, : k.size(2)], buffers[1][:, :, : v.size(2)] = k, v
            self.layers.append(StaticLayerCache(*buffers, self.position))

    @property
    def past(self) -> StaticPosition:
        return self.position

    def advance(self, n: int = 1) -> None:
        self.position.at.add_(n)


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

    @property
    def past(self) -> int:
        return len(self)


def in_out_layout(weight: Tensor) -> Tensor:
    """A Linear's weight, still [out, in] as nn.Linear reads it, with its values laid out in memory as
    [in, out]: the transpose of a contiguous [in, out] tensor. F.linear(x, w) then calls addmm with wᵀ,
    that contiguous matrix, as Hugging Face's Conv1D does; on the CPU in float32 a one-row product (a
    step of decoding) reads it faster (GPT-2 small's 12 blocks: 22.6 ms a token against 25.1 ms), and
    the prompt's T-row products take the same time. GPT-2's files store these weights [in, out], so its
    import keeps them so at no cost (formats/families.py conv1d); the other families' files store [out, in],
    and their block weights are laid out so where the load converts them anyway (formats/bundle.py
    fill_model: a bf16 / fp16 file computed in float32 on the CPU)."""
    return weight.t().contiguous().t()


# The Linear weights of a block (after "transformer.h.<i>."): the products a step of decoding runs per layer.
BLOCK_LINEARS = (
    "attn.c_attn.weight",
    "attn.c_proj.weight",
    "mlp.c_fc.weight",
    "mlp.c_gate.weight",
    "mlp.c_proj.weight",
)


def is_block_linear(name: str) -> bool:
    """Whether a parameter name is one of a block's Linear weights (BLOCK_LINEARS)."""
    return name.startswith("transformer.h.") and name.endswith(BLOCK_LINEARS)


# A [C, V] copy of an LM head's weight, with the weight it copies, while one_row_head() runs in this thread.
_head_t: contextvars.ContextVar[tuple[Tensor, Tensor] | None] = contextvars.ContextVar("gptviz_head_t", default=None)
_HEAD_COPIES = threading.Lock()  # guards a head's _shared and _users: one copy for every thread decoding at once


def head_copy(weight: Tensor) -> Tensor | None:
    """The [C, V] copy of this head weight that one_row_head holds in this thread, else None."""
    copy = _head_t.get()
    return copy[1] if copy is not None and copy[0] is weight else None


@contextlib.contextmanager
def one_row_head(head: Any) -> Iterator[None]:
    """Within this block, in this thread, `head` (the model's LMHead) multiplies by a [C, V] copy of its
    weight (made here, dropped on leaving). On the CPU in float32 a one-row product reads W that way 1.6x
    as fast as from the [V, C] weight (GPT-2's head: 5.6 ms against 9.1 ms of CPU time): what a step of
    decoding does, once per token. Equal to the plain head within float32 rounding; in bf16 and fp16 that
    layout is slower, so decoding asks for it in float32 only (generation._decoding_head).

    Blocks open at once (a class of 30 pressing Generate: 154 MB each for GPT-2) share one copy (the head's
    _shared), made again if the weight was edited in place since (its version moved), dropped when the
    last leaves (its _users)."""
    w = head.weight
    with _HEAD_COPIES:
        held = head._shared
        if held is None or held[0] is not w or held[1] != w._version:
            held = head._shared = (w, w._version, w.detach().t().contiguous())
        head._users += 1
    token = _head_t.set((w, held[2]))
    try:
        yield
    finally:
        _head_t.reset(token)
        with _HEAD_COPIES:
            head._users -= 1
            if not head._users:
                head._shared = None
