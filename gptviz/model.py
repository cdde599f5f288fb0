"""The GPT model family: one decoder-only transformer, every variant chosen by GPTConfig.

Read top to bottom: norms -> attention (q, k, v; rotary; one of attention.ATTENTION_FUNCTIONS) -> MLP
-> Block -> the LM head -> GPT. Submodule names equal GPT-2 checkpoint keys (transformer.wte,
transformer.h.0.attn.c_attn, ...), so importing GPT-2 weights is a name-for-name copy; the other families
(Llama, Qwen, Gemma, NeoX, ...) are the same modules with their config fields set, and
formats/hf_decoders.py maps their weight names onto these. Beside it: attention.py (the attention
arithmetic and its implementations), positions.py (sin/cos and rotary variants), precision.py (how each
family rounds in half precision), decoding.py (the KV cache and decoding's weight layouts). Probes
(gptviz.probes) mark every point the Trace contract names; nothing in here knows about capture.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, overload

import torch
from torch import Tensor, nn

# (`x as x`: importable from here as before, for tests and the analyses; defined in attention, decoding, precision)
from .attention import ATTENTION_FUNCTIONS, AttentionSpec, implementation
from .attention import _explicit as _explicit
from .attention import attention_weights as attention_weights
from .attention import expand_kv as expand_kv
from .attention import explicit_attention as explicit_attention
from .attention import grouped_matmul as grouped_matmul
from .config import GPTConfig
from .decoding import KVCache, LayerCache, StaticPosition, head_copy, one_row_head
from .decoding import _head_t as _head_t
from .decoding import in_out_layout as in_out_layout
from .decoding import is_block_linear as is_block_linear
from .errors import PromptError
from .positions import rotary_frequencies, rotate, sinusoidal_positions
from .precision import FormulaGELU as FormulaGELU
from .precision import RMSNorm, TorchRMSNorm, activation, rotation_dtype
from .probes import Probe

# What every layer of the forward pass running in this thread would build alike, built once: the rotary
# cos and sin tables, (local, start, T, dtype, device) -> (cos, sin), and the causal masks, ("mask", T,
# offset, window, device) -> mask. None outside GPT.forward (a layer run on its own builds its own).
_shared: contextvars.ContextVar[dict | None] = contextvars.ContextVar("gptviz_shared", default=None)


def once_per_pass(key: tuple, build: Callable[[], Any], share: bool = True) -> Any:
    """build(), or what it gave earlier in this forward pass under the same key (see _shared); built
    afresh when not `share` or outside a forward pass."""
    memo = _shared.get() if share else None
    if memo is None:
        return build()
    if key not in memo:
        memo[key] = build()
    return memo[key]


def make_norm(config: GPTConfig, width: int | None = None) -> nn.Module:
    width = width or config.n_embd
    if config.norm == "rmsnorm":
        if config.norm_affine and not config.norm_plus_one:
            return TorchRMSNorm(width, config.norm_eps, config.norm_fp32_scale)  # torch's own in float32, as before
        return RMSNorm(width, config.norm_eps, config.norm_affine, config.norm_plus_one)
    return nn.LayerNorm(
        width, eps=config.norm_eps, elementwise_affine=config.norm_affine, bias=config.bias and config.norm_affine
    )


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        C, H, Hkv, D = config.n_embd, config.n_head, config.kv_heads, config.head_dim
        self.n_head, self.n_kv_head, self.head_dim = H, Hkv, D
        self.c_attn = nn.Linear(C, (H + 2 * Hkv) * D, bias=config.bias and config.qkv_bias)  # q, k, v side by side
        self.qk_norm = config.qk_norm
        if config.qk_norm != "none":  # per head (Qwen3, Gemma 3) or over all heads at once (OLMo 2)
            self.q_norm = make_norm(config, D if config.qk_norm == "head" else H * D)
            self.k_norm = make_norm(config, D if config.qk_norm == "head" else Hkv * D)
        self.c_proj = nn.Linear(H * D, C, bias=config.bias and config.out_bias)
        self.ln_post = make_norm(config) if config.post_norm else None  # Gemma 2/3, OLMo 2
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        local = config.is_local(layer)
        self.spec = AttentionSpec(
            scale=config.attn_scale or 1.0 / math.sqrt(D),
            softcap=config.attn_softcap,
            window=config.sliding_window if local else 0,
            upcast=config.attn_fp32,
        )
        self.clip = config.qkv_clip
        self.rotary = config.pos_encoding == "rotary"
        self.interleaved = config.rotary_interleaved
        self.config, self.local = config, local
        if self.rotary:
            self.register_buffer("inv_freq", rotary_frequencies(config, local), persistent=False)
        self.q, self.k, self.v = Probe(), Probe(), Probe()
        self.scores, self.weights = Probe(), Probe()
        self.mask = Probe(batched=False)
        self.z, self.out = Probe(), Probe()  # each head's output before the merge; what the sub-layer adds

    def reset_buffers(self, device: torch.device) -> None:
        """Compute the rotary table again on device (after a build on the meta device)."""
        if self.rotary:
            self.inv_freq = rotary_frequencies(self.config, self.local).to(device)

    def rotation_in(self, start: int | StaticPosition, T: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """rotation(start, T) rounded to dtype, computed once per forward pass for every layer alike (its
        frequencies depend on the config and whether the layer is local only): 30 layers of SmolLM2 would
        otherwise each build the same tables at every step of decoding."""

        def build() -> tuple[Tensor, Tensor]:
            cos, sin = self.rotation(start, T)
            return cos.to(dtype), sin.to(dtype)

        return once_per_pass((self.local, start, T, dtype, self.inv_freq.device), build)

    def mask_in(self, T: int, device: torch.device, offset: int | StaticPosition) -> Tensor:
        """spec.mask(T, device, offset), built once per forward pass for the layers with this window; a
        fresh one where the mask probe is hooked (capture, an edit), which may keep or change it."""
        hooked = bool(self.mask._forward_hooks or self.mask._forward_pre_hooks)
        key = ("mask", T, offset, self.spec.window, device)
        return once_per_pass(key, lambda: self.spec.mask(T, device, offset), share=not hooked)

    def rotation(self, start: int | StaticPosition, T: int) -> tuple[Tensor, Tensor]:
        """cos and sin (T, R) of positions start..start+T-1, as Hugging Face computes them (in float32,
        whatever the model's dtype; the caller rounds them to q's dtype, as Hugging Face does)."""
        if isinstance(start, StaticPosition):
            pos = start.positions(T).float()
        else:
            pos = torch.arange(start, start + T, device=self.inv_freq.device, dtype=torch.float32)
        angles = pos[:, None] * self.inv_freq.float()[None, :]  # (T, R/2)
        angles = angles.repeat_interleave(2, dim=-1) if self.interleaved else torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def project(self, z: Tensor) -> Tensor:
        """What the sub-layer adds to the residual stream from each head's output z (B, H, T, D):
        heads merged, c_proj, then the post-norm where the model has one."""
        B, H, T, D = z.shape
        y = z.transpose(1, 2).contiguous().view(B, T, H * D)  # merge heads: (B, T, H·D)
        y = self.resid_dropout(self.c_proj(y))  # (B, T, C)
        return y if self.ln_post is None else self.ln_post(y)

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, T, D), k and v (B, H_kv, T, D) from x (B, T, C): projected, clipped and normed where the
        model does so, k before rotary."""
        B, T, _ = x.size()
        H, Hkv, D = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = self.c_attn(x).split([H * D, Hkv * D, Hkv * D], dim=2)
        if self.clip:  # OLMo 1
            q, k, v = q.clamp(-self.clip, self.clip), k.clamp(-self.clip, self.clip), v.clamp(-self.clip, self.clip)
        if self.qk_norm == "all":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, H_kv, T, D)
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v.view(B, T, Hkv, D).transpose(1, 2)

    def rotate_qk(self, q: Tensor, k: Tensor, start: int | StaticPosition) -> tuple[Tensor, Tensor]:
        """q and k turned to their positions start.. in the dtype the family turns them in (precision)."""
        cos, sin = self.rotation_in(start, q.size(2), rotation_dtype(self.config, q.dtype))  # (T, R)
        return rotate(q, cos, sin, self.interleaved).to(q.dtype), rotate(k, cos, sin, self.interleaved).to(k.dtype)

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        P = cache.past if cache is not None else 0  # tokens before these: the queries' position offset
        q, k, v = self.heads(x)
        if self.rotary:
            q, k = self.rotate_qk(q, k, P)
        q, k = self.q(q), self.k(k)
        if self.rotary or self.qk_norm != "none":  # q and k are new tensors: a view would keep c_attn's whole
            v = v.contiguous()  # output alive in a Trace (H + 2 H_kv heads' worth) for H_kv heads of values
        v = self.v(v)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, P + T, D)
        attend = ATTENTION_FUNCTIONS[implementation(self.spec, q.dtype)]  # only "explicit" builds the weights
        y = self.z(attend(self, q, k, v, P))  # (B, H, T, D): heads still separate, to be read or ablated alone
        return self.out(self.project(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        C, F_, bias = config.n_embd, config.mlp_dim, config.bias and config.mlp_bias
        self.c_fc = nn.Linear(C, F_, bias=bias)  # up
        self.c_gate = nn.Linear(C, F_, bias=bias) if config.mlp_gated else None  # SwiGLU / GeGLU's gate
        self.act = activation(config)
        self.c_proj = nn.Linear(F_, C, bias=bias)  # down
        self.ln_post = make_norm(config) if config.post_norm else None  # Gemma 2/3, OLMo 2
        self.dropout = nn.Dropout(config.dropout)
        # what the MLP reads (`in` is a keyword, so registered by name: the point is blocks.{l}.mlp.in);
        # the down projection's input (the neurons); what the sub-layer adds
        self.add_module("in", Probe())
        self.hidden, self.out = Probe(), Probe()

    def neurons(self, x: Tensor) -> Tensor:
        """The down projection's input: act(c_fc(x)), or act(gate(x)) * up(x) in a gated MLP. (B, T, F)."""
        if self.c_gate is None:
            return self.act(self.c_fc(x))
        return self.act(self.c_gate(x)) * self.c_fc(x)

    def project(self, h: Tensor) -> Tensor:
        """What the sub-layer adds to the residual stream from its neurons: down, then any post-norm."""
        y = self.dropout(self.c_proj(h))  # (B, T, C)
        return y if self.ln_post is None else self.ln_post(y)

    def forward(self, x: Tensor) -> Tensor:
        x = getattr(self, "in")(x)  # the probe registered as "in" (a keyword: no attribute syntax)
        return self.out(self.project(self.hidden(self.neurons(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        pre = config.pre_norm  # OLMo 2 has none: its norms sit after the sub-layers
        self.ln_1 = make_norm(config) if pre else nn.Identity()
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = make_norm(config) if pre else nn.Identity()
        self.mlp = MLP(config)
        self.parallel = config.parallel
        self.resid_pre, self.resid_mid, self.resid_post = Probe(), Probe(), Probe()

    def mlp_input(self, resid_pre: Tensor, resid_mid: Tensor) -> Tensor:
        """What the MLP reads: ln_2 of resid_mid, or of resid_pre in a parallel block (GPT-NeoX)."""
        return self.ln_2(resid_pre if self.parallel else resid_mid)

    def residual_out(self, resid_pre: Tensor, attn_out: Tensor | None, resid_mid: Tensor, mlp_out: Tensor) -> Tensor:
        """resid_post: resid_mid + mlp.out, or in a parallel block resid_pre + (attn.out + mlp.out), Hugging
        Face's order for GPT-NeoX ((mlp + attn) + x), which differs from (x + attn) + mlp by a rounding.
        attn_out is read only in a parallel block; None there sums resid_mid + mlp.out (an edited resid_mid)."""
        if self.parallel and attn_out is not None:
            return resid_pre + (attn_out + mlp_out)
        return resid_mid + mlp_out

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        pre = self.resid_pre(x)
        attn = self.attn(self.ln_1(pre), cache)
        added = pre + attn
        mid = self.resid_mid(added)
        mlp = self.mlp(self.mlp_input(pre, mid))
        # an edited resid_mid (an intervention, steering) carries on, as in a sequential block, in a parallel one too
        return self.resid_post(self.residual_out(pre, attn if mid is added else None, mid, mlp))


class LMHead(nn.Linear):
    """The unembedding, then the final soft-cap where the model has one (Gemma 2): the logits."""

    def __init__(self, n_embd: int, vocab_size: int, softcap: float = 0.0):
        super().__init__(n_embd, vocab_size, bias=False)
        self.softcap = softcap
        self._shared: tuple[Tensor, int, Tensor] | None = None  # (weight, its version, the [C, V] copy)
        self._users = 0

    def forward(self, x: Tensor) -> Tensor:
        copy = head_copy(self.weight)  # x Wᵀ, read from W stored [C, V] while one_row_head holds a copy
        logits = x @ copy if copy is not None else super().forward(x)
        return torch.tanh(logits / self.softcap) * self.softcap if self.softcap else logits

    def one_row_head(self) -> contextlib.AbstractContextManager[None]:
        """Within this block, in this thread, the head multiplies by a [C, V] copy of its weight, faster
        for one row on the CPU in float32 (decoding.one_row_head)."""
        return one_row_head(self)


class Blocks(nn.ModuleList):
    """transformer.h: the blocks in order, a ModuleList a type checker reads as holding Blocks."""

    if TYPE_CHECKING:

        def __iter__(self) -> Iterator[Block]: ...

        @overload  # type: ignore[override]  # torch types ModuleList's as one signature for int and slice
        def __getitem__(self, idx: int) -> Block: ...

        @overload
        def __getitem__(self, idx: slice) -> Blocks: ...

        def __getitem__(self, idx): ...


class Trunk(nn.ModuleDict):
    """GPT's `transformer`: a ModuleDict whose keys are GPT-2's checkpoint names, its members typed (to a
    type checker nn.Module's attributes are all Tensor | Module)."""

    wte: nn.Embedding
    wpe: nn.Embedding  # learned positions only: `"wpe" in model.transformer` says whether it is there
    drop: nn.Dropout
    embed: Probe
    h: Blocks
    ln_f: nn.Module


class GPT(nn.Module):
    """A GPT-style decoder. `model(idx)` maps [B, T] token ids to [B, T, V] logits."""

    def __init__(self, config: GPTConfig, init: bool = True):
        super().__init__()
        self.config = config

        def embedding(n: int) -> nn.Embedding:  # without init, no normal_: on the meta device torch runs it
            # through its Python reference, which imports its compiler stack (72 MB of a 1B model's load peak)
            return (
                nn.Embedding(n, config.n_embd)
                if init
                else nn.Embedding(n, config.n_embd, _weight=torch.empty(n, config.n_embd))
            )

        self.transformer = Trunk(
            dict(
                wte=embedding(config.vocab_size),
                drop=nn.Dropout(config.dropout),
                embed=Probe(),
                h=Blocks([Block(config, l) for l in range(config.n_layer)]),
                ln_f=make_norm(config),
            )
        )
        if config.pos_encoding == "learned":
            self.transformer.wpe = embedding(config.block_size)
        elif config.pos_encoding == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_positions(config.block_size, config.n_embd), persistent=False)
        self.lm_head = LMHead(config.n_embd, config.vocab_size, config.final_softcap)
        if init:
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

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in (its weights')."""
        return self.transformer.wte.weight.dtype

    @classmethod
    def empty(cls, config: GPTConfig) -> GPT:
        """The model's structure with no storage behind it (the meta device): nothing allocated or
        initialised. A loader fills every parameter (formats/bundle.py fill), then reset_buffers."""
        with torch.device("meta"):
            return cls(config, init=False)

    def reset_buffers(self, device: torch.device) -> None:
        """Compute the buffers (rotary tables, the sin/cos position table) on device: after a build on
        the meta device they have no values."""
        for module in self.modules():
            if isinstance(module, CausalSelfAttention):
                module.reset_buffers(device)
        if self.config.pos_encoding == "sinusoidal":
            self.sinusoid = sinusoidal_positions(self.config.block_size, self.config.n_embd).to(device)

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
        past = cache.past if cache is not None else 0
        if isinstance(past, int):  # a static cache's steps run ids its decoder made (cuda_steps.py)
            self.check_ids(idx, past)
        token = _shared.set({})
        try:
            with explicit_attention() if explicit else contextlib.nullcontext():
                return self._logits(idx, cache, past)
        finally:
            _shared.reset(token)

    def _logits(self, idx: Tensor, cache: KVCache | None = None, past: int | StaticPosition = 0) -> Tensor:
        B, T = idx.size()
        x = self.transformer.wte(idx)  # (B, T, C)
        if self.config.embed_scale != 1.0:  # Gemma: sqrt(C), rounded to the model's dtype as Hugging Face rounds it
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype, device=x.device)
        static = isinstance(past, StaticPosition)
        if self.config.pos_encoding == "learned":
            at = past.positions(T) if static else torch.arange(past, past + T, device=idx.device)
            x = x + self.transformer.wpe(at)  # (T, C)
        elif self.config.pos_encoding == "sinusoidal":  # rotary positions act inside attention
            table = self.sinusoid.index_select(0, past.positions(T)) if static else self.sinusoid[past : past + T]
            x = x + table.to(x.dtype)  # (T, C)
        x = self.transformer.embed(self.transformer.drop(x))
        for l, block in enumerate(self.transformer.h):
            x = block(x) if cache is None else block(x, cache.layers[l])
        return self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
