"""Every common decoder family against Hugging Face transformers itself (docs/architecture.md,
"The model family"): random-weight models built from each config class, eager attention,
float32, norm weights and biases re-randomised, prompts longer than every sliding window, small
soft-caps. Saved with save_pretrained, loaded through gptviz.load, compared on logits (1e-4), every
layer's attention weights (1e-5) and every residual (1e-4)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from hf_helpers import FAMILIES, PROMPT_LEN, hf_random_decoder
from safetensors.torch import save_file

import gptviz
from gptviz import figures
from gptviz.analysis.lens import _head
from gptviz.analysis.patching import logit_diff, patched_run
from gptviz.model import attention_weights

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

KINDS = list(FAMILIES)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """kind -> (the HF model, its directory): each saved once for the module."""
    cache = {}

    def get(kind: str):
        if kind not in cache:
            hf = hf_random_decoder(kind)
            path = tmp_path_factory.mktemp(kind)
            hf.save_pretrained(path)
            cache[kind] = hf, path
        return cache[kind]

    return get


def prompt(seed: int = 1, n: int = PROMPT_LEN) -> torch.Tensor:
    return torch.randint(0, FAMILIES["llama"]["vocab_size"], (1, n), generator=torch.Generator().manual_seed(seed))


def assert_parity(hf, bundle, ids: torch.Tensor) -> None:
    """Logits, every layer's attention weights and every residual equal Hugging Face's eager forward."""
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
    t = gptviz.trace(bundle.model, ids[0])
    L = bundle.model.config.n_layer
    np.testing.assert_allclose(t["logits"], out.logits[0].numpy(), atol=1e-4, rtol=0)
    assert len(out.attentions) == L
    for l in range(L):
        np.testing.assert_allclose(t[f"blocks.{l}.attn.weights"], out.attentions[l][0].numpy(), atol=1e-5, rtol=0)
    # hidden_states: the embedding, each block's output but the last, then the final norm's output
    ours = [t["embed"], *(t[f"blocks.{l}.resid_post"] for l in range(L - 1)), t["ln_f"]]
    assert len(out.hidden_states) == L + 1
    for mine, theirs in zip(ours, out.hidden_states, strict=True):
        np.testing.assert_allclose(mine, theirs[0].numpy(), atol=1e-4, rtol=0)
    # capture reads the plain forward: the same logits bit for bit
    with torch.no_grad():
        plain = bundle.model(ids)[0].numpy()
    np.testing.assert_array_equal(t["logits"], plain)


@pytest.mark.parametrize("kind", KINDS)
def test_parity_with_hugging_face(saved, kind):
    hf, path = saved(kind)
    bundle = gptviz.load(path)
    assert bundle.report.format == f"hf-{kind} (model.safetensors)"
    assert bundle.report.unexpected == []
    assert_parity(hf, bundle, prompt())


@pytest.mark.parametrize("kind", KINDS)
def test_trace_names_mean_what_the_contract_says(saved, kind):
    """Shapes per family, resid_mid = resid_pre + attn.out, resid_post = resid_mid + mlp.out, the
    mask of a local layer reads the last W keys, scores rebuilt from q and k as the softmax reads them."""
    _, path = saved(kind)
    model = gptviz.load(path).model
    cfg = model.config
    T, H, Hkv, D, F = PROMPT_LEN, cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.mlp_dim
    t = gptviz.trace(model, prompt()[0])
    for l in range(cfg.n_layer):
        assert t[f"blocks.{l}.attn.q"].shape == (H, T, D)
        assert t[f"blocks.{l}.attn.k"].shape == t[f"blocks.{l}.attn.v"].shape == (Hkv, T, D)
        assert t[f"blocks.{l}.attn.scores"].shape == (H, T, T)
        assert t[f"blocks.{l}.mlp.hidden"].shape == (T, F)
        np.testing.assert_allclose(
            t[f"blocks.{l}.resid_mid"], t[f"blocks.{l}.resid_pre"] + t[f"blocks.{l}.attn.out"], atol=1e-5
        )
        np.testing.assert_allclose(
            t[f"blocks.{l}.resid_post"], t[f"blocks.{l}.resid_mid"] + t[f"blocks.{l}.mlp.out"], atol=1e-5
        )
        W = cfg.sliding_window if cfg.is_local(l) else T
        np.testing.assert_array_equal(t[f"blocks.{l}.attn.mask"].sum(-1), np.minimum(np.arange(1, T + 1), W))
        if cfg.attn_softcap:
            assert np.abs(t[f"blocks.{l}.attn.scores"]).max() < cfg.attn_softcap
    # a rebuild from q and k equals the explicit path's maps, which an edited run keeps as computed
    edited = gptviz.trace(model, prompt()[0], interventions=[gptviz.intervene("blocks.1.attn.scores", lambda s: s)])
    spec = model.transformer.h[1].attn.spec
    q, k = edited.tensor("blocks.1.attn.q")[None], edited.tensor("blocks.1.attn.k")[None]
    rebuilt = attention_weights(spec.scores(q, k), spec.mask(T))[0]
    np.testing.assert_array_equal(edited["blocks.1.attn.weights"], rebuilt.numpy())


def test_windows_and_caps_change_the_numbers(saved):
    """The test prompts are long enough that the windows matter and the caps small enough to bite."""
    _, path = saved("gemma2")
    model = gptviz.load(path).model
    ids = prompt()
    base = model(ids)
    cfg = model.config
    for change in (dict(sliding_window=0, layer_types=""), dict(attn_softcap=0.0), dict(final_softcap=0.0)):
        other = gptviz.GPT(gptviz.GPTConfig(**{**cfg.to_dict(), **change})).eval()
        other.load_state_dict(model.state_dict())
        assert (other(ids) - base).abs().max() > 1e-3, change


def test_sharded_safetensors(tmp_path):
    hf = hf_random_decoder("llama", seed=3)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    bundle = gptviz.load(tmp_path)
    assert "shards" in bundle.report.format
    assert_parity(hf, bundle, prompt())


def test_a_shard_outside_the_folder_is_refused(tmp_path):
    hf = hf_random_decoder("llama", seed=3)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    index_file = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../elsewhere.safetensors"
    index_file.write_text(json.dumps(index))
    with pytest.raises(gptviz.CheckpointError, match=r"shard '\.\./elsewhere\.safetensors' is not a file name"):
        gptviz.load(tmp_path)
    index["weight_map"][first] = "missing.safetensors"
    index_file.write_text(json.dumps(index))
    with pytest.raises(gptviz.CheckpointError, match=r"missing\.safetensors: file not found"):
        gptviz.load(tmp_path)


def test_pytorch_model_bin_with_neox_fused_qkv(tmp_path):
    hf = hf_random_decoder("gpt_neox", seed=4)
    hf.config.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    bundle = gptviz.load(tmp_path)
    assert bundle.report.format == "hf-gpt_neox (pytorch_model.bin)"
    assert_parity(hf, bundle, prompt())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_run_in_float32(tmp_path, dtype):
    hf_random_decoder("qwen2", seed=5).to(dtype).save_pretrained(tmp_path)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager")
    bundle = gptviz.load(tmp_path)
    assert next(bundle.model.parameters()).dtype == torch.float32
    name = str(dtype).removeprefix("torch.")
    assert bundle.report.stored_dtype == name and bundle.report.dtype == "float32"
    # an exact upcast is a note, never a warning (the dashboard shows every warning as a problem)
    assert any(name in n and "exact" in n for n in bundle.report.notes)
    assert not any(name in w for w in bundle.report.warnings)
    assert_parity(reference.eval(), bundle, prompt())


def _config_dir(tmp_path, config: dict):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({"model.embed_tokens.weight": torch.zeros(4, 4)}, str(tmp_path / "model.safetensors"))
    return tmp_path


def test_unknown_type_moe_and_rope_scaling_are_refused_in_one_sentence(tmp_path):
    moe = AutoConfig.for_model("qwen2_moe", **FAMILIES["qwen2"]).to_dict()
    mixtral = AutoConfig.for_model("mixtral", **FAMILIES["mistral"]).to_dict()
    yarn = AutoConfig.for_model("llama", **FAMILIES["mistral"]).to_dict()
    yarn["rope_parameters"] = dict(
        rope_type="yarn", factor=4.0, rope_theta=10000.0, original_max_position_embeddings=16
    )
    cases = [
        ({"model_type": "mamba"}, r"model_type 'mamba' is not one gptviz loads; it loads gpt2, llama, mistral"),
        (moe, r"'qwen2_moe' is a mixture-of-experts model, which gptviz does not implement; it loads the dense"),
        (mixtral, r"'mixtral' is a mixture-of-experts model"),
        (yarn, r"rope scaling 'yarn' is not implemented in gptviz \(it knows default, linear, llama3\)"),
    ]
    for i, (config, words) in enumerate(cases):
        with pytest.raises(gptviz.CheckpointError, match=words) as err:
            gptviz.load(_config_dir(tmp_path / str(i), config))
        assert "\n" not in str(err.value)


def test_a_llama_3_context_of_131072_positions_is_read_as_it_is(saved, tmp_path):
    """Every Llama 3.x config reads max_position_embeddings 131,072: a standard config, no note and no
    banner; the context bounds the prompt, and memory follows the prompt, not the claim."""
    hf, path = saved("llama")
    config = json.loads((path / "config.json").read_text())
    (tmp_path / "model.safetensors").symlink_to(path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 131_072}))
    bundle = gptviz.load(tmp_path)
    assert bundle.model.config.block_size == 131_072
    assert not [w for w in bundle.report.warnings if "position" in w or "limit" in w]  # (this folder has no tokenizer)
    ids = prompt()
    with torch.no_grad():  # the same model: the context changes nothing below it
        np.testing.assert_allclose(gptviz.trace(bundle.model, ids[0])["logits"], hf(ids).logits[0], atol=1e-4)
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2**40}))
    bundle = gptviz.load(tmp_path)  # past gptviz's bound on a context: read as the bound, and said
    top = gptviz.limits.MAX_CONFIG["block_size"]
    assert bundle.model.config.block_size == top
    assert any(f"is read as gptviz's limit {top:,}" in w for w in bundle.report.warnings)


def test_weights_the_config_does_not_describe_are_refused_before_reading(saved, tmp_path):
    _, path = saved("mistral")
    config = json.loads((path / "config.json").read_text())
    (tmp_path / "model.safetensors").symlink_to(path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 4}))
    with pytest.raises(
        gptviz.CheckpointError, match=r"attn.c_attn.weight has shape \[128, 48\] but the config needs \[192, 48\]"
    ):
        gptviz.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "attention_bias": True}))
    with pytest.raises(gptviz.CheckpointError, match=r"weights missing for .*attn.c_attn.bias"):
        gptviz.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 100_000}))
    with pytest.raises(gptviz.CheckpointError, match=r"n_embd=100,000 is above gptviz's limit"):
        gptviz.load(tmp_path)


def test_a_bias_the_config_leaves_out_is_refused(tmp_path):
    hf = hf_random_decoder("llama", seed=6)  # attention_bias and mlp_bias on
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "mlp_bias": False}))
    with pytest.raises(gptviz.CheckpointError, match=r"that the config does not describe"):
        gptviz.load(tmp_path)


def test_kv_cache_generation_with_grouped_heads_and_a_window(saved):
    """Greedy generation with the KV cache (GQA, sliding window shorter than the prompt) gives Hugging
    Face's ids, and each step's logits equal a full forward over the same tokens."""
    hf, path = saved("mistral")
    model = gptviz.load(path).model
    ids = prompt(seed=7)
    gen = gptviz.generate(model, ids[0], max_new_tokens=6, temperature=0)
    with torch.no_grad():
        theirs = hf.generate(ids, max_new_tokens=6, do_sample=False, attention_mask=torch.ones_like(ids))
    assert gen.ids == theirs[0].tolist()
    full = torch.tensor([gen.ids])
    cache = gptviz.model.KVCache(model.config.n_layer)
    with torch.no_grad():
        step_logits = [model(full[:, :PROMPT_LEN], cache=cache)[0, -1]]
        for i in range(PROMPT_LEN, full.size(1)):
            step_logits.append(model(full[:, i : i + 1], cache=cache, explicit=True)[0, -1])
        whole = model(full)[0]
    for j, logits in enumerate(step_logits):
        torch.testing.assert_close(logits, whole[PROMPT_LEN - 1 + j], atol=1e-5, rtol=0)
    W = model.config.sliding_window
    assert all((s.attention[:, :, :-W] == 0).all() and (s.attention[:, :, -W:] > 0).all() for s in gen.steps)


def test_ablating_a_grouped_query_head_zeroes_its_slice_of_o_proj_input(saved):
    hf, path = saved("gemma")  # one KV head shared by four query heads
    model = gptviz.load(path).model
    D, layer, head = model.config.head_dim, 1, 2
    ids = prompt(seed=8)
    t = gptviz.trace(model, ids[0], interventions=[gptviz.ablate(f"blocks.{layer}.attn.z", heads=[head])])

    def zero(module, args):
        x = args[0].clone()
        x[..., head * D : (head + 1) * D] = 0
        return (x,)

    handle = hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero)
    try:
        with torch.no_grad():
            theirs = hf(ids).logits[0].numpy()
    finally:
        handle.remove()
    np.testing.assert_allclose(t["logits"], theirs, atol=1e-4, rtol=0)
    assert np.abs(t["logits"] - gptviz.trace(model, ids[0])["logits"]).max() > 1e-3  # the ablation did something


@pytest.mark.parametrize("kind", ["gemma2", "gemma3_text"])
def test_logit_lens_uses_the_final_norm_and_cap(saved, kind):
    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    last = t.tensor(f"blocks.{model.config.n_layer - 1}.resid_post")
    out = torch.empty(PROMPT_LEN, model.config.vocab_size)
    with torch.no_grad():
        _head(model, model.transformer.ln_f(last[None])[0], out, slice(0, model.config.vocab_size))
    np.testing.assert_allclose(out.numpy(), t["logits"], atol=1e-5, rtol=0)
    lens = gptviz.logit_lens(model, t, k=3)
    assert lens.top_ids.shape == (2 * model.config.n_layer + 1, PROMPT_LEN, 3)


@pytest.mark.parametrize("kind", ["llama", "gpt_neox", "gemma", "olmo", "qwen3"])
def test_logit_attribution_sums_to_the_logit(saved, kind):
    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    df = gptviz.logit_attribution(model, t, target=5, baseline=9)
    assert df["value"].sum() == pytest.approx(df.attrs["logit"], abs=1e-4)
    assert (df["component"] == "head").sum() == model.config.n_layer * model.config.n_head


@pytest.mark.parametrize("kind", ["gemma2", "olmo2"])
def test_logit_attribution_is_refused_where_it_is_undefined(saved, kind):
    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    with pytest.raises(gptviz.PromptError, match="logit attribution is undefined for this model"):
        gptviz.logit_attribution(model, t, target=5)


@pytest.mark.parametrize("site", ["resid_pre", "mlp.out", "attn.z"])
def test_patching_sweep_equals_the_patched_runs(saved, site):
    """The batched sweep (corrupt keys and values cached, rotary offsets, windows) equals each cell run
    as a full intervened trace, in a GQA model with a sliding window and partial rotary."""
    _, path = saved("phi3")
    model = gptviz.load(path).model
    clean, corrupt = prompt(seed=10)[0], prompt(seed=11)[0]
    answer, wrong = 3, 4
    sweep = gptviz.patching_sweep(model, clean, corrupt, answer, wrong, site=site)
    ct, rt = gptviz.trace(model, clean), gptviz.trace(model, corrupt)
    d_clean, d_corrupt = (logit_diff(x.part("logits", -1), answer, wrong) for x in (ct, rt))
    for layer, cell in [(0, 0), (1, 3), (1, sweep.shape[1] - 1)]:
        run = patched_run(model, ct, corrupt, site, layer, cell)
        expect = (logit_diff(run.part("logits", -1), answer, wrong) - d_corrupt) / (d_clean - d_corrupt)
        assert sweep[layer, cell] == pytest.approx(expect, abs=1e-4)


@pytest.mark.parametrize("kind", ["gemma3_text", "gpt_neo", "olmo"])
def test_gptviz_save_writes_and_loads_any_family(saved, kind, tmp_path):
    _, path = saved(kind)
    bundle = gptviz.load(path)
    gptviz.save(bundle.model, tmp_path / "copy")
    again = gptviz.load(tmp_path / "copy")
    assert again.model.config == bundle.model.config
    ids = prompt()
    with torch.no_grad():
        torch.testing.assert_close(again.model(ids), bundle.model(ids), atol=0, rtol=0)


# --- tokenizers: the `tokenizers` library's own ids, BOS included; pieces shown as a person reads them ---
def _sentencepiece_style(path) -> None:
    """A Llama-style tokenizer.json: BPE over Metaspace pieces with byte fallback and a BOS post-processor."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab |= {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece in ["▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "▁he", "ll", "▁hell", "▁hello", "▁w", "or", "▁wor"]:
        vocab[piece] = len(vocab)
    merges = [("▁", "h"), ("▁h", "e"), ("l", "l"), ("▁he", "ll"), ("▁hell", "o"), ("▁", "w"), ("o", "r"), ("▁w", "or")]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.add_special_tokens(["<s>", "</s>", "<unk>"])
    tok.save(str(path / "tokenizer.json"))


