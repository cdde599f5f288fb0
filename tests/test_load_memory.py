"""Memory and time are bounded before anything is allocated: a config claiming a huge model, and a
small ckpt.pt that unpacks to a GiB, are refused within seconds at a small peak memory.

Each load runs in a fresh Python process, which reports its own peak RSS (VmHWM).
The bound: PEAK_MB for the whole process, torch and gptviz imports included (about 350 MB of it
here). Loading any of these files naively costs from 1.3 GB (the zip) to terabytes (the configs)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from untrusted_helpers import hf, nano_args, nano_state, nanogpt, native, zip_bomb

PEAK_MB = 600
CHILD = textwrap.dedent(
    """
    import json, sys, time
    import gptviz
    results = []
    for path in sys.argv[1:]:
        t0 = time.perf_counter()
        try:
            gptviz.load(path)
            error = None
        except gptviz.GptvizError as e:
            error = str(e)
        results.append({"path": path, "error": error, "seconds": time.perf_counter() - t0})
    # VmHWM: this process image's own peak. ru_maxrss would also count the parent's RSS at fork
    # (Linux carries it across exec), so in a large test run it reports pytest's size.
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    peak_mb = int(hwm.split()[1]) / 1024
    print(json.dumps({"results": results, "peak_mb": peak_mb}))
    """
)
pytestmark = pytest.mark.slow


def load_in_child(*paths) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_configs_claiming_huge_models_are_refused_fast_and_small(tmp_path):
    gpt2_xl = dict(n_layer=48, n_head=25, n_embd=1600)  # 1.5 B parameters: 6 GB if it were built
    cases = {
        native(tmp_path / "a", {"block_size": 20_000_000}): "block_size=20,000,000 is above",
        native(tmp_path / "b", {"n_layer": 1000}): "n_layer=1,000 is above",
        native(tmp_path / "c", {"n_layer": 10000}): "n_layer=10,000 is above",
        native(tmp_path / "d", {"n_embd": 10**6, "n_head": 1}): "n_embd=1,000,000 is above",
        native(tmp_path / "e", {"vocab_size": 10**9}): "vocab_size=1,000,000,000 is above",
        # within every bound, so only the weights' own shapes can refuse them before GPT() is built
        native(tmp_path / "f", {"n_layer": 100, "n_head": 16, "n_embd": 1024, "block_size": 16000}): "has shape",
        nanogpt(tmp_path / "g", nano_args(**gpt2_xl, vocab_size=50257, block_size=1024)): "has shape",
        nanogpt(tmp_path / "h", nano_args(n_layer=200)): "weights missing for 2,376 keys, e.g.",
        hf(tmp_path / "i", {**gpt2_xl, "vocab_size": 50257, "n_positions": 1024}): "has shape",
    }
    out = load_in_child(*cases)
    for (path, words), result in zip(cases.items(), out["results"]):
        assert result["error"] is not None and words in result["error"], result
        assert str(path) in result["error"]
        assert result["seconds"] < 2, result
    assert out["peak_mb"] < PEAK_MB, f"peak RSS {out['peak_mb']:.0f} MB"


def test_a_small_ckpt_holding_a_gib_of_compressed_zeros_is_refused_before_unpacking(tmp_path):
    bomb = zip_bomb(nanogpt(tmp_path) / "ckpt.pt", zeros=2**30)
    assert bomb.stat().st_size < 8 * 2**20
    out = load_in_child(bomb)
    (result,) = out["results"]
    assert "refused: it would unpack to 1.1 GB" in result["error"], result
    assert result["seconds"] < 2 and out["peak_mb"] < PEAK_MB, out

    # the control: torch.load itself, weights_only and all, does allocate the GiB for this file
    naive = "import resource, sys, torch; torch.load(sys.argv[1], weights_only=True); "
    naive += "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    p = subprocess.run([sys.executable, "-c", naive, str(bomb)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert float(p.stdout) > 1024, f"torch.load peaked at only {p.stdout} MB: the bomb is not real"


def test_weights_whose_shapes_lie_are_refused_before_they_are_read(tmp_path):
    """A torch weights file (nanoGPT's ckpt.pt, GPT-2's pytorch_model.bin, a Llama's .bin shards) is
    read with its tensors mapped first: one embedding of 480 MB where the config wants 11 × 16 is
    refused from its shape, never read into memory (before: read whole, then refused)."""
    from hf_helpers import hf_random_decoder

    huge = torch.zeros(120_000_000 // 16, 16)  # 480 MB as float32 (zero pages: nothing here either)

    nano = nanogpt(tmp_path / "nano", model={**nano_state(), "transformer.wte.weight": huge})
    gpt2 = hf(tmp_path / "gpt2", weights="bin")
    gpt2_state = torch.load(gpt2 / "pytorch_model.bin", weights_only=True)
    torch.save({**gpt2_state, "transformer.wte.weight": huge}, gpt2 / "pytorch_model.bin")

    llama = tmp_path / "llama"
    model = hf_random_decoder("llama")
    model.config.save_pretrained(llama)
    state = model.state_dict()
    names = sorted(state)
    shards = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for file, keys in shards.items():
        shard = {k: state[k] for k in keys}
        if "model.embed_tokens.weight" in shard:
            shard["model.embed_tokens.weight"] = torch.zeros(120_000_000 // 48, 48)
        torch.save(shard, llama / file)
    index = {"weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (llama / "pytorch_model.bin.index.json").write_text(json.dumps(index))

    out = load_in_child(nano, gpt2, llama)
    for result in out["results"]:
        assert result["error"] is not None and "has shape" in result["error"], result
    assert out["peak_mb"] < PEAK_MB, f"peak RSS {out['peak_mb']:.0f} MB"


def test_a_file_that_cannot_be_mapped_is_read_once(tmp_path):
    """torch's older non-zip format and a zip whose entries were compressed cannot be mapped: the
    shapes-first pass then reads the file whole, and that one read is what loads (reading it again
    held it twice: 693 MB against 497 for 200 MB of optimizer state)."""
    import zipfile

    optimizer = {"state": torch.randn(200 * 2**20 // 4)}  # 200 MB that does not compress
    legacy = tmp_path / "legacy" / "ckpt.pt"
    legacy.parent.mkdir()
    ckpt = {"model": nano_state(), "model_args": nano_args(), "optimizer": optimizer}
    torch.save(ckpt, legacy, _use_new_zipfile_serialization=False)
    plain = nanogpt(tmp_path / "plain", optimizer=optimizer) / "ckpt.pt"
    rezipped = tmp_path / "rezipped" / "ckpt.pt"
    rezipped.parent.mkdir()
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(rezipped, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    # against a file read once in the same way (mapped, then read): a second copy would add 200 MB
    ref = load_in_child(plain)["peak_mb"]
    for path in (legacy, rezipped):
        out = load_in_child(path)
        assert out["results"][0]["error"] is None, out
        assert out["peak_mb"] < ref + 100, f"{path.parent.name}: peak RSS {out['peak_mb']:.0f} MB, {ref:.0f} read once"
