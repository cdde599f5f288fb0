"""Named identity probes: the points in the forward pass that capture can see.

A Probe returns its input unchanged, so the forward pass still reads like the math. A forward
hook registered on it receives the value (and, for interventions later, may replace it). An
unhooked probe costs one Python call.
"""

from __future__ import annotations

from torch import Tensor, nn

from .names import module_to_point


class Probe(nn.Module):
    """Identity at a named point of the forward pass.

    batched: the value carries the batch axis first (most do); the causal mask does not.
    """

    def __init__(self, batched: bool = True):
        super().__init__()
        self.batched = batched

    def forward(self, x: Tensor) -> Tensor:
        return x


def capture_name(module_path: str, module: nn.Module) -> str | None:
    """The Trace-contract name of what a module outputs, or None if it is not captured.

    Names come from the module tree: `transformer.h.3.attn.q` -> `blocks.3.attn.q`."""
    if module_path == "lm_head":
        return "logits"
    if module_path == "transformer.ln_f":
        return "ln_f"
    return module_to_point(module_path) if isinstance(module, Probe) else None
