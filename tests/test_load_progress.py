"""gptviz.load(progress=) and gptviz.trace(progress=): the reports count the model's bytes filled (of a
total worked out here from the files' own shapes) and the blocks run, from 0 to the total; a Cancelled
raised by the callback passes through and leaves nothing behind; the results are the same with or
without a callback. Real files: the shipped checkpoints, a random Hugging Face Llama saved as sharded
safetensors, a nanoGPT ckpt.pt."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hf_helpers import hf_random_decoder
from test_nanogpt import write_ckpt

import gptviz
from gptviz.shipped import shipped_dir

KB, MB = 2**10, 2**20


def recorder(stop_at: int | None = None):
    """A callback that keeps every report, and raises Cancelled at the report whose done reaches stop_at."""
    got: list[gptviz.Progress] = []

    def report(p: gptviz.Progress) -> None:
        got.append(p)
        if stop_at is not None and p.done >= stop_at:
            raise gptviz.Cancelled("stopped by the test")

    return got, report


def counted(got: list[gptviz.Progress]) -> list[gptviz.Progress]:
    """The reports that count units, after checking that every stage's note (Progress.counts False: a
    stage begun before a byte is filled) comes before them, names its stage and counts nothing."""
    first = next((i for i, p in enumerate(got) if p.counts), len(got))
    assert all(not p.counts and p.stage and p.done == p.total == 0 for p in got[:first])
    assert all(p.counts for p in got[first:])
    return got[first:]


def assert_counts(got: list[gptviz.Progress], what: str, total: int) -> None:
    got = counted(got)
    assert got, "no report"
    assert {p.what for p in got} == {what} and {p.total for p in got} == {total}
    done = [p.done for p in got]
    assert done[0] == 0 and done[-1] == total
    assert done == sorted(done)  # never back
    seconds = [p.seconds for p in got]
    assert seconds == sorted(seconds)


def same_weights(a: gptviz.GPT, b: gptviz.GPT) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k


def file_elements(files) -> int:
    """The elements a set of safetensors files hold, from their JSON headers (read by hand here)."""
    n = 0
    for f in files:
        raw = f.read_bytes()
        header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
        n += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return n


@pytest.mark.parametrize("name", ["shakespeare-char", "shakespeare-llama"])
def test_a_shipped_checkpoint_reports_its_bytes_to_the_end(name):
    folder = shipped_dir("checkpoints") / name
    got, report = recorder()
    bundle = gptviz.load(folder, progress=report)
    elements = file_elements([folder / "model.safetensors"])  # float32 on disk and in memory, no duplicate
    assert bundle.model.num_params() == elements
    unit, what = (MB, "MB") if elements * 4 >= 16 * MB else (KB, "kB")
    assert_counts(got, what, math.ceil(elements * 4 / unit))
    # one report per weight filled, after the first
    assert len(counted(got)) == 1 + len(dict(bundle.model.named_parameters()))
    same_weights(bundle.model, gptviz.load(folder).model)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    hf = hf_random_decoder("llama", seed=3)
    root = tmp_path_factory.mktemp("sharded")
    hf.save_pretrained(root, max_shard_size="40KB")
    return hf, root


def test_a_sharded_hugging_face_folder_counts_every_shard(sharded):
    hf, root = sharded
    shards = sorted(root.glob("model-*.safetensors"))
    assert len(shards) > 1
    got, report = recorder()
    bundle = gptviz.load(root, progress=report)
    n = sum(p.numel() for p in hf.parameters())  # Hugging Face's own count: untied here
    assert file_elements(shards) == n
    assert_counts(got, "kB", math.ceil(n * 4 / KB))
    # the stages before the first byte, so that a bar can say what a long wait is
    assert [p.stage for p in got if not p.counts] == [
        f"reading the headers of {len(shards)} weight files",
        "reading the tokenizer",
    ]
    same_weights(bundle.model, gptviz.load(root).model)


def test_bfloat16_counts_the_bytes_it_computes_in(sharded):
    hf, root = sharded
    got, report = recorder()
    bundle = gptviz.load(root, dtype="bfloat16", progress=report)
    assert bundle.model.dtype == torch.bfloat16
    assert_counts(got, "kB", math.ceil(sum(p.numel() for p in hf.parameters()) * 2 / KB))


def test_a_cancelled_load_passes_through_and_the_next_load_works(sharded):
    _, root = sharded
    full, _ = recorder()
    gptviz.load(root, progress=full.append)
    half = full[-1].total // 2
    got, stop = recorder(stop_at=half)
    with pytest.raises(gptviz.Cancelled, match="stopped by the test"):
        gptviz.load(root, progress=stop)
    assert 0 < got[-1].done < got[-1].total  # stopped part way
    again, report = recorder()
    same_weights(gptviz.load(root, progress=report).model, gptviz.load(root).model)
    assert again[-1].done == again[-1].total


def test_a_nanogpt_checkpoint_reports_too(tmp_path):
    sd = write_ckpt(tmp_path / "out")
    got, report = recorder()
    bundle = gptviz.load(tmp_path / "out" / "ckpt.pt", progress=report)
    n = sum(v.numel() for k, v in sd.items() if k != "lm_head.weight")  # nanoGPT ties its head
    assert bundle.model.num_params() == n
    assert_counts(got, "kB", math.ceil(n * 4 / KB))
    with pytest.raises(gptviz.Cancelled):
        gptviz.load(tmp_path / "out" / "ckpt.pt", progress=recorder(stop_at=1)[1])


def all_hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_trace_reports_each_block_and_records_the_same(sharded):
    _, root = sharded
    bundle = gptviz.load(root)
    ids = list(range(3, 15))
    got, report = recorder()
    with_bar = gptviz.trace(bundle.model, ids, progress=report)
    assert_counts(got, "blocks", bundle.model.config.n_layer)
    assert len(got) == 1 + bundle.model.config.n_layer
    plain = gptviz.trace(bundle.model, ids)
    assert set(with_bar.names) == set(plain.names)
    for name in plain.names:
        assert np.array_equal(with_bar[name], plain[name]), name
    assert all_hooks(bundle.model) == 0


def test_a_cancelled_trace_leaves_no_hook_and_the_next_trace_works(sharded):
    _, root = sharded
    model = gptviz.load(root).model
    ids = list(range(3, 15))
    got, stop = recorder(stop_at=1)
    with pytest.raises(gptviz.Cancelled):
        gptviz.trace(model, ids, progress=stop)
    assert got[-1].done == 1 < model.config.n_layer
    assert all_hooks(model) == 0
    a, b = gptviz.trace(model, ids), gptviz.trace(model, ids, progress=lambda p: None)
    assert np.array_equal(a["logits"], b["logits"])