def _byte_level_with_bos(path) -> None:
    """A Llama-3-style tokenizer.json: byte-level BPE with a BOS added by its post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=290, special_tokens=["<|begin|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world, hello there\nthe world is wide"] * 20, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<|begin|> $A", special_tokens=[("<|begin|>", 0)])
    tok.save(str(path / "tokenizer.json"))


@pytest.mark.parametrize("make", [_sentencepiece_style, _byte_level_with_bos])
def test_tokenizer_json_gives_the_tokenizers_librarys_ids(tmp_path, make):
    from tokenizers import Tokenizer

    hf = hf_random_decoder("llama", seed=9, vocab_size=300)
    hf.save_pretrained(tmp_path)
    make(tmp_path)
    bundle = gptviz.load(tmp_path)
    reference = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in ["hello world", "hello\nworld é", " two  spaces", "x"]:
        ids = bundle.tokenizer.encode(text)
        assert ids == reference.encode(text).ids
        assert ids[0] == reference.token_to_id("<s>" if make is _sentencepiece_style else "<|begin|>")
    shown = bundle.tokenizer.display(bundle.tokenizer.encode("hello\nworld"))
    assert "".join(shown[1:]) == "␣hello↵world" if make is _sentencepiece_style else "hello↵world"
    t = gptviz.trace(bundle.model, bundle.tokenizer.encode("hello world"), bundle.tokenizer)
    assert t.tokens[0] in ("<s>", "<|begin|>")
    gptviz.save(bundle.model, tmp_path / "native", bundle.tokenizer)  # gptviz's own format keeps the BOS
    again = gptviz.load(tmp_path / "native")
    assert again.tokenizer.encode("hello world") == reference.encode("hello world").ids


def test_sentencepiece_byte_fallback_shows_the_bytes(tmp_path):
    _sentencepiece_style(tmp_path)
    tok = gptviz.tokenizers.BPETokenizer.from_file(tmp_path / "tokenizer.json", special_tokens=True)
    ids = tok.encode("hello é")
    pieces = [tok.tok.id_to_token(i) for i in ids]
    assert "<0xC3>" in pieces and "<0xA9>" in pieces  # é is not in the vocabulary: two fallback bytes
    shown = tok.display(ids)
    assert shown[:2] == ["<s>", "␣hello"] and "<0xC3>" in shown and "␣" in shown
    assert tok.token_strings(tok.encode("hello\n"))[-1] == "\n"


# --- what the pages read, on every family --------------------------------------------------------
@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gpt_neox", "qwen3", "olmo2"])
def test_walkthrough_rebuilds_equal_the_captured_values(saved, kind):
    """The classroom walk recomputes z, attn.out, mlp.hidden and mlp.out with the model's own modules:
    through grouped heads, a head size of its own, post-norms and a parallel block."""
    from gptviz.analysis.walkthrough import forward_steps

    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    captured = {s.key: s.values for s in forward_steps(model, t, layer=1)}
    rebuilt = {s.key: s for s in forward_steps(model, t, layer=1, recompute=True)}
    for key in ("z", "attn_out", "mlp_hidden", "mlp_out"):
        assert rebuilt[key].source.startswith("recomputed")
        np.testing.assert_allclose(rebuilt[key].values, captured[key], atol=1e-5, rtol=0)
    assert rebuilt["mlp_hidden"].values.shape == (PROMPT_LEN, model.config.mlp_dim)


@pytest.mark.parametrize(
    ("kind", "rule"),
    [("gpt_neo", "q·k (no scale)"), ("gemma2", "2·tanh((q·k × 0.2236) / 2)"), ("mistral", "q·k / √16")],
)
def test_query_computation_uses_the_models_own_scale(saved, kind, rule):
    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    work = gptviz.analysis.query_computation(t, 1, 3, PROMPT_LEN - 1)
    assert work["rule"] == rule
    assert work["kv_head"] == 3 // (model.config.n_head // model.config.kv_heads)
    assert work["max_diff"]["scores"] < 1e-5 and work["max_diff"]["weights"] < 1e-5


def test_shapes_name_the_kv_heads_and_the_mlp_width(saved):
    _, path = saved("mistral")
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    d = gptviz.analysis.dims(t)
    assert (d["H"], d["H_kv"], d["D"], d["F"]) == (4, 2, 16, 80)
    flow = gptviz.analysis.shape_flow(t)
    shapes = dict(zip(flow["notation"] + " " + flow["module"], flow["shape"]))
    assert shapes["(B, H_kv, T, D) transformer.h.0.attn.k"] == (1, 2, PROMPT_LEN, 16)
    assert shapes["(B, T, (H + 2·H_kv)·D) transformer.h.0.attn.c_attn"] == (1, PROMPT_LEN, (4 + 2 * 2) * 16)
    assert shapes["(B, T, F) transformer.h.0.mlp.c_fc"] == (1, PROMPT_LEN, 80)
    assert any("grouped-query attention: 4 query heads share 2" in s for s in model.config.special())
    assert "n_kv_head" in model.config.card_dict() and "qkv_clip" not in model.config.card_dict()


@pytest.mark.parametrize("kind", ["gemma2", "gpt_neo", "phi3"])
def test_head_scores_from_q_and_k_equal_scores_from_the_maps(saved, kind):
    """head_scores rebuilds each layer's maps from q and k with its scale, soft-cap and window."""
    from gptviz.analysis.heads import detection_patterns, layer_head_scores

    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    df = gptviz.head_scores(t)
    patterns = detection_patterns(t.token_ids)
    for layer in range(model.config.n_layer):
        direct = layer_head_scores(t.tensor(f"blocks.{layer}.attn.weights"), patterns)
        rows = df[df["layer"] == layer].sort_values("head")
        for name in ("previous_token", "induction", "sink", "self", "entropy"):
            np.testing.assert_allclose(rows[name].to_numpy(), direct[name].double().numpy(), atol=1e-5)
    assert gptviz.health(model, t)  # findings, not an exception


