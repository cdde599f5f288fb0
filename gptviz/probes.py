"""Named identity probes: the points in the forward pass that capture can see.

A Probe returns its input unchanged, so the forward pass still reads like the math. While a capture
runs in this thread (`LISTENER` holds it), the probe hands it the value, which may record it or
replace it (an intervention); otherwise a probe costs one Python call. Capture needs no hooks, whose
registration and slow module calls cost more than the layer on a GPU. Forward hooks still work.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from torch import Tensor, nn

from .names import module_to_point

# the capture running in this thread, if any: (probe, value) -> the value the forward goes on with
LISTENER: contextvars.ContextVar[Callable[[Probe, Tensor], Tensor] | None] = contextvars.ContextVar(
    "gptviz_probe_listener", default=None
)


class Probe(nn.Module):
    """Identity at a named point of the forward pass.

    batched: the value carries the batch axis first (most do); the causal mask does not.
    """

    def __init__(self, batched: bool = True):
        super().__init__()
        self.batched = batched

    def forward(self, x: Tensor) -> Tensor:
        listener = LISTENER.get()
        return x if listener is None else listener(self, x)


def capture_name(module_path: str, module: nn.Module) -> str | None:
    """The Trace-contract name of what a module outputs, or None if it is not captured.

    Names come from the module tree: `transformer.h.3.attn.q` -> `blocks.3.attn.q`."""
    if module_path == "lm_head":
        return "logits"
    if module_path == "transformer.ln_f":
        return "ln_f"
    return module_to_point(module_path) if isinstance(module, Probe) else None
