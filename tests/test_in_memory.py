"""Checkpoints loaded from memory (an upload never touches the disk): every format read from a
MemoryPath gives exactly what the same files give from disk, and every bad file the disk tests try
is refused from memory with the same sentence, the zip-bomb and pickle checks included."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from bpe_helpers import TEXT, tiny_bpe
from test_untrusted_files import CASES
from untrusted_helpers import CHARS, MODEL, hf, nanogpt, native

import gptviz
from gptviz.tokenizers.bpe import BPETokenizer

transformers = pytest.importorskip("transformers")
from transformers import GPT2TokenizerFast  # noqa: E402


def in_memory(folder) -> gptviz.MemoryPath:
    """The folder's files as an upload holds them: names and bytes, nothing on disk."""
    return gptviz.MemoryPath({p.name: p.read_bytes() for p in folder.iterdir()}, label="upload: test")


def bpe_native(root):
    config = gptviz.GPTConfig(**{**MODEL.config.to_dict(), "vocab_size": tiny_bpe().vocab_size})
    return gptviz.save(gptviz.GPT(config), root / "bpe", tiny_bpe())


FORMATS = {
    "native-char": native,
    "native-bpe": bpe_native,
    "nanogpt+meta": nanogpt,
    "hf-safetensors": hf,
    "hf-bin": lambda r: hf(r, weights="bin"),
}


@pytest.mark.parametrize("build", FORMATS.values(), ids=FORMATS.keys())
def test_every_format_loads_from_memory_as_from_disk(tmp_path, build):
    folder = build(tmp_path)
    disk, memory = gptviz.load(folder), gptviz.load(in_memory(folder))
    a, b = disk.model.state_dict(), memory.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert memory.report.format == disk.report.format and memory.report.tokenizer == disk.report.tokenizer
    assert memory.report.path == "upload: test"  # named by the upload, not by any server path
    if disk.tokenizer is not None:
        text = "".join(CHARS) if disk.tokenizer.kind == "char" else TEXT
        assert memory.tokenizer.encode(text) == disk.tokenizer.encode(text)


def test_vocab_and_merges_from_memory_encode_as_transformers_reads_them(tmp_path):
    """merges.txt parsed from bytes (the tokenizers library only reads it from a file) against
    transformers' own GPT2TokenizerFast on the same two files."""
    folder = tmp_path / "tok"
    folder.mkdir()
    tiny_bpe().tok.model.save(str(folder))
    (folder / "merges.txt").write_text("#version: 0.2\n" + (folder / "merges.txt").read_text().split("\n", 1)[1])
    mem = in_memory(folder)
    ours = BPETokenizer.from_vocab_merges(mem / "vocab.json", mem / "merges.txt")
    theirs = GPT2TokenizerFast.from_pretrained(str(folder), local_files_only=True)
    from_disk = BPETokenizer.from_vocab_merges(folder / "vocab.json", folder / "merges.txt")
    for text in TEXT.splitlines():
        assert ours.encode(text) == theirs(text)["input_ids"] == from_disk.encode(text), text
    with pytest.raises(gptviz.CheckpointError, match="not a readable vocab.json"):
        bad = gptviz.MemoryPath({"vocab.json": b"{}", "merges.txt": b"a b c\n"})
        BPETokenizer.from_vocab_merges(bad / "vocab.json", bad / "merges.txt")


def _memory_case(tmp_path, build):
    """The case's checkpoint as an upload would hold it, or None where an upload cannot be that
    (a path, a folder or FIFO in place of a file, a sparse 6 GB file nobody can upload)."""
    path = build(tmp_path)
    if isinstance(path, str) or not os.path.lexists(path):
        return None
    folder = path if os.path.isdir(path) else path.parent
    files = {}
    for p in folder.iterdir():
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) or st.st_blocks * 512 < st.st_size // 2:
            return None
        files[p.name] = p.read_bytes()
    mem = gptviz.MemoryPath(files, label="upload: x")
    return mem if os.path.isdir(path) else mem / path.name


# what no upload can be: a path, a folder, FIFO or symlink loop in place of a file, a sparse 6 GB file
NOT_UPLOADS = ("path-", "-dir", "-fifo", "-loop", "-sparse")
MEMORY_CASES = [c for c in CASES if not any(part in c[0] for part in NOT_UPLOADS)]