# --- the config: every family's fields, held to the bounds ---------------------------------------
FAMILY_CONFIGS = {
    "gqa+rotary+swiglu": dict(
        pos_encoding="rotary", n_kv_head=2, mlp_gated=True, n_inner=40, norm="rmsnorm", activation="silu", bias=False
    ),
    "gemma-like": dict(
        pos_encoding="rotary",
        head_size=6,
        n_kv_head=1,
        norm="rmsnorm",
        norm_plus_one=True,
        post_norm=True,
        qk_norm="head",
        sliding_window=3,
        layer_types="lgl",
        attn_softcap=5.0,
        final_softcap=9.0,
        embed_scale=3.0,
    ),
    "neox-like": dict(pos_encoding="rotary", rotary_fraction=0.5, parallel=True, n_inner=20, tie_weights=False),
    "neo-like": dict(qkv_bias=False, attn_scale=1.0, sliding_window=2, layer_types="glg"),
    "olmo-like": dict(
        pos_encoding="rotary", norm_affine=False, bias=False, qkv_clip=0.5, mlp_gated=True, activation="silu"
    ),
    "olmo2-like": dict(pos_encoding="rotary", pre_norm=False, post_norm=True, qk_norm="all", norm="rmsnorm"),
    "qwen2-like": dict(pos_encoding="rotary", out_bias=False, mlp_bias=False, n_kv_head=2, rotary_interleaved=True),
}


