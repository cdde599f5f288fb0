"""Captured values as float64 tensors where they live, so statistics come back to the CPU, not the values."""

from __future__ import annotations

import numpy as np
import torch

from ..record import Trace


def float64(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """An array (copied) or a tensor (on its device) as float64; float32 on Apple MPS, which has no float64."""
    if not isinstance(x, torch.Tensor):
        return torch.from_numpy(np.array(x, dtype=np.float64))
    return x.to(torch.float32 if x.device.type == "mps" else torch.float64)


def exact(trace: Trace, name: str) -> torch.Tensor:
    """A captured value as a float64 tensor on the Trace's device."""
    return float64(trace.tensor(name))
