"""The tensors of one or more weight files, read one at a time by name: what every loader fills a
model from (formats/bundle.py fill_model); and safetensors headers, read without the tensors. Until a
tensor is asked for only its shape and dtype are known: from safetensors headers, and from torch files
with their tensors mapped, not read, so a loader checks the shapes against the config before any
weight is allocated."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load as load_bytes
from safetensors.torch import load_file

from ..errors import CheckpointError
from .inmemory import on_disk
from .safe import check_file, state_dict, torch_load, torch_load_mapped

# safetensors' dtype codes as torch names them (others keep their code: they are not weights we fill)
SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64"}
READ = "_gptviz_read"  # set on a tensor Weights.get read into memory of its own: fill_model may keep it as is


def safetensors_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape from a safetensors file's header alone: no tensor data is read."""
    return {k: shape for k, (shape, _) in safetensors_header(file).items()}


def safetensors_header(file: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each tensor's shape and dtype ("bfloat16", ...) from a safetensors file's header alone."""
    check_file(file, None, "weights file")
    try:
        if not on_disk(file):  # an upload held in memory: the header is read from its bytes
            return header_entries(file.read_bytes())
        with safe_open(str(file), framework="pt") as f:
            entries = {k: f.get_slice(k) for k in f.keys()}  # noqa: SIM118 (not iterable)
            return {k: (tuple(s.get_shape()), _dtype(s.get_dtype())) for k, s in entries.items()}
    except Exception as e:  # SafetensorError, OSError, and whatever a damaged header raises
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(f"{file}: not a readable safetensors file, truncated or corrupt ({first})") from None


def _dtype(code: str) -> str:
    return SAFETENSORS_DTYPES.get(code, str(code)[:20])


def header_entries(data: bytes) -> dict[str, tuple[tuple[int, ...], str]]:
    """The shapes and dtypes a safetensors header declares (an 8-byte little-endian length, then that
    much JSON), for bytes in memory, where safe_open cannot go; safetensors.torch.load checks the
    offsets and sizes when the tensors are read."""
    if len(data) < 8:
        raise ValueError("shorter than the 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if n > min(len(data) - 8, 100 * 2**20):  # safetensors' own limit on a header is 100 MB
        raise ValueError(f"a header of {n} bytes does not fit the file")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    entries = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"tensor {key[:60]!r} has no valid shape")
        entries[key] = (tuple(shape), _dtype(entry.get("dtype")))
    return entries


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file whose header was checked (safetensors_shapes)."""
    try:
        return load_file(str(file)) if on_disk(file) else load_bytes(file.read_bytes())
    except Exception as e:
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(f"{file}: not a readable safetensors file, truncated or corrupt ({first})") from None


def data_offsets(file: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """Where each tensor's bytes lie in a safetensors file whose header safe_open has read (and checked):
    the data's start, and each tensor's [begin, end) within the data."""
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n).decode("utf-8"))
    spans = {k: tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__"}
    return 8 + n, spans  # type: ignore[return-value]


def _read_into(file: Path, start: int | None, out: torch.Tensor, f=None) -> None:
    """The file's bytes from `start` read straight into out's memory (contiguous, on the CPU): no mapping
    of the file and no copy on the way. A file that ends early (rewritten while loading) is one line.
    f: the file already open (unbuffered), read on from where it is when start is None."""
    view = out.reshape(-1).view(torch.uint8).numpy().data  # a writable memoryview of out's bytes
    if f is None:
        with open(file, "rb", buffering=0) as f:
            f.seek(start)
            return _read_into(file, None, out, f)
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise CheckpointError(f"{file}: the file ends inside a tensor; it was truncated or changed while loading")
        got += n


# Rows of a tensor read at a time when it is converted on the way in: a block that stays in the cache
# between its read and its conversion (up to 4 MB), in few enough pieces that torch's threads are started
# rarely (each start costs a wait where another process holds a core), with long runs for a transposing write.
BLOCK_ROWS, BLOCK_BYTES = 1024, 4 * 2**20


def finite_sum(t: torch.Tensor) -> bool:
    """Whether t's sum is finite: it is not where a value is NaN or Inf, nor where the sum overflows t's
    dtype (then every value has to be looked at). torch accumulates a half sum in float32 with no copy;
    asking for a float32 result would convert t first, a copy of its size."""
    return bool(torch.isfinite(t.sum()))


def laid_out(t: torch.Tensor) -> bool:
    """Whether a [out, in] weight's values lie [in, out] in memory (decoding.in_out_layout)."""
    return t.dim() == 2 and t.stride(0) == 1


def write_rows(out: torch.Tensor, a: int, block: torch.Tensor, turned: torch.Tensor | None = None) -> None:
    """block, rows a.. of a tensor in its stored dtype, written into out's rows a.. (converted to out's
    dtype). Where out is laid_out the block is transposed first, in its own dtype by torch's tiled
    kernel (into `turned` where given, a buffer kept), so that the conversion writes runs of values:
    one strided copy of a whole transpose is 3.8x a plain conversion, 16 rows at a time 1.5x."""
    rows = out[a : a + len(block)]
    if not laid_out(out):
        rows.copy_(block)
        return
    if turned is None:
        flipped = block.t().contiguous()
    else:
        flipped = turned[: block.numel()].view(block.size(1), len(block)).copy_(block.t())
    rows.t().copy_(flipped)


def copy_rows(out: torch.Tensor, value: torch.Tensor, rows: int = 256) -> None:
    """value written into out (its shape, in any dtype and layout): `rows` rows at a time where out is
    laid_out (write_rows), else in one copy."""
    if not laid_out(out):
        out.copy_(value)
        return
    for a in range(0, len(value), rows):
        write_rows(out, a, value[a : a + rows])


class Weights:
    """Named tensors spread over files. get(name) reads one tensor as the file stores it: from a
    safetensors file on disk, its bytes straight into a tensor of its own (only that tensor's bytes read),
    a torch file or an upload read whole once and handed out tensor by tensor (each let go when taken)."""

    def __init__(self, files: list[Path]):
        self.files = files
        self.where: dict[str, Path] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.stored: dict[str, str] = {}  # name -> the dtype the file holds it in ("bfloat16", ...)
        self._read: dict[Path, dict[str, torch.Tensor]] = {}  # files read whole: torch files, uploads
        self._spans: dict[str, tuple[int, int]] = {}  # name -> its bytes in a safetensors file on disk
        self._buffers: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}  # read_into's blocks
        for file in files:
            if file.suffix == ".safetensors":
                header = safetensors_header(file)
                if on_disk(file) and sys.byteorder == "little":  # safetensors stores little-endian
                    start, spans = data_offsets(file)
                    self._spans |= {k: (start + a, start + b) for k, (a, b) in spans.items()}
            else:  # sized, and its unpacked size known, before it is mapped
                raw, mapped = torch_load_mapped(file)
                state = state_dict(raw, file)
                header = {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in state.items()}
                if not mapped:  # read whole already (an upload, an older or compressed file): keep it
                    self._read[file] = state
                del raw, state
            for k, (shape, dtype) in header.items():
                self.where[k], self.shapes[k], self.stored[k] = file, shape, dtype

    @classmethod
    def of_state(cls, state: dict[str, torch.Tensor], source: Path) -> Weights:
        """Weights over a state dict already in memory (a nanoGPT checkpoint's 'model'): get() hands
        out each tensor once, letting go of it."""
        weights = cls([])
        weights._read[source] = state
        for k, v in state.items():
            weights.where[k], weights.shapes[k] = source, tuple(v.shape)
            weights.stored[k] = str(v.dtype).removeprefix("torch.")
        return weights

    def floating_dtypes(self, names: Iterable[str] | None = None) -> list[str]:
        """The floating dtypes the files store (of names, else of every tensor), most elements first."""
        count: dict[str, int] = {}
        for k in self.shapes if names is None else names:
            dtype = self.stored.get(k, "")
            if dtype.startswith(("float", "bfloat")):
                count[dtype] = count.get(dtype, 0) + math.prod(self.shapes[k])
        return sorted(count, key=lambda d: -count[d])

    def get(self, key: str) -> torch.Tensor:
        """The tensor as stored (its dtype too); the caller converts it as it fills the model."""
        file = self.where[key]
        dtype = getattr(torch, self.stored[key], None)
        if key in self._spans and isinstance(dtype, torch.dtype):
            begin, end = self._spans[key]
            out = torch.empty(self.shapes[key], dtype=dtype)
            if end - begin != out.numel() * out.element_size():  # safe_open checked it: a file changed since
                raise CheckpointError(f"{file}: {key}'s bytes do not match its shape; the file changed while loading")
            _read_into(file, begin, out)
            setattr(out, READ, True)
            return out
        if file.suffix == ".safetensors" and on_disk(file):
            try:
                with safe_open(str(file), framework="pt") as f:
                    return f.get_tensor(key)
            except Exception as e:
                first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                raise CheckpointError(
                    f"{file}: not a readable safetensors file, truncated or corrupt ({first})"
                ) from None
        if file not in self._read:
            self._read[file] = self._read_whole(file)
        return self._read[file].pop(key)

    def read_into(self, key: str, out: torch.Tensor) -> bool:
        """The tensor written into out: its shape, in any dtype and any layout, on the CPU. From a safetensors
        file on disk a block of rows at a time through one small buffer, converted as it is written, so
        nothing of the tensor's size is allocated on the way (get, then a conversion, makes two such
        copies, and the fresh pages of each cost the kernel as much as the copy); a tensor stored as out
        holds it is read straight into out. Else out takes get(key). Returns whether the sum of the values
        is finite, taken where they are still in the cache: False where a value may be NaN or Inf."""
        dtype = getattr(torch, self.stored[key], None)
        if key not in self._spans or not isinstance(dtype, torch.dtype) or out.dim() == 0:
            value = self.get(key)
            copy_rows(out, value)
            return finite_sum(value)
        file, (begin, end) = self.where[key], self._spans[key]
        if end - begin != out.numel() * dtype.itemsize:  # safe_open checked it: a file changed since
            raise CheckpointError(f"{file}: {key}'s bytes do not match its shape; the file changed while loading")
        if out.dtype == dtype and out.is_contiguous():
            _read_into(file, begin, out)
            return finite_sum(out)
        row = out[0].numel()
        rows = max(1, min(BLOCK_ROWS, BLOCK_BYTES // (row * dtype.itemsize)))
        read, turned = self._scratch(dtype, rows * row)
        finite = True
        with open(file, "rb", buffering=0) as f:
            f.seek(begin)
            for i in range(0, out.size(0), rows):
                block = read[: min(rows, out.size(0) - i) * row].view(-1, *out.shape[1:])
                _read_into(file, None, block, f)
                write_rows(out, i, block, turned)
                finite = finite and finite_sum(block)
        return finite

    def _scratch(self, dtype: torch.dtype, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Two buffers of at least n values of dtype, kept for the next tensor: fresh memory costs the
        kernel a page fault every 4 kB."""
        held = self._buffers.get(dtype)
        if held is None or held[0].numel() < n:
            held = self._buffers[dtype] = (torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype))
        return held

    def _read_whole(self, file: Path) -> dict[str, torch.Tensor]:
        if file.suffix == ".safetensors":  # an upload held in memory: safe_open needs a file, so read its bytes
            return read_safetensors(file)
        state = state_dict(torch_load(file), file)
        got = {k: tuple(v.shape) for k, v in state.items()}
        if any(got.get(k) != shape for k, shape in self.shapes.items() if self.where[k] == file):
            raise CheckpointError(f"{file}: the file changed while it was being loaded; load it again")
        return state


@dataclass(frozen=True)
class Stacked:
    """One of our tensors that is a file's tensor, or several stacked along their rows (q, k and v): made
    when called, or written by into() straight into the tensor that becomes the parameter (fill_model),
    with nothing of its size made on the way."""

    weights: Weights
    sources: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        first = self.weights.shapes[self.sources[0]]
        return (sum(self.weights.shapes[s][0] for s in self.sources), *first[1:])

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype the file stores every source in, None where they differ."""
        stored = {self.weights.stored[s] for s in self.sources}
        dtype = getattr(torch, stored.pop(), None) if len(stored) == 1 else None
        return dtype if isinstance(dtype, torch.dtype) else None

    def __call__(self) -> torch.Tensor:
        ts = [self.weights.get(s) for s in self.sources]
        return ts[0] if len(ts) == 1 else torch.cat(ts, dim=0)

    def into(self, out: torch.Tensor) -> bool:
        """Each source's rows written into out in turn; whether every sum was finite (Weights.read_into)."""
        row, finite = 0, True
        for s in self.sources:
            n = self.weights.shapes[s][0]
            finite = self.weights.read_into(s, out[row : row + n]) and finite
            row += n
        return finite