@pytest.mark.parametrize("variant", list(FAMILY_CONFIGS))
def test_state_shapes_and_num_params_match_every_family(variant):
    config = gptviz.GPTConfig(vocab_size=13, block_size=9, n_layer=3, n_head=4, n_embd=16, **FAMILY_CONFIGS[variant])
    model = gptviz.GPT(config)
    assert config.state_shapes() == {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert config.num_params() == model.num_params()
    assert gptviz.GPTConfig.from_dict(config.to_dict()) == config
    ids = torch.randint(0, 13, (1, 9))
    t = gptviz.trace(model.eval(), ids[0])  # capture runs and gives the plain forward's logits
    np.testing.assert_array_equal(t["logits"], model(ids)[0].detach().numpy())


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(n_kv_head=3), "n_head=4 is not a multiple of n_kv_head=3"),
        (dict(n_kv_head=257), "n_kv_head=257 is above gptviz's limit of 256"),
        (dict(n_inner=70_000), "n_inner=70,000 is above gptviz's limit of 65,536"),
        (dict(head_size=-1), "head_size=-1: must be a whole number >= 0"),
        (dict(pos_encoding="rotary", head_size=3), "must be even and at least 2"),
        (dict(rope_scaling="yarn"), "rope_scaling='yarn': choose one of none, linear, llama3"),
        (dict(qk_norm="yes"), "qk_norm='yes': choose one of none, head, all"),
        (dict(layer_types="gl"), "layer_types='gl': one letter per layer (3), g global or l local"),
        (dict(layer_types="gxg"), "one letter per layer"),
        (dict(parallel="no"), "parallel='no': must be true or false"),
        (dict(attn_softcap=-1.0), "attn_softcap=-1.0: must be a number >= 0"),
        (dict(rotary_fraction=0.0), "rotary_fraction=0.0: must be in (0, 1]"),
        (dict(rope_scaling="llama3"), "llama3 rope scaling needs rope_original_max > 0"),
    ],
)
def test_bad_family_fields_are_refused_with_a_reason(change, words):
    with pytest.raises(gptviz.ConfigError, match=re.escape(words)):
        gptviz.GPTConfig(vocab_size=13, block_size=9, n_layer=3, n_head=4, n_embd=12, **change)


