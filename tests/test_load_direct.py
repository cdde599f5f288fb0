"""A safetensors weight on disk is read straight into the memory that becomes its parameter (no mapping
of the file, no copy on the way), and building the empty model imports nothing more: a bf16 file loaded
in bf16 grows the process by the model and little else."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open

import gptviz
from gptviz.errors import CheckpointError
from gptviz.formats.weights import Weights

CHILD = textwrap.dedent(
    """
    import json, sys
    import torch, gptviz
    def kb(field):
        return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1])
    before = kb("VmRSS:")
    modules = set(sys.modules)
    bundle = gptviz.load(sys.argv[1], dtype="bfloat16")
    new = sorted(m for m in set(sys.modules) - modules if m.startswith(("torch._dynamo", "sympy")))
    print(json.dumps({"grew_mb": (kb("VmHWM:") - before) / 1024, "imported": new[:5]}))
    """
)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from gptviz.bench.load import SHAPES, write_checkpoint

    config = gptviz.GPTConfig(**{**SHAPES["tiny"], "n_layer": 4, "n_embd": 512, "n_inner": 2048, "n_head": 8})
    folder = tmp_path_factory.mktemp("llama") / "model"
    write_checkpoint(config, folder)
    return folder, config


def test_each_parameter_is_the_files_tensor_read_into_its_own_memory(shards):
    folder, _ = shards
    model = gptviz.load(folder, dtype="bfloat16").model
    file = next(folder.glob("*.safetensors"))
    with safe_open(str(file), framework="pt") as f:
        embed = f.get_tensor("model.embed_tokens.weight")
    wte = model.transformer.wte.weight
    assert torch.equal(wte, embed) and wte.dtype == torch.bfloat16
    assert wte.untyped_storage().nbytes() == wte.numel() * 2  # its own memory, no view into a larger block


@pytest.mark.slow
def test_a_bf16_load_grows_the_process_by_the_model_and_imports_no_compiler(shards):
    folder, config = shards
    model_mb = 2 * gptviz.GPT.empty(config).num_params() / 2**20
    p = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["imported"] == []  # torch's meta-device references pull in sympy and dynamo: 72 MB
    # 16 MB of the rest: the loaders' own imports (before: 72 MB more, and a second copy of each tensor)
    assert got["grew_mb"] < 1.05 * model_mb + 24, f"grew {got['grew_mb']:.0f} MB for a {model_mb:.0f} MB model"


def test_a_file_cut_short_while_loading_is_one_line(shards, tmp_path):
    folder, _ = shards
    file = next(folder.glob("*.safetensors"))
    copy = tmp_path / file.name
    copy.write_bytes(file.read_bytes())
    weights = Weights([copy])  # the header is read and checked here
    last = max(weights.shapes, key=lambda k: weights._spans[k][1])
    with open(copy, "r+b") as f:
        f.truncate(weights._spans[last][1] - 10)  # the last tensor's bytes now end early
    with pytest.raises(CheckpointError, match="ends inside a tensor"):
        weights.get(last)


def test_stacked_rows_are_written_block_by_block_in_any_dtype_and_layout(shards, monkeypatch):
    """q, k and v stacked into c_attn are read a few rows at a time through one small buffer and written
    straight into the parameter, converted on the way: the values are the stacked tensors' exactly, in
    the plain layout, the [in, out] one and the stored dtype."""
    from gptviz.formats import weights as weights_module
    from gptviz.formats.weights import Stacked

    folder, _ = shards
    weights = Weights(sorted(folder.glob("*.safetensors")))
    sources = tuple(f"model.layers.1.self_attn.{p}_proj.weight" for p in "qkv")
    part = Stacked(weights, sources)
    want = torch.cat([weights.get(s) for s in sources])
    assert part.shape == tuple(want.shape) and part.dtype == want.dtype == torch.bfloat16
    monkeypatch.setattr(weights_module, "BLOCK_ROWS", 7)  # many blocks, the last of each source short
    for out in (torch.empty(part.shape[::-1]).t(), torch.empty(part.shape), torch.empty(part.shape, dtype=want.dtype)):
        assert part.into(out) is True
        assert torch.equal(out, want.to(out.dtype)), (out.dtype, out.stride())


def test_nan_in_one_block_of_a_converted_weight_is_named(shards, tmp_path, monkeypatch):
    """The finiteness check runs on each block as it is converted: a NaN in one block of k_proj, in a bf16
    file computed in float32, is named as the c_attn weight it went into."""
    from safetensors.torch import load_file, save_file

    from gptviz.formats import weights as weights_module

    folder, _ = shards
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    key = "model.layers.2.self_attn.k_proj.weight"
    file = next(f for f in copy.glob("*.safetensors") if key in load_file(str(f)))
    state = load_file(str(file))
    state[key][100, 5] = float("nan")
    save_file(state, str(file), metadata={"format": "pt"})
    monkeypatch.setattr(weights_module, "BLOCK_ROWS", 16)  # the NaN's block is the seventh of eight
    warnings = gptviz.load(copy, dtype="float32").report.warnings
    assert "NaN or Inf in weights: transformer.h.2.attn.c_attn.weight" in warnings
