"""A config.json checked for meaning, not only type (issue 28): each case below loaded before the
checks, and silently wrong (every activation NaN, a head size truncated, "0 key/value heads" read as
"all heads", a top-level rotary fraction dropped, layers past n_layer dropped) or allocated hundreds
of MB before it was refused. Each now ends in one line naming config.json (or loads as Hugging Face
reads it), and `gptviz check` says the same as the load. A key gptviz does not read is named in the
load report as a note; a config as save_pretrained writes it has none."""

from __future__ import annotations

import json
import time

import pytest
import torch
from hf_helpers import FAMILIES, hf_random, hf_random_decoder
from test_hf_families import assert_parity, prompt
from transformers import AutoConfig, AutoModelForCausalLM

import gptviz
from gptviz.formats.hf_decoders import config_from_hf_decoder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> a saved random model's folder, each saved once for the module."""
    cache = {}
    kinds = {"llama-mha": ("llama", dict(num_key_value_heads=4))}

    def get(name: str):
        if name not in cache:
            kind, over = kinds.get(name, (name, {}))
            path = tmp_path_factory.mktemp(name)
            hf_random_decoder(kind, **over).save_pretrained(path)
            cache[name] = path
        return cache[name]

    return get


def edited(saved, tmp_path, name: str, edit) -> object:
    """A folder with the saved model's weights and its config.json edited."""
    source = saved(name)
    config = json.loads((source / "config.json").read_text())
    edit(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(source / "model.safetensors")
    return tmp_path


def rope(**params):
    def edit(config: dict) -> None:
        config["rope_parameters"] = params

    return edit


def top_level(**keys):
    """Keys at the top level; rope_parameters keep theirs except those named here."""

    def edit(config: dict) -> None:
        for key, value in keys.items():
            config.get("rope_parameters", {}).pop(key, None)
            config[key] = value

    return edit


def both(rope_key: str, rope_value, key: str, value):
    def edit(config: dict) -> None:
        config["rope_parameters"][rope_key] = rope_value
        config[key] = value

    return edit


def setting(**keys):
    def edit(config: dict) -> None:
        config.update(keys)

    return edit


def _without_theta(config: dict) -> dict:
    return {k: v for k, v in config["rope_parameters"].items() if k != "rope_theta"}


LLAMA3 = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, high_freq_factor=4.0)
NEO_NEGATIVE = [[["global", "local"], 10**8], [["global"], -(2 * 10**8) + 2]]  # counts add up to 2 layers
CASES = [
    # every activation NaN before: positions divided by a factor of 0
    ("rope-linear-factor-0", "llama", rope(rope_type="linear", factor=0, rope_theta=10000.0), "rope factor=0"),
    ("rope-factor-text", "llama", rope(rope_type="linear", factor="2", rope_theta=10000.0), "rope factor='2'"),
    ("llama3-low-freq-0", "llama", rope(**LLAMA3, low_freq_factor=0), "low_freq_factor=0 must be a number above 0.001"),
    ("rope-theta-negative", "llama", rope(rope_type="default", rope_theta=-5.0), "rope_theta=-5.0 must be a number"),
    # the fifth round's silent numbers: every activation NaN, or a local layer reading no key
    (
        "rope-theta-tiny",
        "llama",
        rope(rope_type="default", rope_theta=1e-300),
        "rope_theta=1e-300 must be a number above 1",
    ),
    ("rope-theta-1", "llama", rope(rope_type="default", rope_theta=1.0), "rope_theta=1.0 must be a number above 1"),
    ("rope-theta-huge", "llama", rope(rope_type="default", rope_theta=1e300), "and at most 1e+12"),
    ("rope-factor-tiny", "llama", rope(rope_type="linear", factor=1e-300, rope_theta=1e4), "rope factor=1e-300"),
    ("rope-factor-huge", "llama", rope(rope_type="linear", factor=1e9, rope_theta=1e4), "at most 10000"),
    ("llama3-high-equals-low", "llama", rope(**LLAMA3, low_freq_factor=4.0), "must be above low_freq_factor=4.0"),
    (
        "gemma3-local-theta-tiny",
        "gemma3_text",
        lambda c: c["rope_parameters"]["sliding_attention"].update(rope_theta=1e-300),
        "local layers' rope_theta=1e-300",
    ),
    ("neo-window-0", "gpt_neo", setting(window_size=0), "window_size=0 must be a whole number, 1 or more"),
    ("neo-window-fraction", "gpt_neo", setting(window_size=2.5), "window_size=2.5 must be a whole number"),
    ("neo-window-negative", "gpt_neo", setting(window_size=-4), "window_size=-4 must be"),
    # a rotary fraction of 0 became 1.0; a top-level one beside rope_parameters was dropped
    (
        "fraction-0",
        "phi3",
        rope(rope_type="default", rope_theta=1e4, partial_rotary_factor=0),
        "rotary_factor=0 must be a number above 0",
    ),
    ("fraction-0-top-level", "phi3", top_level(partial_rotary_factor=0), "partial_rotary_factor=0 must be"),
    ("fraction-above-1", "phi3", top_level(partial_rotary_factor=1.5), "partial_rotary_factor=1.5 must be"),
    ("fraction-disagrees", "phi3", both("partial_rotary_factor", 0.5, "partial_rotary_factor", 0.25), "disagrees"),
    ("theta-disagrees", "llama", both("rope_theta", 500000.0, "rope_theta", 10000.0), "rope_theta=10000.0 at the top"),
    ("rope-scaling-disagrees", "llama", setting(rope_scaling={"rope_type": "linear", "factor": 2.0}), "disagree"),
    # Hugging Face reads rope_scaling over rope_parameters: without a theta it takes 10,000, not the 500,000 beside it
    ("rope-scaling-no-theta", "llama", lambda c: c.update(rope_scaling=_without_theta(c)), "disagree"),
    # a head size truncated, "no key/value heads" read as "all heads"
    ("head-dim-fraction", "llama", setting(head_dim=12.5), "head_dim=12.5 must be a whole number"),
    ("head-dim-0", "llama", setting(head_dim=0), "head_dim=0 must be a whole number, 1 or more"),
    ("kv-heads-0", "llama-mha", setting(num_key_value_heads=0), "num_key_value_heads=0 must be a whole number"),
    # a scale of 0 read as "the usual 1/sqrt(D)"
    ("gemma2-scalar-0", "gemma2", setting(query_pre_attn_scalar=0), "query_pre_attn_scalar=0 must be a number above"),
    ("gemma2-scalar-text", "gemma2", setting(query_pre_attn_scalar="256"), "query_pre_attn_scalar='256'"),
    # a flag given as text read as true
    ("attention-bias-text", "llama", setting(attention_bias="no"), "qkv_bias='no': must be true or false"),
    ("parallel-text", "gpt_neox", setting(use_parallel_residual="false"), "parallel='false': must be true or false"),
    # windows
    ("qwen-window-layers-text", "qwen2", setting(layer_types=None, max_window_layers="1"), "max_window_layers='1'"),
    ("qwen-use-window-text", "qwen2", setting(layer_types=None, use_sliding_window="yes"), "use_sliding_window='yes'"),
    ("neo-negative-counts", "gpt_neo", setting(attention_types=NEO_NEGATIVE), "counts >= 0"),
    ("neo-long-list", "gpt_neo", setting(attention_types=[[["local"], 1]] * 10_000), "one type for each of 2 layers"),
    ("neo-count-text", "gpt_neo", setting(attention_types=[[["global", "local"], "1"]]), "counts >= 0"),
    ("layer-type-number", "gemma2", setting(layer_types=[1, 2]), "attention layer type 1 is not implemented"),
    # Gemma 1 and 2 read it too (only Gemma 3 was refused): every query would read the keys after it
    ("gemma2-bidirectional", "gemma2", setting(use_bidirectional_attention=True), "bidirectional attention"),
]