def _legacy(config: dict) -> dict:
    """config.json as transformers 4.x wrote it: rope_theta / rope_scaling (and GPT-NeoX's rotary_pct,
    Gemma 3's rope_local_base_freq) where v5 writes rope_parameters."""
    config = dict(config)
    params = config.pop("rope_parameters")
    if "full_attention" in params:  # Gemma 3
        config["rope_local_base_freq"] = params["sliding_attention"]["rope_theta"]
        params = params["full_attention"]
    params = dict(params)
    config["rope_theta"] = params.pop("rope_theta")
    if config["model_type"] == "gpt_neox":
        config["rotary_pct"] = params.pop("partial_rotary_factor")
        config["rotary_emb_base"] = config.pop("rope_theta")
    elif "partial_rotary_factor" in params:
        config["partial_rotary_factor"] = params.pop("partial_rotary_factor")
    config["rope_scaling"] = None if params.get("rope_type") == "default" else params
    return config


@pytest.mark.parametrize("kind", ["llama", "gpt_neox", "gemma3_text", "phi3"])
def test_transformers_4_configs_load_the_same(saved, kind, tmp_path):
    hf, path = saved(kind)
    config = json.loads((path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(_legacy(config)))
    (tmp_path / "model.safetensors").symlink_to(path / "model.safetensors")
    assert_parity(hf, gptviz.load(tmp_path), prompt())


@pytest.mark.parametrize("kind", ["llama", "gpt_neox", "qwen3"])
def test_q_and_k_before_the_rotation(saved, kind):
    """The Q/K/V page's unrotated q and k equal the projections (after any q/k norm) before rotary."""
    _, path = saved(kind)
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    attn, cfg = model.transformer.h[1].attn, model.config
    H, Hkv, D = cfg.n_head, cfg.kv_heads, cfg.head_dim
    with torch.no_grad():
        x = model.transformer.h[1].ln_1(t.tensor("blocks.1.resid_pre")[None])
        q, k, _ = attn.c_attn(x).split([H * D, Hkv * D, Hkv * D], dim=-1)
        q, k = q.view(1, -1, H, D).transpose(1, 2), k.view(1, -1, Hkv, D).transpose(1, 2)
        if cfg.qk_norm == "head":
            q, k = attn.q_norm(q), attn.k_norm(k)
    np.testing.assert_allclose(gptviz.analysis.before_rotation(model, t, 1, "q"), q[0].numpy(), atol=1e-5)
    np.testing.assert_allclose(gptviz.analysis.before_rotation(model, t, 1, "k"), k[0].numpy(), atol=1e-5)
    assert np.abs(t["blocks.1.attn.q"] - q[0].numpy()).max() > 1e-3  # the rotation did turn them


def test_attention_figures_say_the_window_and_the_models_scale(saved):
    _, path = saved("gemma2")  # layer 0 local (window 4), scores scaled by 20^-½ and capped at 2
    model = gptviz.load(path).model
    t = gptviz.trace(model, prompt()[0])
    labels = figures.token_labels(t.tokens)
    spec = model.transformer.h[0].attn.spec
    rule = gptviz.analysis.score_rule(spec.scale, spec.softcap, model.config.head_dim)
    for layer, local in ((0, True), (1, False)):
        fig = figures.attention_heatmap(
            gptviz.analysis.attention_matrix(t, layer, 0, "masked scores"),
            labels,
            kind="masked scores",
            mask=t[f"blocks.{layer}.attn.mask"],
            score_rule=rule,
        )
        text = json.dumps(fig.to_plotly_json(), default=str)
        assert ("older than the layer's window" in text) == local
        assert "score 2·tanh((q·k × 0.2236) / 2)" in fig.data[0].colorbar.title.text


def test_shapes_flow_names_rotary_and_the_real_score(saved):
    for kind, words in [("gpt_neo", "scores = q·k (no scale)"), ("llama", "rotary positions turn q and k")]:
        _, path = saved(kind)
        model = gptviz.load(path).model
        flow = gptviz.analysis.shape_flow(gptviz.trace(model, prompt()[0]))
        assert any(words in w for w in flow["what"]), (kind, list(flow["what"]))
        assert not any("q·kᵀ / √D" in w for w in flow["what"]) or kind == "llama"


def test_corpus_scan_head_scores_use_each_layers_attention(saved):
    """The scan scores heads from the maps each layer attends with: with GPT-Neo's unscaled, windowed layers,
    Gemma 2's caps and Llama's grouped-query heads they equal head_scores of each window's own Trace."""
    for kind in ("gpt_neo", "gemma2", "llama"):
        _, path = saved(kind)
        model = gptviz.load(path).model
        docs = [prompt(seed=s)[0].tolist() for s in (20, 21)]
        result = gptviz.scan(model, docs, window=PROMPT_LEN, k=2)
        names = ["previous_token", "induction", "sink", "self", "entropy"]
        per_doc = [gptviz.head_scores(gptviz.trace(model, ids)).set_index(["layer", "head"])[names] for ids in docs]
        expect = (per_doc[0] + per_doc[1]) / 2
        got = result.heads.set_index(["layer", "head"])
        for name in names:
            np.testing.assert_allclose(got.loc[expect.index, name].to_numpy(), expect[name].to_numpy(), atol=1e-5)


HOSTILE = [
    ({"num_key_value_heads": "2"}, "n_kv_head='2'"),
    ({"num_key_value_heads": 3}, "n_head=4 is not a multiple of n_kv_head=3"),
    ({"head_dim": 10**9}, "head_size=1,000,000,000 is above gptviz's limit"),
    ({"intermediate_size": -5}, "n_inner=-5"),
    ({"sliding_window": -1}, "sliding_window=-1"),
    ({"rope_parameters": [1, 2]}, "rope_parameters=[1, 2] must be an object"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10.0}}, "rope scaling 'dynamic' is not implemented"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": "big"}}, "rope_theta='big'"),
    ({"layer_types": "sliding_attention"}, "layer_types='sliding_attention' must be a list"),
    ({"layer_types": ["sliding_attention", "chunked_attention"]}, "'chunked_attention' is not implemented"),
    ({"hidden_act": "tanh"}, "activation 'tanh' is not implemented"),
    ({"hidden_act": ["silu"]}, "activation ['silu'] is not implemented"),
    ({"tie_word_embeddings": "yes"}, "tie_weights='yes'"),
    ({"rms_norm_eps": "tiny"}, "norm_eps='tiny'"),
    ({"num_local_experts": 8}, "mixture-of-experts"),
    ({"vocab_size": 10**7}, "vocab_size=10,000,000 is above gptviz's limit"),
]


