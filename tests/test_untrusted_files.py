"""gptviz.load on checkpoints a stranger edited: every bad one is refused with one sentence that
names the file and says what is wrong, and none ends in a traceback or in load()'s last-resort net
("unexpected ..."), which would mean a case nobody thought of.

CASES lists the bad inputs (their number is printed by test_the_number_of_bad_inputs); each builds
a good checkpoint of one format (loaded first by test_the_good_ones_load), edits one thing, loads."""

from __future__ import annotations

import json
import os
import pickle
import time
import zipfile

import pytest
import torch
from untrusted_helpers import CHARS, NANO_ARGS, hf, nano_args, nano_state, nanogpt, native, sparse, zip_bomb

import gptviz
from gptviz.errors import summarise
from gptviz.limits import MAX_CONFIG, MAX_PARAMS, MAX_POSITION_TABLE


def test_the_good_ones_load(tmp_path):
    for build in (native, nanogpt, hf):
        bundle = gptviz.load(build(tmp_path))
        assert bundle.report.missing == [] and bundle.report.unexpected == []
    assert gptviz.load(hf(tmp_path / "bin", weights="bin")).report.format == "hf-gpt2 (pytorch_model.bin)"


def _edit(file_name: str, content: bytes | str):
    def edit(path):
        f = path / file_name
        if f.is_dir():
            f.rmdir()
        elif f.exists() or f.is_symlink():
            f.unlink()
        f.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    return edit


def _replace(file_name: str, how: str):
    """Put something other than a file where file_name is expected."""

    def edit(path):
        f = path / file_name
        f.unlink()
        if how == "dir":
            f.mkdir()
        elif how == "loop":
            f.symlink_to(f.name)  # a link to itself
        elif how == "fifo":
            os.mkfifo(f)  # reading it would wait forever
        return path

    return edit


def _random_bytes(n=5000):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8).numpy().tobytes()


def _safetensors(state_edit):
    def build(root):
        state = {k: v for k, v in nano_state().items() if k != "lm_head.weight"}
        return native_with_state(root, state_edit(state))

    return build


def native_with_state(root, state):
    from safetensors.torch import save_file

    path = native(root)
    save_file(state, str(path / "model.safetensors"))
    return path


def _drop(key):
    return lambda s: {k: v for k, v in s.items() if k != key}


def _bpe_spec(root, name):
    path = native(root, tokenizer={"kind": "bpe", "file": name})
    return path


def _zip_of_text(root):
    path = root / "nano"
    path.mkdir()
    with zipfile.ZipFile(path / "ckpt.pt", "w") as z:
        z.writestr("notes/readme.txt", "not a checkpoint")
    return path


