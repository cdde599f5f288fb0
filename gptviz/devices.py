"""Devices: which ones this machine has, and the torch device for a name."""

from __future__ import annotations

import torch

from .errors import DeviceError

DEVICES = ("cpu", "cuda", "mps")


def device_status() -> dict[str, str]:
    """Each device kind -> "" if usable here, else the reason it is not."""
    mps = getattr(torch.backends, "mps", None)
    return {
        "cpu": "",
        "cuda": "" if torch.cuda.is_available() else "no CUDA GPU found here",
        "mps": "" if mps is not None and mps.is_available() else "no Apple Metal (MPS) device here",
    }


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device for a name, or DeviceError saying why it cannot be used here."""
    if device is not None and not isinstance(device, (str, torch.device)):
        raise DeviceError(f"a device is a name such as 'cpu' or 'cuda', got {type(device).__name__}")
    shown = repr(str(device)) if len(str(device)) <= 40 else repr(str(device)[:37] + "...")
    try:
        dev = torch.device(device or "cpu")
    except (RuntimeError, TypeError, ValueError):  # torch: "Expected one of cpu, cuda, ... device type"
        raise DeviceError(f"device {shown} is not one gptviz knows; use cpu, cuda, cuda:N or mps") from None
    if dev.type not in DEVICES:
        raise DeviceError(f"device {shown} is not one gptviz runs on; use cpu, cuda, cuda:N or mps")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA was asked for but no CUDA GPU is available here; use device='cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise DeviceError(f"device {shown}: this machine has {n} CUDA GPU(s), numbered 0 to {n - 1}")
    if dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise DeviceError("MPS was asked for but Apple's Metal backend is not available here; use device='cpu'")
    return dev
