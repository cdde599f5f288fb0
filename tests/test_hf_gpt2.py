"""Hugging Face GPT-2 directories: a parity ladder against `transformers` on random-weight models,
and a clear message for every bad directory.

Tolerance: both sides compute in float32 with different kernels (Conv1D's addmm against Linear,
HF's attention against ours), which agree to about 1e-6 on these tiny models. ATOL = 1e-5 leaves
ten times that as headroom, while the mistakes a loader can make (a missing transpose, exact GELU
instead of gelu_new's tanh form, an untied head) move the logits by 1e-4 or far more;
test_tolerance_catches_the_wrong_gelu proves the check would see the smallest of them.
"""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from bpe_helpers import TEXT, tiny_bpe
from hf_helpers import hf_random
from safetensors.torch import save_file

import gptviz
from gptviz.formats.hf_decoders import CONV1D
from gptviz.tokenizers.bpe import BPETokenizer

transformers = pytest.importorskip("transformers")
from transformers import GPT2LMHeadModel, GPT2TokenizerFast  # noqa: E402

transformers.logging.set_verbosity_error()
ATOL, RTOL = 1e-5, 1e-5
PROMPT = "JULIET. O Romeo, wherefore art thou"
CONFIGS = {
    "2L-2H-32-tied": dict(n_layer=2, n_head=2, n_embd=32),
    "3L-4H-48-untied": dict(n_layer=3, n_head=4, n_embd=48, tie_word_embeddings=False),
    "1L-1H-24-tied-eps1e-6": dict(n_layer=1, n_head=1, n_embd=24, layer_norm_epsilon=1e-6),
    "2L-8H-64-untied-relu": dict(n_layer=2, n_head=8, n_embd=64, tie_word_embeddings=False, activation_function="relu"),
}


def hf_model(seed: int = 0, **overrides) -> GPT2LMHeadModel:
    """A random GPT2LMHeadModel (norm gains and biases random too) over the tiny BPE's vocabulary."""
    return hf_random(seed, vocab_size=tiny_bpe().vocab_size, n_positions=64, **overrides)


def save_hf(model: GPT2LMHeadModel, path, weights: str = "safetensors", tokenizer: str = "tokenizer.json"):
    """save_pretrained, as safetensors or as the pytorch_model.bin that safe_serialization=False writes."""
    model.save_pretrained(path)
    if weights == "bin":
        (path / "model.safetensors").unlink()
        # transformers >= 5 no longer writes .bin; this is what 4.x's safe_serialization=False wrote
        torch.save(model.state_dict(), path / "pytorch_model.bin")
    tok = tiny_bpe()
    if tokenizer == "tokenizer.json":
        tok.save(path)
    elif tokenizer == "vocab+merges":
        tok.tok.model.save(str(path))  # vocab.json + merges.txt
    return path


def hf_tokenizer(path) -> GPT2TokenizerFast:
    """transformers' own reading of the directory's tokenizer files (tokenizer.json or vocab + merges)."""
    return GPT2TokenizerFast.from_pretrained(str(path), local_files_only=True)


def greedy(logits_of, ids: list[int], n: int) -> list[int]:
    ids = list(ids)
    for _ in range(n):
        ids.append(int(logits_of(torch.tensor([ids]))[0, -1].argmax()))
    return ids


