"""SAE files that lie about their size or hold what is not a weight: refused in one line from the zip's
directory and the array headers, before any array is unpacked (features/vetting.py).

The bombs are written member by member (a header, then zeros streamed into a deflated zip), so the
test itself never holds the arrays it claims; tracemalloc (which counts NumPy's buffers) shows that
the refusal came before the allocation."""

from __future__ import annotations

import re
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch
from conftest import tiny_model
from sae_helpers import random_sae
from safetensors.torch import save_file

import gptviz
from gptviz.features import SAEError, vetting

NAMES = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")
CLAIMED = 2**20  # features: W_enc [16, 2^20] float32 is 64 MB, the file about 130 KB


def params(sae) -> dict[str, np.ndarray]:
    return {n: getattr(sae, n).detach().numpy() for n in NAMES}


def shapes(d_in: int, d_sae: int) -> dict[str, tuple[int, ...]]:
    return {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,), "threshold": (d_sae,)}


def zero_npz(path, arrays: dict[str, tuple[tuple[int, ...], str]], short: int = 0):
    """An .npz whose members are .npy headers of these (shape, dtype) and zeros, deflated; `short`
    bytes fewer zeros than the header claims."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = bytes(2**20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (shape, dtype) in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
                np.lib.format.write_array_header_1_0(f, header | {"shape": shape})
                left = int(np.prod(shape)) * np.dtype(dtype).itemsize - short
                while left > 0:
                    f.write(chunk[: min(left, len(chunk))])
                    left -= len(chunk)
    return path


def peak_mb(fn) -> tuple[BaseException | None, float]:
    """What fn raised (or None) and the peak of Python's and NumPy's allocations meanwhile, in MB."""
    tracemalloc.start()
    try:
        fn()
        error = None
    except Exception as e:
        error = e
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return error, peak


def one_line(error: BaseException | None, words: str) -> str:
    assert isinstance(error, SAEError), repr(error)
    text = str(error)
    assert words in text, text
    assert "\n" not in text and "Traceback" not in text and len(text) < 400
    return text


def test_a_zero_bomb_npz_is_refused_from_its_directory_before_unpacking(tmp_path):
    """The issue's bomb: a params.npz of compressed zeros claiming 128 MB of arrays at the model's width."""
    bomb = zero_npz(
        tmp_path / "bomb-res" / "layer_1" / "params.npz", {n: (s, "<f4") for n, s in shapes(16, CLAIMED).items()}
    )
    assert bomb.stat().st_size < 1_000_000
    model = tiny_model()
    for call in (lambda: gptviz.load_sae(bomb, model=model), lambda: gptviz.load_sae(bomb)):
        error, peak = peak_mb(call)
        one_line(error, "would unpack to 142.6 MB from")
        assert peak < 8, peak  # nothing of the 142.6 MB was allocated


def test_a_bomb_for_another_model_is_refused_by_the_width_before_unpacking(tmp_path):
    """The issue's other order: 'trained on another model' came after 3 GB were unpacked."""
    bomb = zero_npz(
        tmp_path / "x-res" / "layer_1" / "params.npz", {n: (s, "<f4") for n, s in shapes(2304, 8192).items()}
    )
    error, peak = peak_mb(lambda: gptviz.load_sae(bomb, model=tiny_model()))
    one_line(error, "trained on another model")
    assert peak < 8, peak


def test_an_npy_header_claiming_more_than_its_member_holds_is_refused(tmp_path):
    arrays = {n: (s, "<f4") for n, s in shapes(16, 8).items()}
    cut = zero_npz(tmp_path / "cut-res" / "layer_1" / "params.npz", arrays, short=4)
    one_line(peak_mb(lambda: gptviz.load_sae(cut))[0], "but holds")


def test_an_unnamed_member_is_never_read(tmp_path):
    """A sixth member claiming 64 MB beside a real SAE: only the five arrays are unpacked."""
    sae = random_sae("jumprelu", apply_b_dec_to_input=False)
    path = tmp_path / "extra-res" / "layer_1" / "params.npz"
    zero_npz(path, {"notes": ((16, CLAIMED), "<f4")})
    with zipfile.ZipFile(path, "a") as z:
        for name, array in params(sae).items():
            with z.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array(f, array)
    error, peak = peak_mb(lambda: gptviz.load_sae(path, model=tiny_model()))
    assert error is None, error
    assert peak < 8, peak


REFUSED_DTYPES = {  # the six, and their kin
    "longdouble": (np.longdouble, "-bit long double"),
    "text": ("<U8", "text"),
    "bytes": ("S8", "bytes"),
    "datetime": ("<M8[s]", "dates"),
    "timedelta": ("<m8[s]", "time spans"),
    "structured": ([("a", "<f4"), ("b", "<f4")], "records"),
    "int32": ("<i4", "integers"),
    "complex": ("<c8", "complex numbers"),
    "bool": ("?", "booleans"),
}


@pytest.mark.parametrize("name", list(REFUSED_DTYPES))
def test_an_npz_array_of_another_dtype_is_refused_in_one_line(tmp_path, name):
    dtype, words = REFUSED_DTYPES[name]
    if np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize <= 8:
        pytest.skip("this machine's long double is a double")
    p = params(random_sae("jumprelu", apply_b_dec_to_input=False))
    p["W_enc"] = np.zeros(p["W_enc"].shape, dtype=dtype)
    path = tmp_path / "g-res" / "layer_1" / "params.npz"
    path.parent.mkdir(parents=True)
    np.savez(path, **p)
    text = one_line(peak_mb(lambda: gptviz.load_sae(path))[0], words)
    assert "W_enc holds" in text
    assert "float16, bfloat16, float32 or float64" in text


