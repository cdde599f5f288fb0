"""The lesson format's features slide and a slide's steering (gptviz.lessons): the keys checked when
the file is read (one line naming the slide), and what a features slide shows computed by hand,
steered by a forward hook that adds the vector itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sae_helpers import random_sae

import gptviz
from gptviz import lessons
from gptviz.lessons import content
from gptviz.steering_spec import SteeringSpec

ROOT = Path(__file__).resolve().parents[1]
HEAD = 'title = "F"\n[[slides]]\npage = "mask"\ntitle = "first"\n[[slides]]\ntitle = "second"\n'


def test_a_features_slide_and_a_steered_slide_read():
    text = HEAD + 'page = "features"\nsae = "l2-x"\nfeature = 12\nposition = 3\n'
    text += '[[slides]]\npage = "attention"\ntitle = "t"\nsteer = { neuron = [1, 5], layer = 2, coeff = -4.5 }\n'
    a, b = lessons.parse_lesson(text).slides[1:]
    assert (a.page, a.sae, a.feature, a.position, a.steer) == ("features", "l2-x", 12, 3, None)
    assert b.steer == SteeringSpec("neuron", 2, -4.5, neuron=(1, 5)) and hash(b) != hash(a)


@pytest.mark.parametrize(
    "slide, said",
    [
        ('page = "attention"\nfeature = 3', "only a features slide shows a 'feature'"),
        ('page = "mask-leak"\nsteer = { feature = 1, layer = 0, coeff = 1 }', "a mask-leak slide does not steer"),
        ('page = "mask"\nsteer = { feature = 1, layer = 0, coeff = 1 }', "a mask slide does not steer"),
        ('page = "features"\nsae = "../../etc"', "not a path"),
        ('page = "features"\nsae = "a/b"', "not a path"),
        ('page = "attention"\nsae = "x"', "'sae' is for a features slide"),
        ('page = "features"\nfeature = -1', "'feature' must be a whole number"),
        ('page = "heads"\nsteer = { feature = 1, layer = 0 }', "a layer and a coeff"),
        ('page = "heads"\nsteer = { pairs = [["a|b", "c"]], layer = 0, coeff = 1 }', "without '|'"),
        ('page = "heads"\nsteer = "feature:1@0*4"', "'steer' is a table"),
    ],
)
def test_a_bad_features_or_steer_key_is_one_line_naming_its_slide(slide, said):
    with pytest.raises(lessons.LessonError, match="line 8, slide 2: ") as e:  # the wrong key's line
        lessons.parse_lesson(HEAD + slide + "\n", "F")
    assert said in str(e.value) and "\n" not in str(e.value)


def _by_hand(model, ids, sae, layer: int, v: torch.Tensor, coeff: float) -> np.ndarray:
    """[T, d_sae] features at blocks.1.resid_post with coeff * v added to block `layer`'s output by a
    forward hook, the topk SAE's equations written out here."""
    kept = {}

    def add(module, args, out):
        return out + coeff * v

    def keep(module, args, out):
        kept["x"] = out[0].double()

    hooks = [model.transformer.h[layer].register_forward_hook(add), model.transformer.h[1].register_forward_hook(keep)]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    pre = (kept["x"] - sae.b_dec.double()) @ sae.W_enc.double() + sae.b_enc.double()
    top = pre.topk(sae.k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, top.indices, top.values.clamp_min(0)).numpy()


def test_a_steered_features_slide_shows_the_hooks_numbers(tmp_path):
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=16))
    gptviz.save(model, tmp_path / "m", gptviz.CharTokenizer(list("abcdefghijklmnopqrst")))
    bundle = gptviz.load(tmp_path / "m")
    sae = random_sae("topk", d_in=16, d_sae=48, site="blocks.1.resid_post")
    text = HEAD + 'page = "features"\nposition = 4\nsteer = { neuron = [0, 7], layer = 0, coeff = 3.0 }\n'
    slide = lessons.parse_lesson(text).slides[1]
    ids = bundle.tokenizer.encode("abcabcdd")
    steered = gptviz.trace(bundle.model, ids, interventions=[slide.steer.intervention(bundle)])
    c = content.build(slide, bundle, steered, sae)
    v = bundle.model.transformer.h[0].mlp.c_proj.weight[:, 7].detach()
    want = _by_hand(bundle.model, ids, sae, 0, v, 3.0)
    f = int(np.argmax(want[4]))  # no feature named: the strongest at the slide's position
    assert dict(c.facts)["feature"] == f"{f} of 48"
    np.testing.assert_allclose(np.asarray(c.figure.data[0].y), want[:, f], atol=1e-5)
    plain = _by_hand(bundle.model, ids, sae, 0, v, 0.0)
    assert np.abs(plain - want).max() > 1e-3  # the steering moved the features
    assert c.figure.data[0].marker.color[4] != c.figure.data[0].marker.color[3]  # the position is marked
    assert "steered: neuron:0.7@0*3" in c.caption


def test_the_shipped_feature_slide_says_what_the_model_does():
    """Its note: feature 1454 fires on the space after "upon", and nowhere else in the sentence."""
    slide = next(s for s in lessons.shipped_lesson("how-attention-works").slides if s.page == "features")
    bundle = gptviz.load(ROOT / "checkpoints" / "shakespeare-char")
    sae = gptviz.load_sae(ROOT / "checkpoints" / "shakespeare-char" / "saes" / slide.sae, model=bundle.model)
    ids = bundle.tokenizer.encode(slide.prompt)
    trace = gptviz.trace(bundle.model, ids)
    c = content.build(slide, bundle, trace, sae)
    acts = gptviz.feature_activations(trace, sae)[:, slide.feature]
    fired = np.flatnonzero(acts > 0).tolist()
    assert fired == [i for i in range(len(slide.prompt)) if slide.prompt[i - 4 : i + 1] == "upon "]
    assert len(fired) == 3 and slide.position in fired
    # the bars are a window around the slide's position (lessons.zoom): the table names every place it fires
    assert sorted(int(t.split(" ")[0]) for t in c.table["token"]) == fired
    assert dict(c.facts)["fires on"] == f"3 of {len(ids)} tokens"