@pytest.mark.parametrize(("kind", "edit", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_config_that_would_load_wrong_is_one_line(saved, tmp_path, kind, edit, words):
    path = edited(saved, tmp_path, kind, edit)
    t0 = time.perf_counter()
    with pytest.raises(gptviz.CheckpointError) as err:
        gptviz.load(path)
    message = str(err.value)
    assert words in message and "config.json" in message, message
    assert "\n" not in message and "please report" not in message and "unexpected" not in message, message
    assert time.perf_counter() - t0 < 5  # refused from the config, before 10**8 layer names are built


def test_the_check_command_and_the_load_agree(saved, tmp_path, capsys):
    """`gptviz check` reads the checkpoint through the same load: the same one line, exit 2."""
    from gptviz.cli import main

    path = edited(saved, tmp_path, "llama", rope(rope_type="linear", factor=0, rope_theta=10000.0))
    with pytest.raises(gptviz.CheckpointError) as err:
        gptviz.load(path)
    assert main(["check", "--checkpoint", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {err.value}"


def test_weights_past_n_layer_are_refused_not_dropped(saved, tmp_path):
    path = edited(saved, tmp_path, "llama", setting(num_hidden_layers=1))
    with pytest.raises(gptviz.CheckpointError, match="the weights hold 2 layers but the config says n_layer=1"):
        gptviz.load(path)


def reloaded(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.mark.parametrize(
    ("kind", "edit"),
    [
        # transformers 5 folds a top-level partial_rotary_factor into rope_parameters that lack one
        ("phi3", top_level(partial_rotary_factor=0.5)),
        # and a top-level rope_theta likewise
        ("llama", top_level(rope_theta=500000.0)),
        # v4's rope_scaling and rope_theta beside v5's rope_parameters, saying the same (gptviz's own export)
        ("llama", lambda c: c.update(rope_scaling=_without_theta(c), rope_theta=c["rope_parameters"]["rope_theta"])),
        # the sane neighbours of the refused numbers: a million-token base, a factor of 32, a window of 1
        ("llama", rope(rope_type="default", rope_theta=1e8)),
        ("llama", rope(**{**LLAMA3, "factor": 32.0}, low_freq_factor=1.0, original_max_position_embeddings=8)),
        ("llama", rope(rope_type="linear", factor=0.5, rope_theta=1e4)),
        ("gpt_neo", setting(window_size=1)),
    ],
    ids=[
        "phi3-top-level-fraction",
        "llama-top-level-theta",
        "llama-both-layouts",
        "llama-theta-1e8",
        "llama3-factor-32",
        "linear-factor-half",
        "neo-window-1",
    ],
)
def test_top_level_rotary_keys_are_read_as_hugging_face_reads_them(saved, tmp_path, kind, edit):
    path = edited(saved, tmp_path, kind, edit)
    assert_parity(reloaded(path), gptviz.load(path), prompt())


def test_a_key_gptviz_does_not_read_is_named_as_a_note(saved, tmp_path):
    path = edited(
        saved, tmp_path, "llama", setting(attn_logit_softcapping=30.0, quantization_config={"quant_method": "gptq"})
    )
    bundle = gptviz.load(path)  # a note, not a refusal: the rest of the model is read
    notes = [w for w in bundle.report.warnings if "does not read" in w]
    assert notes == ["config.json keys gptviz does not read for llama: attn_logit_softcapping, quantization_config"]


def _saved_config(kind: str, tmp_path) -> dict:
    if kind == "gpt2":
        hf_random().config.save_pretrained(tmp_path)
    else:
        AutoConfig.for_model(kind, **FAMILIES[kind]).save_pretrained(tmp_path)
    return json.loads((tmp_path / "config.json").read_text())


@pytest.mark.parametrize("kind", ["gpt2", *FAMILIES])
def test_a_config_as_save_pretrained_writes_it_has_no_unread_keys(tmp_path, kind):
    """Every key transformers writes for a family is read or known not to change the forward pass,
    so the note above appears only for keys that may matter."""
    config, notes = config_from_hf_decoder(_saved_config(kind, tmp_path), tmp_path / "config.json")
    assert not [n for n in notes if "does not read" in n], notes


def test_a_config_json_over_a_megabyte_is_refused_by_its_size(saved, tmp_path):
    """config.json is read (and parsed) before anything else: a 10 MB list of layer types took 4 parses
    and +156 MB to refuse; a config is a few KB, and one over 1 MB is refused by its size unread."""
    path = edited(saved, tmp_path, "llama", setting(layer_types=["sliding_attention"] * 100_000))
    with pytest.raises(gptviz.CheckpointError, match=r"config.json: 2.1 MB is too large for a config file"):
        gptviz.load(path)
