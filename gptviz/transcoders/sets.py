"""A set of transcoders, one per layer (or some): what train_transcoders returns and load_transcoders
reads, with the replacement model's fidelity (fidelity.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .fidelity import fidelity
from .transcoder import Transcoder, TranscoderError


class TranscoderSet(Mapping):
    """One transcoder per layer (all of them, or some): tcs[l], tcs.layers, len(tcs), `for l in tcs`.
    input_hook / output_hook are TransformerLens's names of the points they read and write
    (mlp.hook_in, hook_mlp_out), as circuit-tracer's config.yaml says them."""

    input_hook = "mlp.hook_in"
    output_hook = "hook_mlp_out"

    def __init__(self, transcoders: Mapping[int, Transcoder] | list[Transcoder], meta: dict | None = None):
        items = transcoders.values() if isinstance(transcoders, Mapping) else transcoders
        by_layer: dict[int, Transcoder] = {}
        for tc in items:
            if not isinstance(tc, Transcoder):
                raise TranscoderError(f"a TranscoderSet holds Transcoders, got {type(tc).__name__}")
            if tc.layer in by_layer:
                raise TranscoderError(f"two transcoders for layer {tc.layer}")
            by_layer[tc.layer] = tc
        if not by_layer:
            raise TranscoderError("a TranscoderSet needs at least one transcoder")
        widths = {tc.d_model for tc in by_layer.values()}
        if len(widths) > 1:
            raise TranscoderError(f"the transcoders read different widths: {sorted(widths)}")
        self._tcs = dict(sorted(by_layer.items()))
        self.meta: dict[str, Any] = dict(meta or {})  # config.yaml's other fields (model_name, training report)
        self.path: str | None = None

    def __getitem__(self, layer: int) -> Transcoder:
        try:
            return self._tcs[int(layer)]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"no transcoder for layer {layer!r}; these are for layers {self.layers}") from None

    def __iter__(self) -> Iterator[int]:
        return iter(self._tcs)

    def __len__(self) -> int:
        return len(self._tcs)

    def __repr__(self) -> str:
        first = next(iter(self._tcs.values()))
        return f"TranscoderSet(layers {self.layers}, {first.activation}, d_model={self.d_model}, d_tc={first.d_tc})"

    @property
    def layers(self) -> list[int]:
        return list(self._tcs)

    @property
    def d_model(self) -> int:
        return next(iter(self._tcs.values())).d_model

    def fingerprint(self) -> str:
        """A short digest of the weights (each layer's biases and some of its encoder rows): names this set
        whatever folder it is read from, so a scan made with it is found again (scanning.transcoder_record)."""
        digest = hashlib.sha256()
        for l, tc in self._tcs.items():
            rows = tc.W_enc[:: max(1, tc.d_tc // 64)]  # [<= 128, d_model]: a sample, cheap for any width
            digest.update(f"{l}:{tc.activation}:{tc.k}:{tc.d_tc}:{tc.d_model};".encode())
            for t in (tc.b_enc, tc.b_dec, rows):
                digest.update(t.detach().float().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()[:32]

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> TranscoderSet:
        """Move every transcoder (in place, as nn.Module.to) and return the set."""
        for tc in self._tcs.values():
            tc.to(device=device, dtype=dtype)
        return self

    def check_fits(self, model) -> None:
        """One TranscoderError line unless every transcoder reads a layer this model has, of its width."""
        cfg = model.config
        bad = [l for l in self._tcs if not 0 <= l < cfg.n_layer]
        if bad:
            raise TranscoderError(
                f"the transcoders are for layer {bad[0]}, but the model has {cfg.n_layer} layers "
                f"(0 … {cfg.n_layer - 1})"
            )
        if self.d_model != cfg.n_embd:
            raise TranscoderError(
                f"the transcoders read {self.d_model} values per token, but this model's mlp.in is {cfg.n_embd} "
                "wide: they were trained on another model"
            )

    def fidelity(self, model, data, *, tokenizer=None, max_tokens: int = 16384) -> dict:
        """How well the replacement model (every MLP replaced by its transcoder, all at once) stands in
        for `model` over the corpus `data`: top1_agreement, kl (nats / token, KL(model ‖ replacement)),
        nmse per layer (on the true mlp.in), dead share. See gptviz.transcoders.fidelity."""
        return fidelity(self, model, data, tokenizer=tokenizer, max_tokens=max_tokens)
