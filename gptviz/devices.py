"""Devices: which ones this machine has, and the torch device for a name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

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


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
COMPUTE_DTYPES = ("auto", *DTYPES)  # what gptviz.load(dtype=...) takes
HALF_DTYPES = ("bfloat16", "float16")
# what a model needs beyond its weights to run a page at all (activations, the tokenizer, Python): an
# "auto" load keeps float32 only when the weights leave this much of the free memory
HEADROOM = 1.25


M = TypeVar("M", bound=nn.Module)


def kept_copy(module: M, device: torch.device | str, copies: dict[torch.device, M], twin: Callable[[], M]) -> M:
    """`module` on `device`: itself if it is there, else its copy there, made once (by `twin`, a like
    module that gets module's weights) and kept in `copies`. For what is applied where the activations
    are (an SAE or a transcoder loaded on the CPU, a model on a GPU): one copy, not one per call."""
    device = torch.device(device)
    here = next(module.parameters()).device
    if device.type == here.type and (device.index is None or device.index == here.index):
        return module
    if device not in copies:
        copy = twin()
        copy.load_state_dict(module.state_dict())
        copies[device] = copy.to(device).requires_grad_(False)
    return copies[device]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_dtype(dtype: object) -> str:
    """A compute dtype's name ("auto", "float32", "bfloat16", "float16"), or DeviceError in one line."""
    if isinstance(dtype, torch.dtype) and dtype_name(dtype) in DTYPES:
        return dtype_name(dtype)
    if dtype is None:
        return "auto"
    if not isinstance(dtype, str) or (dtype not in DTYPES and dtype != "auto"):
        shown = repr(dtype) if len(repr(dtype)) <= 40 else repr(dtype)[:37] + "..."
        raise DeviceError(f"dtype {shown} is not one gptviz computes in; use auto, float32, bfloat16 or float16")
    return dtype


def free_memory(device: torch.device) -> int | None:
    """Bytes free for a model on device: the GPU's free memory, or the machine's MemAvailable
    (/proc/meminfo: free plus what the kernel can reclaim, the page cache of a mapped weights file
    included); None where it cannot be known (then "auto" keeps float32)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def choose_dtype(asked: str, stored: str, n_params: int, device: torch.device) -> tuple[torch.dtype, str]:
    """The compute dtype for a load, and a note saying why when "auto" left float32 (else "").
    asked: check_dtype's name; stored: the weights' floating dtype in the file."""
    free = free_memory(device)
    if asked != "auto":
        return _fits(DTYPES[asked], n_params, free, device), ""
    need = 4 * n_params
    if free is None or need * HEADROOM <= free:
        return torch.float32, ""
    half = stored if stored in HALF_DTYPES else "bfloat16"
    return _fits(DTYPES[half], n_params, free, device), (
        f"computed in {half}: in float32 its weights take {_size(need)} and {device.type} has "
        f"{_size(free)} free; load with dtype='float32' to insist"
    )


def _fits(dtype: torch.dtype, n_params: int, free: int | None, device: torch.device) -> torch.dtype:
    """dtype, when the weights in it fit the free memory (unknown: assumed to); else DeviceError, said
    before a byte is allocated rather than ending in the kernel's out-of-memory kill."""
    need = dtype.itemsize * n_params
    if free is not None and need > free:
        raise DeviceError(
            f"the model's {n_params / 1e9:.2f} B weights take {_size(need)} in {dtype_name(dtype)} and "
            f"{device.type} has {_size(free)} free: close something, or load it in a smaller dtype"
        )
    return dtype


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"
