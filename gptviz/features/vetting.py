"""Arrays in a file a stranger wrote (an SAE's or a transcoder's weights), checked before any is unpacked.

Two containers hold them: safetensors (an 8-byte length, a JSON header naming each tensor's dtype,
shape and byte span, then the raw bytes) and .npz (a zip of .npy files, each a short header with
dtype and shape, then the raw bytes, stored or deflated). Everything a check needs is in the headers
and the zip's directory, so the order is always:

    headers = read_headers(path)            # the safetensors header, or each member's .npy header
    check_arrays(path, expected, limit)     # names, shapes, dtypes, unpacked bytes: one line if not
    tensors = read_arrays(path, expected)   # only now is a byte of array data read

A 1 MB .npz of compressed zeros can claim gigabytes: its members' sizes are in the zip's directory
and its shapes in the .npy headers, and zipfile never writes more than the directory says, so
refusing by those sizes is refusing before the allocation. Only float16, bfloat16, float32 and
float64 are weights; an .npz's big-endian floats are converted to this machine's byte order as they
are read, and everything else (long double, text, dates, records, Python objects) is one line.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from ..errors import CheckpointError
from ..formats.inmemory import on_disk
from ..formats.safe import check_file, size_text
from ..formats.weights import read_safetensors, safetensors_header
from ..limits import MAX_UNPACK_RATIO, UNPACK_ALLOWANCE
from .sites import SAEError

FLOATS = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# bytes per element of safetensors' other dtypes (as formats/weights.py names them); unknown: 8, the most
OTHER_SIZES = {"int64": 8, "I32": 4, "U32": 4, "U64": 8, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1}
OTHER_SIZES |= {"F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}
MAX_MEMBERS = 256  # arrays in one .npz: an SAE has 5, a transcoder 6
MAX_NPY_HEADER = 10_000  # numpy's own default bound on a .npy header
KINDS = {"U": "text", "S": "bytes", "M": "dates", "m": "time spans", "O": "Python objects", "b": "booleans"}
HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
KINDS |= {"i": "integers", "u": "integers", "c": "complex numbers", "V": "raw records"}


@dataclass(frozen=True)
class ArrayHeader:
    """One array as its header declares it, nothing of it read."""

    shape: tuple[int, ...]
    dtype: str  # "float32", "bfloat16", ...; for anything else what the file says ("<U10", "I32")
    nbytes: int  # what the array takes once unpacked
    swapped: bool = False  # an .npz array stored big-endian: converted as it is read
    stored: int = 0  # an .npz member's size in the zip's directory (header included)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS


def _readable(file: Path):
    """What zipfile opens: the path of a file on disk, the bytes of one held in memory (an upload)."""
    return file if on_disk(file) else file.open("rb")


def _npy_dtype(dtype: np.dtype) -> tuple[str, bool]:
    """gptviz's name of an .npy dtype, and whether it is stored in the other byte order."""
    if dtype.names is not None or dtype.subdtype is not None:
        return "records", False
    if dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        return f"float{dtype.itemsize * 8}", dtype.byteorder == (">" if np.little_endian else "<")
    if dtype.kind == "f":
        return f"{dtype.itemsize * 8}-bit long double", False
    return KINDS.get(dtype.kind, dtype.str), False


def _npz_headers(file: Path, error: type[Exception]) -> dict[str, ArrayHeader]:
    out = {}
    try:
        with zipfile.ZipFile(_readable(file)) as z:
            members = z.infolist()
            if len(members) > MAX_MEMBERS:
                raise error(f"{file}: holds {len(members):,} arrays; an .npz of weights holds a few")
            for info in members:
                name = info.filename.removesuffix(".npy")
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version not in HEADER_READERS:
                        raise ValueError(f"{name} is an .npy of version {version}")
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(f, max_header_size=MAX_NPY_HEADER)
                    start = f.tell()
                kind, swapped = _npy_dtype(dtype)
                nbytes = math.prod(shape) * dtype.itemsize
                if info.file_size < start + nbytes:  # the header claims more than the member holds
                    raise ValueError(f"{name} claims {size_text(nbytes)} but holds {size_text(info.file_size)}")
                out[name] = ArrayHeader(tuple(shape), kind, nbytes, swapped, info.file_size)
    except error:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, RuntimeError) as e:
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise error(f"{file}: not a readable .npz file ({why})") from None
    except NotImplementedError as e:  # a compression method zipfile does not know
        raise error(f"{file}: not a readable .npz file ({str(e)[:120]})") from None
    return out