def _deep_json(root):
    path = native(root)
    (path / "config.json").write_text('{"gptviz_format": 1, "config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return path


NUL = "\x00"

# (id, build(root) -> path to load, words the message must hold, the file the message must name)
CASES = [
    # --- gptviz's own format: config.json's model config -------------------------------------
    ("native-norm_eps-text", lambda r: native(r, {"norm_eps": "x"}), "norm_eps='x'", "config.json"),
    ("native-norm_eps-null", lambda r: native(r, {"norm_eps": None}), "norm_eps=None", "config.json"),
    ("native-norm_eps-negative", lambda r: native(r, {"norm_eps": -1}), "norm_eps=-1", "config.json"),
    ("native-bias-no", lambda r: native(r, {"bias": "no"}), "bias='no': must be true or false", "config.json"),
    ("native-bias-1", lambda r: native(r, {"bias": 1}), "bias=1: must be true or false", "config.json"),
    ("native-tie-text", lambda r: native(r, {"tie_weights": "false"}), "tie_weights='false'", "config.json"),
    ("native-n_layer-1000", lambda r: native(r, {"n_layer": 1000}), "n_layer=1,000 is above", "config.json"),
    ("native-n_layer-10000", lambda r: native(r, {"n_layer": 10000}), "limit of 256", "config.json"),
    ("native-n_embd-1e6-float", lambda r: native(r, {"n_embd": 1e6}), "n_embd=1000000.0: must be a", "config.json"),
    ("native-n_embd-1e6", lambda r: native(r, {"n_embd": 10**6, "n_head": 1}), "n_embd=1,000,000 is", "config.json"),
    ("native-vocab-1e9", lambda r: native(r, {"vocab_size": 10**9}), "vocab_size=1,000,000,000", "config.json"),
    ("native-vocab-huge-int", lambda r: native(r, {"vocab_size": 10**30}), "vocab_size=", "config.json"),
    ("native-block-30000", lambda r: native(r, {"block_size": 30000}), "block_size=30,000 is above", "config.json"),
    ("native-block-16000", lambda r: native(r, {"block_size": 16000}), "wpe.weight has shape [16, 16]", "safetensors"),
    ("native-params", lambda r: native(r, {"n_layer": 16, "n_embd": 12288}), "parameters, above", "config"),
    ("native-n_layer-200", lambda r: native(r, {"n_layer": 200}), "weights missing for 2,376 keys, e.g.", "safet"),
    ("native-n_layer-1", lambda r: native(r, {"n_layer": 1}), "the weights hold 2 layers but", "safetensors"),
    ("native-n_layer-neg", lambda r: native(r, {"n_layer": -1}), "n_layer=-1: must be a positive", "config.json"),
    ("native-n_layer-float", lambda r: native(r, {"n_layer": 2.5}), "n_layer=2.5: must be a positive", "config.json"),
    ("native-n_layer-bool", lambda r: native(r, {"n_layer": True}), "n_layer=True: must be a positive", "config.json"),
    ("native-n_head-3", lambda r: native(r, {"n_head": 3}), "not divisible by n_head=3", "config.json"),
    ("native-n_head-0", lambda r: native(r, {"n_head": 0}), "n_head=0", "config.json"),
    ("native-vocab-text", lambda r: native(r, {"vocab_size": "11"}), "vocab_size='11'", "config.json"),
    ("native-activation-list", lambda r: native(r, {"activation": ["gelu"]}), "activation=['gelu']", "config.json"),
    ("native-norm-unknown", lambda r: native(r, {"norm": "groupnorm"}), "choose one of", "config.json"),
    ("native-dropout-1.5", lambda r: native(r, {"dropout": 1.5}), "dropout=1.5", "config.json"),
    ("native-dropout-text", lambda r: native(r, {"dropout": "0.1"}), "dropout='0.1'", "config.json"),
    ("native-dropout-nan", lambda r: native(r, {"dropout": float("nan")}), "dropout=nan", "config.json"),
    ("native-unknown-field", lambda r: native(r, {"rope": True}), "unknown config field(s): rope", "config.json"),
    ("native-config-list", lambda r: native(r, top={"gptviz_format": 1, "config": [1]}), "bad model", "config.json"),
    ("native-config-null", lambda r: native(r, top={"gptviz_format": 1, "config": None}), "bad model", "config.json"),
    ("native-config-absent", lambda r: native(r, top={"gptviz_format": 1}), "no 'config' object", "config.json"),
    # --- config.json itself -------------------------------------------------------------------
    ("config-json-list", lambda r: _edit("config.json", "[1, 2]")(native(r)), "expected a JSON object", "config"),
    ("config-json-garbage", lambda r: _edit("config.json", "{not json")(native(r)), "not readable JSON", "config"),
    ("config-json-empty", lambda r: _edit("config.json", b"")(native(r)), "the file is empty", "config.json"),
    ("config-json-latin1", lambda r: _edit("config.json", b'{"a": "\xff"}')(native(r)), "not readable", "config"),
    ("config-json-deep", _deep_json, "not readable JSON", "config.json"),
    ("config-json-dir", lambda r: _replace("config.json", "dir")(native(r)), "not a checkpoint gptviz", "native"),
    ("config-json-loop", lambda r: _replace("config.json", "loop")(native(r)), "not a checkpoint gptviz", "native"),
    # --- model.safetensors --------------------------------------------------------------------
    ("st-missing", lambda r: _replace("model.safetensors", "gone")(native(r)), "file not found", "model.safetensors"),
    ("st-empty", lambda r: _edit("model.safetensors", b"")(native(r)), "the file is empty", "model.safetensors"),
    ("st-random", lambda r: _edit("model.safetensors", _random_bytes())(native(r)), "not a readable", "safetensors"),
    ("st-text", lambda r: _edit("model.safetensors", "hello")(native(r)), "not a readable safetensors", "safetens"),
    ("st-dir", lambda r: _replace("model.safetensors", "dir")(native(r)), "is a directory", "model.safetensors"),
    ("st-fifo", lambda r: _replace("model.safetensors", "fifo")(native(r)), "not a regular file", "safetensors"),
    ("st-loop", lambda r: _replace("model.safetensors", "loop")(native(r)), "file not found", "model.safetensors"),
    (
        "st-wrong-shape",
        _safetensors(lambda s: {**s, "transformer.wte.weight": torch.zeros(12, 16)}),
        "transformer.wte.weight has shape [12, 16] but the config needs [11, 16]",
        "model.safetensors",
    ),
    ("st-missing-key", _safetensors(_drop("transformer.h.1.mlp.c_fc.bias")), "missing for transformer.h.1", "safet"),
    (
        "st-extra-layer",
        _safetensors(lambda s: {**s, "transformer.h.7.ln_1.weight": torch.ones(16)}),
        "the weights hold 8 layers but the config says n_layer=2",
        "model.safetensors",
    ),
    # --- the native tokenizer spec ------------------------------------------------------------
    ("tok-spec-text", lambda r: native(r, tokenizer="char"), "'tokenizer' must be an object", "config.json"),
    ("tok-kind-unknown", lambda r: native(r, tokenizer={"kind": "wordpiece"}), "'wordpiece' is not", "config.json"),
    ("tok-chars-dup", lambda r: native(r, tokenizer={"kind": "char", "chars": ["a", "a"]}), "distinct", "config.json"),
    ("tok-chars-text", lambda r: native(r, tokenizer={"kind": "char", "chars": "abc"}), "list of", "config.json"),
    (
        "tok-chars-many",
        lambda r: native(r, tokenizer={"kind": "char", "chars": list("abcdefghijklmnop")}),
        "16 tok",
        "conf",
    ),
    ("tok-bpe-escape", lambda r: _bpe_spec(r, "../../../etc/passwd"), "a file name beside config.json", "config.json"),
    ("tok-bpe-absolute", lambda r: _bpe_spec(r, "/etc/passwd"), "a file name beside config.json", "config.json"),
    ("tok-bpe-missing", lambda r: _bpe_spec(r, "tok.json"), "file not found", "tok.json"),
    ("tok-bpe-garbage", lambda r: _edit("tok.json", "{")(_bpe_spec(r, "tok.json")), "not a readable tokenizer", "tok"),
    ("tok-bpe-sparse", lambda r: sparse(_bpe_spec(r, "t.json") / "t.json").parent, "too large for a tokenizer", "t.j"),
    # --- nanoGPT: model_args ------------------------------------------------------------------
    ("nano-n_layer-fewer", lambda r: nanogpt(r, nano_args(n_layer=1)), "the weights hold 2 layers but", "ckpt.pt"),
    ("nano-n_layer-more", lambda r: nanogpt(r, nano_args(n_layer=100)), "weights missing for 1,176 keys", "ckpt.pt"),
    ("nano-block-30000", lambda r: nanogpt(r, nano_args(block_size=30000)), "block_size=30,000 is above", "ckpt.pt"),
    ("nano-n_embd-1e6", lambda r: nanogpt(r, nano_args(n_embd=1e6)), "n_embd=1000000.0", "ckpt.pt"),
    ("nano-vocab-1e9", lambda r: nanogpt(r, nano_args(vocab_size=10**9)), "vocab_size=1,000,000,000", "ckpt.pt"),
    ("nano-bias-no", lambda r: nanogpt(r, nano_args(bias="no")), "bias='no': must be true or false", "ckpt.pt"),
    ("nano-bias-none", lambda r: nanogpt(r, nano_args(bias=None)), "bias=None: must be true or false", "ckpt.pt"),
    ("nano-dropout-text", lambda r: nanogpt(r, nano_args(dropout="0.1")), "dropout='0.1'", "ckpt.pt"),
    ("nano-rmsnorm-text", lambda r: nanogpt(r, nano_args(use_rmsnorm="yes")), "use_rmsnorm must be", "ckpt.pt"),
    ("nano-args-list", lambda r: nanogpt(r, [1, 2]), "'model_args' is not a dict", "ckpt.pt"),
    ("nano-args-int-keys", lambda r: nanogpt(r, {**NANO_ARGS, 7: 1}), "fields nanoGPT's model does not (7)", "ckpt"),
    ("nano-model-int-keys", lambda r: nanogpt(r, model={0: torch.zeros(1)}), "not a state dict of tensors", "ckpt"),
    ("nano-model-values", lambda r: nanogpt(r, model={"a": [1, 2]}), "not a state dict of tensors", "ckpt.pt"),
    ("nano-model-empty", lambda r: nanogpt(r, model={}), "weights missing for 29 keys", "ckpt.pt"),
    # --- nanoGPT: ckpt.pt as a file -----------------------------------------------------------
    ("ckpt-random", lambda r: _edit("ckpt.pt", _random_bytes())(nanogpt(r)), "not a readable PyTorch file", "ckpt"),
    ("ckpt-random-2", lambda r: _edit("ckpt.pt", bytes(range(256)) * 20)(nanogpt(r)), "not a readable PyTorch", "ck"),
    ("ckpt-text", lambda r: _edit("ckpt.pt", "notes\n" * 50)(nanogpt(r)), "not a readable PyTorch file", "ckpt.pt"),
    (
        "ckpt-plain-pickle",
        lambda r: _edit("ckpt.pt", pickle.dumps({"model": 1}))(nanogpt(r)),
        "not the zip archive torch.save writes",
        "ckpt.pt",
    ),
    ("ckpt-zip-of-text", _zip_of_text, "not a readable PyTorch file", "ckpt.pt"),
    ("ckpt-zip-truncated", lambda r: _edit("ckpt.pt", b"PK\x03\x04" + bytes(100))(nanogpt(r)), "truncated or", "ckpt"),
    ("ckpt-list", lambda r: (torch.save([1, 2], nanogpt(r) / "ckpt.pt"), r / "nano")[1], "found list", "ckpt.pt"),
    ("ckpt-dir", lambda r: _replace("ckpt.pt", "dir")(nanogpt(r)), "not a checkpoint gptviz recognises", "nano"),
    ("ckpt-fifo", lambda r: _replace("ckpt.pt", "fifo")(nanogpt(r)) / "ckpt.pt", "not a regular file", "ckpt.pt"),
    ("ckpt-bomb", lambda r: zip_bomb(nanogpt(r) / "ckpt.pt", zeros=2**28), "refused: it would unpack to", "ckpt.pt"),
    # --- nanoGPT: meta.pkl --------------------------------------------------------------------
    ("meta-mixed-keys", lambda r: nanogpt(r, meta=pickle.dumps({"itos": {0: "a", "x": "b"}})), "'itos' must", "meta"),
    ("meta-bool-keys", lambda r: nanogpt(r, meta=pickle.dumps({"itos": {False: "a", True: "b"}})), "'itos'", "meta"),
    ("meta-sparse", lambda r: sparse(nanogpt(r) / "meta.pkl").parent, "too large for a vocabulary file", "meta.pkl"),
    ("meta-huge-int", lambda r: nanogpt(r, meta=b"\x80\x04\x8a\x04\xff\xff\xff\x7f."), "expected nanoGPT's", "meta"),
    # --- Hugging Face GPT-2 ---------------------------------------------------------------------
    ("hf-n_embd-null", lambda r: hf(r, {"n_embd": None}), "n_embd=None: must be a positive", "config.json"),
    ("hf-eps-text", lambda r: hf(r, {"layer_norm_epsilon": "abc"}), "layer_norm_epsilon='abc'", "config.json"),
    ("hf-positions-30000", lambda r: hf(r, {"n_positions": 30000}), "n_positions=30,000 is above", "config.json"),
    ("hf-positions-16000", lambda r: hf(r, {"n_positions": 16000}), "wpe.weight has shape [16, 16]", "safetensors"),
    ("hf-n_layer-1000", lambda r: hf(r, {"n_layer": 1000}), "n_layer=1,000 is above", "config.json"),
    ("hf-n_layer-1", lambda r: hf(r, {"n_layer": 1}), "the weights hold 2 layers", "model.safetensors"),
    ("hf-vocab-1e9", lambda r: hf(r, {"vocab_size": 1e9}), "vocab_size=1000000000.0", "config.json"),
    ("hf-activation-list", lambda r: hf(r, {"activation_function": ["gelu"]}), "is not supported", "config.json"),
    ("hf-n_inner-text", lambda r: hf(r, {"n_inner": "big"}), "n_inner='big'", "config.json"),
    ("hf-tie-text", lambda r: hf(r, {"tie_word_embeddings": "false"}), "tie_word_embeddings='false'", "config.json"),
    ("hf-cross-text", lambda r: hf(r, {"add_cross_attention": "no"}), "cross-attention", "config.json"),
    ("hf-no-model-type", lambda r: hf(r, {"model_type": ...}), "no model_type", "config.json"),
    ("hf-config-sparse", lambda r: sparse(hf(r) / "config.json").parent, "too large for a config file", "config.json"),
    ("hf-bin-random", lambda r: _edit("pytorch_model.bin", _random_bytes())(hf(r, weights="bin")), "not a read", "bin"),
    ("hf-bin-bomb", lambda r: zip_bomb(hf(r, weights="bin") / "pytorch_model.bin", 2**28).parent, "unpack", "bin"),
    (
        "hf-bin-list",
        lambda r: (torch.save([1], hf(r, weights="bin") / "pytorch_model.bin"), r / "hf")[1],
        "a state",
        "bin",
    ),
    ("hf-tokenizer-sparse", lambda r: sparse(hf(r) / "tokenizer.json").parent, "too large for a tokenizer", "tokeni"),
    ("hf-vocab-sparse", lambda r: _edit("merges.txt", "")(sparse(hf(r) / "vocab.json").parent), "too large", "vocab"),
    ("hf-vocab-dir", lambda r: _edit("merges.txt", "")(_mkdir(hf(r) / "vocab.json")), "is a directory", "vocab.json"),
    # --- the path itself ------------------------------------------------------------------------
    ("path-missing", lambda r: r / "nowhere", "no such file or directory", "nowhere"),
    ("path-nul", lambda r: str(r / f"a{NUL}b"), "a path cannot contain a NUL byte", "a\\x00b"),
    ("path-too-long", lambda r: r / ("x" * 5000), "", "xxxx"),
]


def _mkdir(path):
    path.mkdir()
    return path.parent


def test_the_number_of_bad_inputs():
    print(f"\n{len(CASES)} bad inputs in tests/test_untrusted_files.py")
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("build, words, names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_checkpoint_is_one_sentence_naming_the_file(tmp_path, build, words, names):
    path = build(tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(gptviz.GptvizError) as caught:
        gptviz.load(path)
    seconds = time.perf_counter() - t0
    message = str(caught.value)
    assert isinstance(caught.value, gptviz.CheckpointError), message
    assert words in message, message
    assert names in message, message
    assert "unexpected" not in message, f"caught only by load()'s last net: {message}"
    assert "\n" not in message and len(message) < 600 + len(str(path)), message
    assert caught.value.__cause__ is None or caught.value.__suppress_context__
    assert seconds < 5, f"{seconds:.1f} s to refuse"


def test_a_random_ckpt_is_corrupt_not_code(tmp_path):
    """Only a pickle that names a callable "could run code"; random bytes are merely not a PyTorch file."""
    for i, data in enumerate([_random_bytes(), bytes(range(256)) * 20, b"\x80\x02" + _random_bytes(100)]):
        (tmp_path / f"{i}.pt").write_bytes(data)
        with pytest.raises(gptviz.CheckpointError) as caught:
            gptviz.load(tmp_path / f"{i}.pt")
        assert "could run code" not in str(caught.value) and "not a readable PyTorch file" in str(caught.value)


def test_a_sparse_6gb_config_is_refused_by_its_size_without_reading(tmp_path):
    path = native(tmp_path)
    sparse(path / "config.json")
    t0 = time.perf_counter()
    with pytest.raises(gptviz.CheckpointError, match=r"config.json: 6.4 GB is too large for a config file"):
        gptviz.load(path)
    assert time.perf_counter() - t0 < 1


def test_the_bounds_are_the_stated_ones():
    """The bounds live in gptviz/limits.py and GPTConfig holds every field to them."""
    for field, top in MAX_CONFIG.items():
        base = dict(vocab_size=8, block_size=8, n_layer=1, n_head=1, n_embd=256)
        gptviz.GPTConfig(**{**base, field: top})  # at the bound: allowed
        with pytest.raises(gptviz.ConfigError, match=rf"{field}={top + 1:,} is above gptviz's limit of {top:,}"):
            gptviz.GPTConfig(**{**base, field: top + 1})
    with pytest.raises(gptviz.ConfigError, match=f"above gptviz's limit of {MAX_PARAMS:,}"):
        gptviz.GPTConfig(vocab_size=8, n_embd=12_288, n_head=1, n_layer=16)  # 16 x 1.8 B in its blocks


def test_a_long_context_allocates_nothing_but_a_sinusoidal_table_is_bounded():
    """A context of millions is a bound on the prompt for rotary positions (nothing is built for it),
    parameters for learned ones (counted), and a held buffer for sinusoidal ones: bounded on its own."""
    top = MAX_CONFIG["block_size"]
    model = gptviz.GPT(
        gptviz.GPTConfig(vocab_size=8, block_size=top, n_layer=1, n_head=1, n_embd=8, pos_encoding="rotary")
    )
    assert sum(b.numel() for b in model.buffers()) < 100 and model.num_params() < 10_000
    with pytest.raises(gptviz.ConfigError, match=f"above gptviz's limit of {MAX_PARAMS:,}"):
        gptviz.GPTConfig(vocab_size=8, block_size=top, n_layer=1, n_head=1, n_embd=4096)  # learned: 43 B
    side = MAX_POSITION_TABLE // 64
    gptviz.GPTConfig(vocab_size=8, block_size=side, n_layer=1, n_head=1, n_embd=64, pos_encoding="sinusoidal")
    with pytest.raises(gptviz.ConfigError, match=f"a table of block_size x n_embd = {(side + 1) * 64:,} values"):
        gptviz.GPTConfig(vocab_size=8, block_size=side + 1, n_layer=1, n_head=1, n_embd=64, pos_encoding="sinusoidal")


@pytest.mark.parametrize("variant", [{}, dict(bias=False), dict(tie_weights=False, norm="rmsnorm")], ids=str)
@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_state_shapes_and_num_params_match_the_model(variant, pos):
    """The shapes checked before a model is built are the shapes the model has."""
    config = gptviz.GPTConfig(vocab_size=13, block_size=9, n_layer=3, n_head=2, n_embd=12, pos_encoding=pos, **variant)
    model = gptviz.GPT(config)
    assert config.state_shapes() == {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert config.num_params() == model.num_params()


def test_summarise_keeps_long_lists_short():
    keys = [f"transformer.h.{i}.attn.c_attn.weight" for i in range(16_000)]
    assert summarise(keys, "keys missing") == (
        "16,000 keys missing, e.g. transformer.h.0.attn.c_attn.weight, "
        "transformer.h.1.attn.c_attn.weight, transformer.h.2.attn.c_attn.weight"
    )
    assert summarise(["a", "b"], "keys") == "a, b"


def test_a_report_row_of_many_keys_is_summarised():
    report = gptviz.LoadReport(path="p", format="f", unexpected=[f"k{i}" for i in range(1000)])
    assert dict(report.as_rows())["unexpected keys"] == "1,000 keys, e.g. k0, k1, k2, k3, k4, k5, k6, k7"


def test_json_bool_is_not_a_flag_anywhere(tmp_path):
    """bias "no" was read as true: now every way in refuses it."""
    with pytest.raises(gptviz.ConfigError, match="bias='no'"):
        gptviz.GPTConfig(bias="no")
    with pytest.raises(gptviz.ConfigError, match="bias='no'"):
        gptviz.GPTConfig.from_dict({"bias": "no"})


def test_nanogpt_with_fewer_layers_than_its_weights_is_refused_not_truncated(tmp_path):
    with pytest.raises(
        gptviz.CheckpointError, match=r"weights hold 2 layers but the config says n_layer=1.*set n_layer"
    ):
        gptviz.load(nanogpt(tmp_path, nano_args(n_layer=1)))


def test_meta_pkl_of_a_char_vocabulary_still_loads(tmp_path):
    bundle = gptviz.load(nanogpt(tmp_path))
    assert bundle.tokenizer.itos == CHARS and json.dumps(bundle.card)


def test_a_torch_file_whose_entries_were_compressed_still_loads(tmp_path):
    """Its tensors cannot be mapped for the shapes-first pass (torch maps stored bytes only), so it
    is read whole, as before, and bounded by its unpacked size."""
    plain = nanogpt(tmp_path / "plain", optimizer={"state": torch.randn(300, 400)}) / "ckpt.pt"
    rezipped = tmp_path / "rezipped" / "ckpt.pt"
    rezipped.parent.mkdir()
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(rezipped, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    with pytest.raises(RuntimeError):  # what the shapes-first pass meets: torch cannot map these entries
        torch.load(rezipped, weights_only=True, mmap=True)
    a, b = gptviz.load(plain).model, gptviz.load(rezipped).model
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_shard_rewritten_between_its_shapes_and_its_read_is_one_sentence(tmp_path):
    """A training run may rewrite a shard while it loads: the tensors read must be the shapes checked."""
    from gptviz.formats.hf_decoders import Weights

    shard = tmp_path / "pytorch_model-00001-of-00001.bin"
    torch.save({"a": torch.zeros(2, 3), "b": torch.ones(4)}, shard)
    weights = Weights([shard])
    assert weights.shapes == {"a": (2, 3), "b": (4,)}
    torch.save({"a": torch.zeros(3, 3), "b": torch.ones(4)}, shard)
    with pytest.raises(gptviz.CheckpointError, match=r"pytorch_model-00001-of-00001.bin: the file changed while"):
        weights.get("b")