def test_an_object_array_is_refused_without_unpickling(tmp_path):
    p = params(random_sae("jumprelu", apply_b_dec_to_input=False))
    p["b_dec"] = np.array([object()] * 16, dtype=object)
    path = tmp_path / "o-res" / "layer_1" / "params.npz"
    path.parent.mkdir(parents=True)
    np.savez(path, **p)
    one_line(peak_mb(lambda: gptviz.load_sae(path))[0], "b_dec holds Python objects")


@pytest.mark.parametrize("dtype", [">f4", ">f8", "<f2", ">f2", "<f8"])
def test_big_endian_and_half_floats_load_converted(tmp_path, dtype):
    """The legitimate neighbours: floats of every width, in either byte order, give the SAE's values."""
    sae = random_sae("jumprelu", apply_b_dec_to_input=False)
    p = {n: a.astype(dtype) for n, a in params(sae).items()}
    path = tmp_path / "ok-res" / "layer_1" / "params.npz"
    path.parent.mkdir(parents=True)
    np.savez_compressed(path, **p)
    got = gptviz.load_sae(path, model=tiny_model())
    for name in NAMES:
        want = torch.from_numpy(p[name].astype("=f8")).float()
        assert torch.equal(getattr(got, name), want), name


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float8_e4m3fn, torch.uint8])
def test_a_safetensors_array_of_another_dtype_is_refused_in_one_line(tmp_path, dtype):
    p = {n: torch.from_numpy(a) for n, a in params(random_sae("jumprelu", apply_b_dec_to_input=False)).items()}
    p["threshold"] = p["threshold"].to(dtype)
    path = tmp_path / "s-res" / "layer_1" / "params.safetensors"
    path.parent.mkdir(parents=True)
    save_file(p, str(path))
    one_line(peak_mb(lambda: gptviz.load_sae(path))[0], "threshold holds")


def test_gemma_scope_2_lowercase_files_load_like_gemma_scope(tmp_path):
    """Gemma Scope 2 names its arrays w_enc, w_dec, b_enc, b_dec, threshold, in folders such as
    resid_post_all/layer_1_width_16k_l0_big/: both containers load, site from the path, in bfloat16 too."""
    sae = random_sae("jumprelu", apply_b_dec_to_input=False)
    p = params(sae)
    lower = {n.lower(): torch.from_numpy(a) for n, a in p.items()}
    folder = tmp_path / "gemma-scope-2-1b-pt" / "resid_post_all" / "layer_1_width_16k_l0_big"
    folder.mkdir(parents=True)
    save_file(lower, str(folder / "params.safetensors"))
    np.savez(tmp_path / "params.npz", **{n: a.numpy() for n, a in lower.items()})
    x = torch.randn(5, 16)
    for got in (
        gptviz.load_sae(folder, model=tiny_model()),
        gptviz.load_sae(tmp_path / "params.npz", site="blocks.1.resid_post"),
    ):
        assert got.site == "blocks.1.resid_post" and got.architecture == "jumprelu"
        assert torch.equal(got.encode(x), sae.encode(x))
    save_file({n: t.to(torch.bfloat16) for n, t in lower.items()}, str(folder / "params.safetensors"))
    half = gptviz.load_sae(folder)
    assert torch.equal(half.W_enc, sae.W_enc.to(torch.bfloat16).float())


def test_check_arrays_is_the_one_check_a_transcoder_loader_calls(tmp_path):
    """The reusable check: names, shapes, dtypes, the caller's bound, and the caller's error class."""

    class TranscoderError(ValueError):
        pass

    path = tmp_path / "layer_0.safetensors"
    save_file(
        {"W_enc": torch.zeros(8, 16), "b_enc": torch.zeros(8), "step": torch.zeros(1, dtype=torch.int64)}, str(path)
    )
    found = vetting.check_arrays(path, {"W_enc": (8, 16), "b_enc": (8,)}, limit=1000)
    assert found["W_enc"].nbytes == 512 and found["W_enc"].dtype == "float32"
    for expected, limit, words in (
        ({"W_dec": (8, 16)}, None, "has no W_dec"),
        ({"W_enc": (16, 8)}, None, "W_enc has shape [8, 16]"),
        ({"step": (1,)}, None, "step holds int64"),
        ({"W_enc": (8, 16)}, 100, "more than their shapes allow"),
    ):
        with pytest.raises(TranscoderError, match=re.escape(words)):
            vetting.check_arrays(path, expected, limit, TranscoderError)  # noqa: B023 (run at once)
    assert vetting.unpacked_bytes(path) == 512 + 32 + 8
    with pytest.raises(TranscoderError, match="not a readable safetensors"):
        (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
        vetting.check_arrays(tmp_path / "junk.safetensors", {}, None, TranscoderError)
    with pytest.raises(TranscoderError, match="not a readable .npz"):
        (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04" + b"\0" * 60)
        vetting.read_headers(tmp_path / "junk.npz", TranscoderError)
