"""Uploads on a class server: the limits count what a file unpacks to, not what it weighs as sent."""

from __future__ import annotations

import functools
import io
import os
import zipfile

import numpy as np
import pytest

from gptviz.dashboard import uploads
from gptviz.errors import CheckpointError


class _File(io.BytesIO):
    """What st.file_uploader hands over: a BytesIO with a name and a size."""

    def __init__(self, name: str, data: bytes):
        super().__init__(data)
        self.name, self.size = name, len(data)


@functools.cache
def zero_npz(claimed: int) -> bytes:
    """An .npz of one float32 array of `claimed` bytes of zeros, deflated (about a thousandth of it)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z, z.open("W_enc.npy", "w") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (claimed // 4,)})
        for _ in range(claimed // 2**20):
            f.write(bytes(2**20))
    return out.getvalue()


def test_an_npz_counts_what_it_unpacks_to_against_the_upload_limit():
    bomb = _File("params.npz", zero_npz(64 * 2**20))
    assert bomb.size < 2**20
    assert uploads.upload_bytes([bomb]) >= 64 * 2**20 and bomb.tell() == 0
    with pytest.raises(CheckpointError) as e:
        uploads.SessionUploads().save([bomb], 16, "GPTVIZ_MAX_UPLOAD_MB")
    assert str(e.value) == "the upload is 64 MB once unpacked (0 MB as sent); the limit is 16 MB (GPTVIZ_MAX_UPLOAD_MB)"
    # its neighbours: a real-sized npz and a file that is not a zip count their own size
    real = _File("params.npz", zero_npz(2**20))
    held = uploads.SessionUploads().save([real], 16, "X")
    assert held.nbytes == uploads.upload_bytes([real]) > real.size
    noise = _File("ckpt.pt", os.urandom(1000))
    assert uploads.upload_bytes([noise]) == 1000


def test_the_class_total_counts_unpacked_uploads():
    total = 100 * 2**20
    first = uploads.SessionUploads()
    first.save([_File("params.npz", zero_npz(64 * 2**20))], 80, "X", total)
    with pytest.raises(CheckpointError, match="limit for the whole class"):
        uploads.SessionUploads().save([_File("params.npz", zero_npz(64 * 2**20))], 80, "X", total)
    first.close()
    uploads.SessionUploads().save([_File("params.npz", zero_npz(64 * 2**20))], 80, "X", total)