@pytest.mark.parametrize("build, words, names", [c[1:] for c in MEMORY_CASES], ids=[c[0] for c in MEMORY_CASES])
def test_a_bad_upload_is_refused_with_the_same_sentence(tmp_path, build, words, names):
    mem = _memory_case(tmp_path, build)
    assert mem is not None, "name this case in NOT_UPLOADS"
    with pytest.raises(gptviz.CheckpointError) as caught:
        gptviz.load(mem)
    message = str(caught.value)
    assert words in message and names in message, message
    assert "unexpected" not in message and "\n" not in message, message
    assert str(tmp_path) not in message  # an upload's message names its files, never a server path


def test_a_pickle_that_runs_code_is_refused_from_memory(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    folder = nanogpt(tmp_path)
    torch.save({"model": Payload(), "model_args": {}}, folder / "ckpt.pt")
    with pytest.raises(gptviz.CheckpointError, match="could run code"):
        gptviz.load(in_memory(folder))
    assert not (tmp_path / "ran").exists()


def test_a_memory_folder_is_read_only_and_flat():
    mem = gptviz.MemoryPath({"a.json": b"{}"})
    assert mem.is_dir() and (mem / "a.json").is_file() and not (mem / "b").exists()
    assert [p.name for p in mem.glob("*.json")] == ["a.json"]
    with pytest.raises(PermissionError):
        (mem / "a.json").open("wb")
    for bad in ("../x", "a/b", "", "x\0"):
        with pytest.raises(ValueError):
            gptviz.MemoryPath({bad: b""})


@pytest.mark.parametrize("kind, shard", [("llama", None), ("llama", "40KB"), ("qwen2", None), ("gpt_neox", None)])
def test_a_decoder_family_uploaded_equals_transformers(tmp_path, kind, shard):
    """A Hugging Face decoder (sharded too) read from memory gives transformers' own logits: the
    shards are read from their bytes (safe_open only opens files)."""
    from hf_helpers import PROMPT_LEN, hf_random_decoder

    hf = hf_random_decoder(kind, seed=3)
    hf.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert len(list(tmp_path.glob("*.safetensors"))) > 1
    bundle = gptviz.load(in_memory(tmp_path))
    ids = torch.randint(0, hf.config.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(bundle.model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
    disk = gptviz.load(tmp_path).model.state_dict()
    assert all(torch.equal(v, disk[k]) for k, v in bundle.model.state_dict().items())


@pytest.mark.parametrize("weights", ["safetensors", "bin"])
@pytest.mark.parametrize("where", ["memory", "disk"])
def test_a_fused_tensor_that_feeds_two_weights_loads_from_every_source(tmp_path, weights, where):
    """Phi-3's gate_up_proj is both the gate and the up projection: read once and used twice, from an
    upload and from a torch file on disk too (those are read whole; each tensor was let go after one
    use, and the second use failed with "unexpected KeyError … please report this")."""
    from hf_helpers import PROMPT_LEN, hf_random_decoder

    hf = hf_random_decoder("phi3", seed=4)
    if weights == "safetensors":
        hf.save_pretrained(tmp_path)
    else:
        hf.config.save_pretrained(tmp_path)
        torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    bundle = gptviz.load(in_memory(tmp_path) if where == "memory" else tmp_path)
    ids = torch.randint(0, hf.config.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(bundle.model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


def test_a_decoder_whose_tensor_changes_while_it_loads_is_named_by_its_folder(tmp_path, monkeypatch):
    """The message of a shape found wrong while the weights are copied names the checkpoint (a helper
    in load_hf_decoder once shadowed the path, and the message began with a function's repr)."""
    from hf_helpers import hf_random_decoder

    from gptviz.formats import hf_decoders
    from gptviz.formats.weights import Stacked

    hf_random_decoder("llama", seed=5).save_pretrained(tmp_path)
    real, real_shape = hf_decoders.Weights.get, Stacked.shape.fget
    changed = "input_layernorm.weight"

    def rewritten(self, key):  # as if the file changed between its header and its tensors
        t = real(self, key)
        return t[:-1] if key.endswith(changed) else t

    def rewritten_shape(self):  # the same, read as a tensor written straight into its parameter (on a CPU)
        shape = real_shape(self)
        return (shape[0] - 1, *shape[1:]) if self.sources[0].endswith(changed) else shape

    monkeypatch.setattr(hf_decoders.Weights, "get", rewritten)
    monkeypatch.setattr(Stacked, "shape", property(rewritten_shape))
    with pytest.raises(gptviz.CheckpointError) as e:
        gptviz.load(tmp_path)
    assert str(e.value).startswith(str(tmp_path)) and "has shape" in str(e.value) and "function" not in str(e.value)