@pytest.mark.parametrize(("change", "words"), HOSTILE, ids=[str(c) for c, _ in HOSTILE])
def test_a_hostile_config_json_is_one_sentence(saved, tmp_path, change, words):
    """Each bad field of a decoder's config.json is refused in one sentence naming the file, before
    any weight is read (the weights here are fine)."""
    _, path = saved("mistral")
    config = json.loads((path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    (tmp_path / "model.safetensors").symlink_to(path / "model.safetensors")
    with pytest.raises(gptviz.CheckpointError) as err:
        gptviz.load(tmp_path)
    message = str(err.value)
    assert words in message and "config.json" in message and "\n" not in message
    assert "please report this" not in message  # not the last-resort net: a message of its own


@pytest.mark.parametrize("scaling", [{}, dict(rope_scaling="llama3", rope_factor=8.0, rope_original_max=16)])
def test_a_llama_shaped_gptviz_model_saves_as_a_hugging_face_llama(tmp_path, scaling):
    """gptviz -> Hugging Face Llama directory: transformers' LlamaForCausalLM loads it and computes
    the same logits, and gptviz.load reads it back to the same model."""
    from transformers import LlamaForCausalLM

    from gptviz.formats.hf_decoders import save_hf_llama

    torch.manual_seed(12)
    config = gptviz.GPTConfig(
        vocab_size=150, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=48, n_inner=80, bias=False,
        pos_encoding="rotary", norm="rmsnorm", activation="silu", mlp_gated=True, rope_theta=500000.0, **scaling,
    )  # fmt: skip
    model = gptviz.GPT(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + torch.randn_like(p) * 0.2 if "ln" in name else torch.randn_like(p) * 0.15)
    save_hf_llama(model, tmp_path)
    hf = LlamaForCausalLM.from_pretrained(tmp_path, attn_implementation="eager", dtype=torch.float32).eval()
    ids = prompt()
    with torch.no_grad():
        np.testing.assert_allclose(hf(ids).logits[0].numpy(), model(ids)[0].numpy(), atol=1e-4, rtol=0)
    again = gptviz.load(tmp_path)
    assert again.report.format == "hf-llama (model.safetensors)"
    with torch.no_grad():
        torch.testing.assert_close(again.model(ids), model(ids), atol=0, rtol=0)


def test_a_model_that_is_not_a_llama_is_not_saved_as_one(tmp_path):
    from gptviz.formats.hf_decoders import save_hf_llama

    gemma_like = gptviz.GPT(gptviz.GPTConfig(pos_encoding="rotary", norm="rmsnorm", mlp_gated=True, post_norm=True))
    with pytest.raises(
        gptviz.ConfigError, match="not a Llama, so it has no Hugging Face Llama form: .*norms after sub-layers"
    ):
        save_hf_llama(gemma_like, tmp_path)
    with pytest.raises(gptviz.ConfigError, match=r"its MLP \(Llama: SwiGLU, gated with silu\)"):
        save_hf_llama(gptviz.GPT(gptviz.GPTConfig()), tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_sharded_pytorch_model_bin(tmp_path):
    """pytorch_model.bin.index.json naming two weights-only torch files, as older save_pretrained wrote."""
    hf = hf_random_decoder("olmo2", seed=13)
    hf.config.save_pretrained(tmp_path)
    state = hf.state_dict()
    names = sorted(state)
    shards = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for file, keys in shards.items():
        torch.save({k: state[k] for k in keys}, tmp_path / file)
    index = {"metadata": {}, "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    bundle = gptviz.load(tmp_path)
    assert bundle.report.format == "hf-olmo2 (2 shards)"
    assert_parity(hf, bundle, prompt())