@pytest.mark.parametrize("tokenizer", ["tokenizer.json", "vocab+merges"])
@pytest.mark.parametrize("weights", ["safetensors", "bin"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_parity_ladder(tmp_path, name, weights, tokenizer):
    hf = hf_model(**CONFIGS[name])
    path = save_hf(hf, tmp_path / "hf", weights, tokenizer)
    bundle = gptviz.load(path)
    hf_tok = hf_tokenizer(path)

    # rung 0: the same ids for the same text
    ids = bundle.tokenizer.encode(PROMPT)
    assert ids == hf_tok.encode(PROMPT)

    # rung 1: logits close at every position
    x = torch.tensor([ids])
    with torch.no_grad():
        ours, theirs = bundle.model(x), hf(x).logits
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=RTOL)

    # rung 2: identical greedy continuation ids
    with torch.no_grad():
        ours_ids = greedy(bundle.model, ids, 16)
        theirs_ids = greedy(lambda t: hf(t).logits, ids, 16)
    assert ours_ids == theirs_ids

    # rung 3: identical decoded text
    assert bundle.tokenizer.decode(ours_ids) == hf_tok.decode(theirs_ids, clean_up_tokenization_spaces=False)


def test_conv1d_weights_keep_the_files_layout(tmp_path):
    """GPT-2's block weights stay laid out [in, out] as its file stores them (model.in_out_layout, faster
    for a step of decoding): the same values as HF's, the same greedy tokens from generate as HF's
    generate, and a native save writes them [out, in] so that they load back equal."""
    hf = hf_model()
    bundle = gptviz.load(save_hf(hf, tmp_path / "hf"))
    theirs = hf.state_dict()
    conv1d = [(n, p) for n, p in bundle.model.named_parameters() if n.endswith(CONV1D)]
    assert len(conv1d) == 4 * hf.config.n_layer
    for name, p in conv1d:
        assert p.t().is_contiguous() and not p.is_contiguous(), name
        assert torch.equal(p, theirs[name].t()), name
    ids = bundle.tokenizer.encode(PROMPT)
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    assert gptviz.generate(bundle.model, ids, 12, temperature=0, stop_at_eos=False).ids == out[0].tolist()
    again = gptviz.load(gptviz.save(bundle.model, tmp_path / "native"))
    for name, p in conv1d:
        assert torch.equal(again.model.get_parameter(name), p), name


def test_trace_logits_match_hf(tmp_path):
    hf = hf_model(**CONFIGS["3L-4H-48-untied"])
    bundle = gptviz.load(save_hf(hf, tmp_path / "hf"))
    ids = bundle.tokenizer.encode(PROMPT)
    t = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    with torch.no_grad():
        theirs = hf(torch.tensor([ids]), output_attentions=True, attn_implementation="eager")
    torch.testing.assert_close(torch.tensor(t["logits"]), theirs.logits[0], atol=ATOL, rtol=RTOL)
    for layer, attn in enumerate(theirs.attentions):  # [1, H, T, T]
        torch.testing.assert_close(torch.tensor(t[f"blocks.{layer}.attn.weights"]).float(), attn[0], atol=1e-3, rtol=0)
    assert t.tokens == bundle.tokenizer.token_strings(ids)


def test_tolerance_catches_the_wrong_gelu(tmp_path):
    """The smallest plausible loader mistake, exact GELU for gelu_new, fails the logits check."""
    hf = hf_model(**CONFIGS["2L-2H-32-tied"])
    bundle = gptviz.load(save_hf(hf, tmp_path / "hf"))
    wrong = gptviz.GPT(gptviz.GPTConfig(**{**bundle.model.config.to_dict(), "activation": "gelu"})).eval()
    wrong.load_state_dict(bundle.model.state_dict())
    x = torch.tensor([tiny_bpe().encode(PROMPT)])
    with torch.no_grad(), pytest.raises(AssertionError):
        torch.testing.assert_close(wrong(x), hf(x).logits, atol=ATOL, rtol=RTOL)


def test_load_report(tmp_path):
    hf = hf_model(**CONFIGS["2L-2H-32-tied"])
    bundle = gptviz.load(save_hf(hf, tmp_path / "hf"))
    r = bundle.report
    assert r.format == "hf-gpt2 (model.safetensors)"
    assert r.n_params == sum(p.numel() for p in hf.parameters())
    assert (r.dtype, r.device, r.tokenizer) == ("float32", "cpu", "bpe")
    assert r.missing == [] and r.unexpected == []
    assert sorted(r.reshaped) == sorted(
        f"transformer.h.{i}.{k}"
        for i in range(2)
        for k in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    )
    cfg = bundle.model.config
    assert (cfg.activation, cfg.tie_weights, cfg.block_size) == ("gelu_tanh", True, 64)


def test_old_bin_with_mask_buffers_and_bare_gpt2model_keys(tmp_path):
    """transformers 3.x/4.x saved attn.bias / attn.masked_bias buffers; GPT2Model saves keys without
    the `transformer.` prefix. Both load, and the logits still match."""
    hf = hf_model(**CONFIGS["2L-2H-32-tied"])
    path = save_hf(hf, tmp_path / "hf", "bin")
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    for i in range(2):
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, path / "pytorch_model.bin")
    bundle = gptviz.load(path)
    x = torch.tensor([tiny_bpe().encode(PROMPT)])
    with torch.no_grad():
        torch.testing.assert_close(bundle.model(x), hf(x).logits, atol=ATOL, rtol=RTOL)


def test_fp16_weights_are_reported(tmp_path):
    hf = hf_model(**CONFIGS["2L-2H-32-tied"]).half()
    bundle = gptviz.load(save_hf(hf, tmp_path / "hf"))
    assert not any("float16" in w for w in bundle.report.warnings)  # exact: a note, not a problem
    assert any("float16" in n for n in bundle.report.notes)
    assert bundle.report.dtype == "float32" and bundle.report.stored_dtype == "float16"


def test_cli_trace_on_hf_directory(tmp_path):
    from gptviz.cli import main

    path = save_hf(hf_model(**CONFIGS["2L-2H-32-tied"]), tmp_path / "hf")
    assert main(["trace", "--checkpoint", str(path), "--prompt", PROMPT, "--out", str(tmp_path / "t.npz")]) == 0
    assert (tmp_path / "t.npz").stat().st_size > 0