def read_headers(path: Path, error: type[Exception] = SAEError) -> dict[str, ArrayHeader]:
    """Each array's shape, dtype and unpacked size, from a safetensors header or an .npz's zip
    directory and .npy headers: no array data is read. One line of `error` if the file is not one."""
    try:
        check_file(path, None, "weights file")
        if path.suffix == ".npz":
            return _npz_headers(path, error)
        header = safetensors_header(path)
    except CheckpointError as e:
        raise error(str(e)) from None
    out = {}
    for name, (shape, dtype) in header.items():
        out[name] = ArrayHeader(shape, dtype, math.prod(shape) * FLOATS.get(dtype, OTHER_SIZES.get(dtype, 8)))
    return out


def check_arrays(
    path: Path,
    expected_shapes: Mapping[str, tuple[int, ...]],
    limit: int | None = None,
    error: type[Exception] = SAEError,
    headers: Mapping[str, ArrayHeader] | None = None,
) -> dict[str, ArrayHeader]:
    """Refuse, in one line of `error` naming the file and the array, a weights file (.safetensors or
    .npz) unless every name of `expected_shapes` is in it with exactly that shape, as float16,
    bfloat16, float32 or float64, and those arrays unpack to at most `limit` bytes (None: no bound
    but the file's own) and, in an .npz, to at most MAX_UNPACK_RATIO times the file plus
    UNPACK_ALLOWANCE (real weights hardly compress; zeros compress 1000-fold). Arrays not named are
    never read and not checked. Nothing but headers is read; pass `headers` (read_headers) to skip
    reading them again. Returns the expected arrays' headers, in the order given.

    A transcoder's layer file: check_arrays(file, {"W_enc": (d_tc, d_model), ...}, limit, MyError)."""
    found = read_headers(path, error) if headers is None else headers
    out = {}
    for name, shape in expected_shapes.items():
        h = found.get(name)
        if h is None:
            raise error(f"{path}: has no {name} (the weights are {', '.join(expected_shapes)})")
        if h.shape != tuple(shape):
            raise error(
                f"{path}: {name} has shape {list(h.shape)}, but the model and its other arrays give {list(shape)}"
            )
        if not h.is_float:
            raise error(
                f"{path}: {name} holds {h.dtype}; gptviz reads weights as float16, bfloat16, float32 or float64"
            )
        out[name] = h
    total = sum(h.nbytes for h in out.values())
    if limit is not None and total > limit:
        raise error(
            f"{path}: its arrays unpack to {size_text(total)}, more than their shapes allow ({size_text(limit)})"
        )
    if path.suffix == ".npz":
        size = path.stat().st_size
        most = MAX_UNPACK_RATIO * size + UNPACK_ALLOWANCE
        if total > most:
            raise error(
                f"{path}: refused: its arrays would unpack to {size_text(total)} from {size_text(size)}, more than "
                f"gptviz allows ({size_text(most)}); real weights hardly compress"
            )
    return out


def unpacked_bytes(path: Path, error: type[Exception] = SAEError) -> int:
    """What every array of a weights file takes once unpacked (read from headers only): what a size
    limit on uploads counts for an .npz, whose bytes on disk may be a thousandth of it."""
    return sum(h.nbytes for h in read_headers(path, error).values())


def read_arrays(path: Path, names, error: type[Exception] = SAEError) -> dict[str, torch.Tensor]:
    """The named arrays of a file check_arrays passed, as tensors in this machine's byte order; only
    their bytes are read (an .npz member by member, a safetensors file on disk by its spans)."""
    try:
        if path.suffix == ".npz":
            return _npz_arrays(path, list(names))
        if on_disk(path):
            with safe_open(str(path), framework="pt") as f:
                return {name: f.get_tensor(name) for name in names}
        tensors = read_safetensors(path)  # an upload: its bytes are in memory already
        return {name: tensors[name] for name in names}
    except CheckpointError as e:
        raise error(str(e)) from None
    except Exception as e:  # a member or span damaged after its header: zlib, CRC, a short read
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise error(f"{path}: cannot be read ({why}); the file is damaged or truncated") from None


def _npz_arrays(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    out = {}
    with zipfile.ZipFile(_readable(path)) as z:
        members = {info.filename.removesuffix(".npy"): info for info in z.infolist()}  # as _npz_headers names them
        for name in names:
            with z.open(members[name]) as f:
                array = np.lib.format.read_array(f, allow_pickle=False)
            if array.dtype.byteorder not in ("=", "|", "<" if np.little_endian else ">"):
                array = array.astype(array.dtype.newbyteorder("="))
            out[name] = torch.from_numpy(np.ascontiguousarray(array))
    return out
