"""A steering vector named in words (gptviz.steering_spec): its text round-trips, a lesson's table
reads into the same spec, bad input is one line, and the vector it builds is the library's own."""

from __future__ import annotations

import numpy as np
import pytest
from sae_helpers import random_sae

import gptviz
from gptviz.steering_spec import SteeringSpec, SteeringSpecError

SPECS = [
    SteeringSpec("feature", 2, 4.0, feature=343),
    SteeringSpec("neuron", 0, -8.5, neuron=(1, 57)),
    SteeringSpec("pairs", 3, 0.25, pairs=(("I love thee", "I hate thee"), (" a@b*c:d ", "e%0Af"))),
    SteeringSpec("pairs", 1, 1 / 3, pairs=(("ROMEO.", "JULIET."),)),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_the_text_round_trips(spec):
    assert SteeringSpec.from_text(spec.text) == spec
    assert "\0" not in spec.text and spec.site == f"blocks.{spec.layer}.resid_post"


def test_the_text_is_what_the_docs_say():
    assert SteeringSpec.from_text("feature:343@2*4") == SteeringSpec("feature", 2, 4.0, feature=343)
    assert SteeringSpec("feature", 2, 4.0, feature=343).text == "feature:343@2*4"
    assert SteeringSpec.from_text("neuron:1.57@0*-8").neuron == (1, 57)
    pairs = SteeringSpec.from_text("pairs:I love thee|I hate thee\nsweet|bitter@2*4").pairs
    assert pairs == (("I love thee", "I hate thee"), ("sweet", "bitter"))


def test_a_lesson_table_reads_into_the_same_spec():
    assert SteeringSpec.from_table({"feature": 343, "layer": 2, "coeff": 4}, "slide 1") == SPECS[0]
    assert SteeringSpec.from_table({"neuron": [1, 57], "layer": 0, "coeff": -8.5}, "slide 1") == SPECS[1]
    table = {"pairs": [["I love thee", "I hate thee"], [" a@b*c:d ", "e%0Af"]], "layer": 3, "coeff": 0.25}
    assert SteeringSpec.from_table(table, "slide 1") == SPECS[2]


@pytest.mark.parametrize(
    "text, says",
    [
        ("feature343@2*4", "KIND:WHAT@LAYER*COEFF"),
        ("feature:343@2", "KIND:WHAT@LAYER*COEFF"),
        ("feature:-1@2*4", "the feature must be a whole number"),
        ("feature:3@x*4", "the layer must be"),
        ("feature:3@2*nan", "the coefficient must be a number"),
        ("feature:3@2*1e9", "the coefficient must be a number"),
        ("neuron:157@2*4", "BLOCK.INDEX"),
        ("pairs:no bar@2*4", "one '|'"),
        ("pairs:a|b|c@2*4", "one '|'"),
        ("pairs: |b@2*4", "a positive text"),
        ("vector:1,2,3@2*4", "comes from feature, neuron, pairs"),
        ("pairs:" + "a|b\n" * 2000 + "@1*1", "at most 2000"),
    ],
)
def test_bad_text_is_one_line(text, says):
    with pytest.raises(SteeringSpecError, match=says.replace("*", r"\*").replace(".", r"\.")) as e:
        SteeringSpec.from_text(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "table, says",
    [
        ([1, 2], "is a table"),
        ({"feature": 1, "layer": 0}, "a layer and a coeff"),
        ({"feature": 1, "neuron": [0, 1], "layer": 0, "coeff": 1}, "names one of"),
        ({"feature": 1, "layer": 0, "coeff": 1, "site": "x"}, "unknown key 'site'"),
        ({"feature": "3", "layer": 0, "coeff": 1}, "the feature must be a whole number"),
        ({"neuron": [1], "layer": 0, "coeff": 1}, "a neuron is"),
        ({"pairs": ["ab"], "layer": 0, "coeff": 1}, "pairs are"),
        ({"feature": 1, "layer": True, "coeff": 1}, "the layer must be"),
        ({"feature": 1, "layer": 0, "coeff": "big"}, "the coefficient must be"),
    ],
)
def test_a_bad_lesson_table_is_one_line_naming_the_slide(table, says):
    with pytest.raises(SteeringSpecError, match=says) as e:
        SteeringSpec.from_table(table, "line 9, slide 2")
    assert str(e.value).startswith("line 9, slide 2: ") and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=16))
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    gptviz.save(model, path, gptviz.CharTokenizer(list("abcdefghijklmnopqrst")))
    return gptviz.load(path)


def test_the_vector_is_the_librarys(bundle):
    model = bundle.model
    sae = random_sae("topk", d_in=16, d_sae=48, site="blocks.1.resid_post")
    np.testing.assert_array_equal(SteeringSpec("feature", 1, 2, feature=7).vector(bundle, sae=sae), sae.W_dec[7])
    np.testing.assert_array_equal(
        SteeringSpec("neuron", 1, 2, neuron=(1, 5)).vector(bundle), gptviz.neuron_direction(model, 1, 5)
    )
    spec = SteeringSpec("pairs", 0, 2, pairs=(("abc", "abd"), ("ee", "ef")))
    want = gptviz.steering_vector(model, [("abc", "abd"), ("ee", "ef")], "blocks.0.resid_post", bundle.tokenizer)
    np.testing.assert_array_equal(spec.vector(bundle), want)
    iv = spec.intervention(bundle)
    assert iv.name == "blocks.0.resid_post" and iv.coeff == 2.0


@pytest.mark.parametrize(
    "spec, says",
    [
        (SteeringSpec("feature", 5, 1, feature=1), "the model has 2"),
        (SteeringSpec("feature", 1, 1, feature=1), "needs the SAE"),
        (SteeringSpec("neuron", 1, 1, neuron=(4, 1)), "the model has 2 blocks"),
        (SteeringSpec("neuron", 1, 1, neuron=(1, 999)), "neurons"),
    ],
)
def test_a_spec_the_model_cannot_take_is_one_line(bundle, spec, says):
    with pytest.raises(gptviz.GptvizError, match=says):
        spec.vector(bundle)
    sae = random_sae("topk", d_in=16, d_sae=48, site="blocks.1.resid_post")
    with pytest.raises(gptviz.GptvizError, match="the SAE has 48 features"):
        SteeringSpec("feature", 1, 1, feature=48).vector(bundle, sae=sae)