# --- tokenizers in the directory -----------------------------------------------------------------
def test_no_tokenizer_files_loads_with_a_reason(tmp_path):
    path = save_hf(hf_model(**CONFIGS["2L-2H-32-tied"]), tmp_path / "hf", tokenizer="none")
    bundle = gptviz.load(path)
    assert bundle.tokenizer is None and bundle.report.tokenizer == "none"
    assert any("text input is off" in w for w in bundle.report.warnings)


def test_vocab_without_merges_says_which_file_is_missing(tmp_path):
    path = save_hf(hf_model(**CONFIGS["2L-2H-32-tied"]), tmp_path / "hf", tokenizer="vocab+merges")
    (path / "merges.txt").unlink()
    bundle = gptviz.load(path)
    assert bundle.tokenizer is None
    assert any("merges.txt is missing" in w for w in bundle.report.warnings)


def test_vocab_json_decode_matches_tokenizer_json():
    tok = tiny_bpe()
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT


# --- bad directories -----------------------------------------------------------------------------
@pytest.fixture
def good(tmp_path):
    return save_hf(hf_model(**CONFIGS["2L-2H-32-tied"]), tmp_path / "hf")


def test_bert_directory(tmp_path):
    path = tmp_path / "bert"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32}))
    save_file({"embeddings.word_embeddings.weight": torch.zeros(10, 4)}, str(path / "model.safetensors"))
    with pytest.raises(
        gptviz.CheckpointError, match=r"config.json: model_type 'bert' is not one gptviz loads; it loads gpt2"
    ):
        gptviz.load(path)


def test_config_json_is_not_json(good):
    (good / "config.json").write_text("this is not json")
    with pytest.raises(gptviz.CheckpointError, match=r"config.json: not readable JSON"):
        gptviz.load(good)


def test_no_weights(good):
    (good / "model.safetensors").unlink()
    with pytest.raises(gptviz.CheckpointError, match=r"no model.safetensors or pytorch_model.bin beside config.json"):
        gptviz.load(good)


def test_truncated_safetensors(good):
    f = good / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(gptviz.CheckpointError, match=r"model.safetensors: not a readable safetensors file"):
        gptviz.load(good)


def test_empty_bin(good):
    (good / "model.safetensors").unlink()
    (good / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(gptviz.CheckpointError, match=r"pytorch_model.bin: the file is empty"):
        gptviz.load(good)


def test_truncated_bin(tmp_path):
    path = save_hf(hf_model(**CONFIGS["2L-2H-32-tied"]), tmp_path / "hf", "bin")
    f = path / "pytorch_model.bin"
    f.write_bytes(f.read_bytes()[:2000])
    with pytest.raises(gptviz.CheckpointError, match=r"pytorch_model.bin: not a readable PyTorch file"):
        gptviz.load(path)


class Payload:
    """Unpickling this calls open(marker, "w"): it would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_bin_with_code_payload_is_refused_and_does_not_run(tmp_path, good):
    marker = tmp_path / "payload-ran"
    # the payload is real: a plain unpickle runs it
    pickle.loads(pickle.dumps(Payload(tmp_path / "control")))
    assert (tmp_path / "control").exists()
    (good / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": Payload(marker)}, good / "pytorch_model.bin")
    with pytest.raises(gptviz.CheckpointError, match=r"pytorch_model.bin: refused to load: it names [\w.]*open"):
        gptviz.load(good)
    assert not marker.exists()


def test_weights_do_not_fit_the_config(good):
    cfg = json.loads((good / "config.json").read_text())
    (good / "config.json").write_text(json.dumps({**cfg, "n_embd": 64}))
    with pytest.raises(
        gptviz.CheckpointError, match=r"model.safetensors: transformer\.\S+ has shape \[\d+\] but the config needs"
    ):
        gptviz.load(good)


def test_unsupported_mlp_width(good):
    cfg = json.loads((good / "config.json").read_text())
    (good / "config.json").write_text(json.dumps({**cfg, "n_inner": 100}))
    with pytest.raises(gptviz.CheckpointError, match=r"n_inner=100"):
        gptviz.load(good)


def test_bad_tokenizer_json(good):
    (good / "tokenizer.json").write_text("{broken")
    with pytest.raises(gptviz.CheckpointError, match=r"tokenizer.json: not a readable tokenizer.json"):
        gptviz.load(good)


def test_bpe_from_vocab_merges_rejects_garbage(tmp_path):
    (tmp_path / "vocab.json").write_text("[1, 2]")
    (tmp_path / "merges.txt").write_text("")
    with pytest.raises(gptviz.CheckpointError, match=r"vocab.json / .*merges.txt: not a readable"):
        BPETokenizer.from_vocab_merges(tmp_path / "vocab.json", tmp_path / "merges.txt")
