"""Generation stops at the model's end-of-text token as Hugging Face's generate does (eos_token_id from
config.json or generation_config.json, kept by the load), unless told to go on; `stopped` says so."""

from __future__ import annotations

import json

import pytest
import torch
from hf_helpers import hf_random_decoder

import gptviz
from gptviz.progress import Cancelled

transformers = pytest.importorskip("transformers")

PROMPT = [5, 17, 42, 8, 60, 3, 91]
N = 12


def _greedy_hf(hf, eos):
    hf.generation_config.eos_token_id = eos
    hf.generation_config.pad_token_id = 0
    with torch.no_grad():
        return hf.generate(torch.tensor([PROMPT]), max_new_tokens=N, do_sample=False)[0].tolist()


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    """A random Mistral model, the token HF's greedy decoding makes 4th, saved with it as eos."""
    hf = hf_random_decoder("mistral")
    free = _greedy_hf(hf, None)[len(PROMPT) :]
    assert len(free) == N
    eos = next(t for i, t in enumerate(free) if i >= 3 and t not in free[:i])  # its first appearance
    hf.config.eos_token_id = eos
    path = tmp_path_factory.mktemp("mistral")
    hf.save_pretrained(path)
    return hf, path, eos, free


def test_stops_where_hugging_face_stops(mistral):
    hf, path, eos, free = mistral
    want = _greedy_hf(hf, eos)
    assert want[-1] == eos and len(want) < len(PROMPT) + N  # HF stopped early, at the eos
    bundle = gptviz.load(path)
    assert bundle.model.config.eos_token_id == (eos,)
    g = gptviz.generate(bundle.model, PROMPT, N, temperature=0)
    assert g.ids == want and g.stopped == "eos" and g.stop_reason == "eos"
    on = gptviz.generate(bundle.model, PROMPT, N, temperature=0, stop_at_eos=False)
    assert on.new_ids == free and on.stopped == "" and on.stop_reason == "length"


def test_generation_config_names_the_eos(mistral, tmp_path):
    hf, path, eos, free = mistral
    other = free[1] if free[1] != eos else free[2]  # an earlier token than config.json's eos
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [other, 10**9]}))
    model = gptviz.load(tmp_path).model
    assert model.config.eos_token_id == (other,)  # an id outside the vocabulary stops nothing: left out
    g = gptviz.generate(model, PROMPT, N, temperature=0)
    assert g.new_ids[-1] == other and g.stopped == "eos" and len(g.new_ids) == free.index(other) + 1


def test_progress_reports_each_token_and_cancel_stops(mistral):
    _, path, eos, free = mistral
    model = gptviz.load(path).model
    seen = []
    gptviz.generate(model, PROMPT, 5, temperature=0, stop_at_eos=False, progress=seen.append)
    assert [(p.done, p.total, p.what) for p in seen] == [(i, 5, "tokens") for i in range(6)]

    def cancel(p):
        if p.done == 2:
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        gptviz.generate(model, PROMPT, 5, temperature=0, progress=cancel)


def test_a_bad_eos_is_one_clear_line():
    with pytest.raises(gptviz.ConfigError, match="eos_token_id"):
        gptviz.GPTConfig(vocab_size=10, eos_token_id=[3, 12])
    assert gptviz.GPTConfig(vocab_size=10, eos_token_id=3).eos_token_id == (3,)
