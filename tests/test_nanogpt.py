"""nanoGPT checkpoints: files written exactly as nanoGPT's train.py writes them, checked against an
independent re-implementation of nanoGPT's forward pass, and every bad file's message.

The fixture follows train.py: `checkpoint = {'model': raw_model.state_dict(), 'optimizer':
optimizer.state_dict(), 'model_args': model_args, 'iter_num': iter_num, 'best_val_loss':
best_val_loss, 'config': config}` with best_val_loss a 0-d tensor (estimate_loss returns tensor
means), and meta.pkl as data/shakespeare_char/prepare.py pickles it: {vocab_size, itos, stoi}.
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch
import torch.nn.functional as F

import gptviz
from gptviz.cli import main

CHARS = sorted(set("\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
ARGS = dict(n_layer=2, n_head=2, n_embd=16, block_size=32, bias=True, vocab_size=len(CHARS), dropout=0.0)
TEXT = "ROMEO:\nBut soft, what light?"


def nanogpt_state(bias: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random state dict with nanoGPT's key names and shapes (nn.Linear layout, lm_head tied to wte)."""
    g = torch.Generator().manual_seed(seed)
    C, V, T = ARGS["n_embd"], ARGS["vocab_size"], ARGS["block_size"]

    def rnd(*shape, mean=0.0, std=0.3):
        return torch.randn(*shape, generator=g) * std + mean

    sd = {"transformer.wte.weight": rnd(V, C), "transformer.wpe.weight": rnd(T, C)}
    for i in range(ARGS["n_layer"]):
        p = f"transformer.h.{i}."
        for name, (out, inp) in {
            "attn.c_attn": (3 * C, C),
            "attn.c_proj": (C, C),
            "mlp.c_fc": (4 * C, C),
            "mlp.c_proj": (C, 4 * C),
        }.items():
            sd[p + name + ".weight"] = rnd(out, inp)
            if bias:
                sd[p + name + ".bias"] = rnd(out, std=0.1)
        for ln in ("ln_1", "ln_2"):
            sd[p + ln + ".weight"] = rnd(C, mean=1.0, std=0.1)
            if bias:
                sd[p + ln + ".bias"] = rnd(C, std=0.1)
    sd["transformer.ln_f.weight"] = rnd(C, mean=1.0, std=0.1)
    if bias:
        sd["transformer.ln_f.bias"] = rnd(C, std=0.1)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied: state_dict() lists the shared tensor twice
    return sd


def reference_logits(sd: dict, idx: list[int]) -> torch.Tensor:
    """nanoGPT's forward pass written out by hand: LayerNorm eps 1e-5, exact GELU, causal softmax."""
    C, H = ARGS["n_embd"], ARGS["n_head"]
    D, T = C // H, len(idx)

    def ln(x, name):
        return F.layer_norm(x, (C,), sd[name + ".weight"], sd.get(name + ".bias"), 1e-5)

    def lin(x, name):
        return F.linear(x, sd[name + ".weight"], sd.get(name + ".bias"))

    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:T]  # (T, C)
    for i in range(ARGS["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = lin(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=1)
        q, k, v = (t.view(T, H, D).transpose(0, 1) for t in (q, k, v))  # (H, T, D)
        att = q @ k.transpose(-2, -1) / math.sqrt(D)  # (H, T, T)
        att = att.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf")).softmax(-1)
        x = x + lin((att @ v).transpose(0, 1).reshape(T, C), p + "attn.c_proj")
        x = x + lin(F.gelu(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ sd["transformer.wte.weight"].T  # (T, V)


def write_ckpt(path, bias=True, compiled=False, meta=True, slow_attention=False, **replace):
    """ckpt.pt (and meta.pkl) in train.py's format; returns the state dict before any prefixing."""
    path.mkdir(parents=True, exist_ok=True)
    sd = nanogpt_state(bias)
    state = dict(sd)
    if slow_attention:  # torch < 2.0: nanoGPT registers its causal mask as the buffer attn.bias
        for i in range(ARGS["n_layer"]):
            state[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
    if compiled:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    params = [torch.nn.Parameter(v.clone()) for k, v in sd.items() if k != "lm_head.weight"]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sum(p.sum() for p in params).backward()
    opt.step()
    ckpt = {
        "model": state,
        "optimizer": opt.state_dict(),
        "model_args": {**ARGS, "bias": bias},
        "iter_num": 5000,
        "best_val_loss": torch.tensor(1.4697),
        "config": {
            "out_dir": "out-shakespeare-char",
            "dataset": "shakespeare_char",
            "batch_size": 64,
            "learning_rate": 1e-3,
            "decay_lr": True,
            "compile": compiled,
            "dtype": "bfloat16",
        },
    }
    ckpt.update(replace)
    torch.save(ckpt, path / "ckpt.pt")
    if meta:
        write_meta(path / "meta.pkl")
    return sd


def write_meta(path, chars=CHARS):
    itos = dict(enumerate(chars))
    with open(path, "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": {c: i for i, c in itos.items()}}, f)


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "orig_mod"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_loads_and_matches_reference(tmp_path, bias, compiled):
    sd = write_ckpt(tmp_path / "out", bias=bias, compiled=compiled)
    bundle = gptviz.load(tmp_path / "out" / "ckpt.pt")
    ids = bundle.tokenizer.encode(TEXT)
    with torch.no_grad():
        ours = bundle.model(torch.tensor([ids]))[0]
    torch.testing.assert_close(ours, reference_logits(sd, ids), atol=1e-5, rtol=1e-5)
    cfg = bundle.model.config
    assert (cfg.bias, cfg.activation, cfg.tie_weights, cfg.norm, cfg.pos_encoding) == (
        bias,
        "gelu",
        True,
        "layernorm",
        "learned",
    )
    r = bundle.report
    assert (r.format, r.tokenizer, r.dtype, r.device) == ("nanogpt", "char", "float32", "cpu")
    assert r.missing == [] and r.unexpected == [] and r.reshaped == [] and r.warnings == []
    assert r.n_params == sum(v.numel() for k, v in sd.items() if k != "lm_head.weight")
    assert bundle.card["iter_num"] == 5000 and bundle.card["best_val_loss"] == pytest.approx(1.4697, abs=1e-4)
    assert bundle.card["dataset"] == "shakespeare_char"
    assert ("key_prefix" in bundle.card) == compiled
    assert bundle.tokenizer.decode(ids) == TEXT


def test_directory_holding_ckpt_pt(tmp_path):
    write_ckpt(tmp_path / "out")
    assert gptviz.load(tmp_path / "out").report.format == "nanogpt"


def test_slow_attention_mask_buffer_is_not_a_weight(tmp_path):
    sd = write_ckpt(tmp_path / "out", slow_attention=True)
    bundle = gptviz.load(tmp_path / "out")
    ids = bundle.tokenizer.encode(TEXT)
    with torch.no_grad():
        torch.testing.assert_close(
            bundle.model(torch.tensor([ids]))[0], reference_logits(sd, ids), atol=1e-5, rtol=1e-5
        )


def test_trace_and_greedy_text(tmp_path):
    sd = write_ckpt(tmp_path / "out")
    bundle = gptviz.load(tmp_path / "out")
    ids = bundle.tokenizer.encode(TEXT)
    t = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    torch.testing.assert_close(torch.tensor(t["logits"]), reference_logits(sd, ids), atol=1e-5, rtol=1e-5)
    assert t.tokens == list(TEXT)
    ours, ref = list(ids), list(ids)
    with torch.no_grad():
        for _ in range(5):
            ours.append(int(bundle.model(torch.tensor([ours]))[0, -1].argmax()))
            ref.append(int(reference_logits(sd, ref)[-1].argmax()))
    assert bundle.tokenizer.decode(ours) == bundle.tokenizer.decode(ref)


def test_without_meta_loads_with_ids_only(tmp_path):
    write_ckpt(tmp_path / "out", meta=False)
    bundle = gptviz.load(tmp_path / "out" / "ckpt.pt")
    assert bundle.tokenizer is None and bundle.report.tokenizer == "none"
    assert any("no meta.pkl beside ckpt.pt, so text input is off" in w for w in bundle.report.warnings)
    out = tmp_path / "t.npz"
    assert main(["trace", "--checkpoint", str(tmp_path / "out"), "--token-ids", "1,2,3", "--out", str(out)]) == 0
    assert out.is_file()


def test_without_meta_a_text_prompt_is_a_clear_cli_error(tmp_path, capsys):
    write_ckpt(tmp_path / "out", meta=False)
    rc = main(["trace", "--checkpoint", str(tmp_path / "out"), "--prompt", "hi", "--out", str(tmp_path / "t.npz")])
    assert rc == 2 and "has no tokenizer" in capsys.readouterr().err


def test_meta_given_by_path(tmp_path):
    from gptviz.formats.nanogpt import load_nanogpt

    write_ckpt(tmp_path / "out", meta=False)
    write_meta(tmp_path / "elsewhere.pkl")
    bundle = load_nanogpt(tmp_path / "out", torch.device("cpu"), meta=tmp_path / "elsewhere.pkl")
    assert bundle.tokenizer.vocab_size == len(CHARS)


def test_cli_trace_with_prompt(tmp_path):
    write_ckpt(tmp_path / "out")
    out = tmp_path / "t.npz"
    assert main(["trace", "--checkpoint", str(tmp_path / "out" / "ckpt.pt"), "--prompt", TEXT, "--out", str(out)]) == 0


# --- code in pickles never runs ------------------------------------------------------------------
class Payload:
    """Unpickling this calls open(marker, "w"), which would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_the_payload_is_real(tmp_path):
    pickle.loads(pickle.dumps(Payload(tmp_path / "ran")))
    assert (tmp_path / "ran").exists()


def test_meta_pkl_with_code_is_refused_and_does_not_run(tmp_path):
    write_ckpt(tmp_path / "out", meta=False)
    marker = tmp_path / "payload-ran"
    with open(tmp_path / "out" / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 3, "itos": Payload(marker)}, f)
    with pytest.raises(gptviz.CheckpointError, match=r"meta.pkl: refused to unpickle: it names [\w.]*open"):
        gptviz.load(tmp_path / "out")
    assert not marker.exists()


def test_meta_pkl_with_any_class_is_refused(tmp_path):
    from collections import OrderedDict

    write_ckpt(tmp_path / "out", meta=False)
    with open(tmp_path / "out" / "meta.pkl", "wb") as f:
        pickle.dump({"itos": OrderedDict(enumerate("ab"))}, f)
    with pytest.raises(
        gptviz.CheckpointError, match=r"meta.pkl: refused to unpickle: it names collections.OrderedDict"
    ):
        gptviz.load(tmp_path / "out")


def test_ckpt_with_code_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "payload-ran"
    write_ckpt(tmp_path / "out", config=Payload(marker))
    with pytest.raises(
        gptviz.CheckpointError, match=r"ckpt.pt: refused to load: it names [\w.]*open, which could run code"
    ):
        gptviz.load(tmp_path / "out")
    assert not marker.exists()


# --- bad files -----------------------------------------------------------------------------------
def test_empty_ckpt(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(b"")
    with pytest.raises(gptviz.CheckpointError, match=r"ckpt.pt: the file is empty"):
        gptviz.load(tmp_path / "ckpt.pt")


def test_truncated_ckpt(tmp_path):
    write_ckpt(tmp_path / "out")
    f = tmp_path / "out" / "ckpt.pt"
    f.write_bytes(f.read_bytes()[:3000])
    with pytest.raises(gptviz.CheckpointError, match=r"ckpt.pt: not a readable PyTorch file, truncated or corrupt"):
        gptviz.load(f)


def test_text_file_named_ckpt_pt(tmp_path):
    (tmp_path / "ckpt.pt").write_text("just some notes, not a checkpoint\n")
    with pytest.raises(gptviz.CheckpointError, match=r"ckpt.pt: not a readable PyTorch file"):
        gptviz.load(tmp_path / "ckpt.pt")


def test_a_text_file(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(gptviz.CheckpointError, match=r"notes.txt: not a checkpoint gptviz recognises"):
        gptviz.load(tmp_path / "notes.txt")


def test_random_pt_file(tmp_path):
    torch.save(torch.zeros(3), tmp_path / "weights.pt")
    with pytest.raises(gptviz.CheckpointError, match=r"weights.pt: not a nanoGPT checkpoint: .* found Tensor"):
        gptviz.load(tmp_path / "weights.pt")


def test_bare_state_dict_pt(tmp_path):
    torch.save(nanogpt_state(True), tmp_path / "model.pt")
    with pytest.raises(gptviz.CheckpointError, match=r"model.pt: not a nanoGPT checkpoint: expected train.py's dict"):
        gptviz.load(tmp_path / "model.pt")


def test_model_args_of_a_modified_model(tmp_path):
    write_ckpt(tmp_path / "out", model_args={**ARGS, "n_kv_head": 1})
    with pytest.raises(gptviz.CheckpointError, match=r"model_args has fields nanoGPT's model does not \(n_kv_head\)"):
        gptviz.load(tmp_path / "out")


def test_model_args_missing_a_field(tmp_path):
    args = dict(ARGS)
    del args["n_head"]
    write_ckpt(tmp_path / "out", model_args=args)
    with pytest.raises(gptviz.CheckpointError, match=r"ckpt.pt: model_args lacks n_head"):
        gptviz.load(tmp_path / "out")


def test_weights_do_not_fit_model_args(tmp_path):
    write_ckpt(tmp_path / "out", model_args={**ARGS, "n_embd": 32})
    with pytest.raises(gptviz.CheckpointError, match=r"ckpt.pt: transformer\.\S+ has shape"):
        gptviz.load(tmp_path / "out")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", r"meta.pkl: the file is empty"),
        (pickle.dumps({"vocab_size": 3, "itos": {0: "a", 1: "b", 2: "c"}})[:10], r"meta.pkl: not a readable pickle"),
        (b"plain text, not a pickle", r"meta.pkl: not a readable pickle"),
        (pickle.dumps([1, 2, 3]), r"meta.pkl: expected nanoGPT's meta.pkl"),
        (pickle.dumps({"itos": {0: "a", 2: "b"}}), r"meta.pkl: 'itos' must map the ids 0..1 to single characters"),
        (
            pickle.dumps({"itos": dict(enumerate(map(chr, range(40, 140))))}),
            r"meta.pkl: the vocabulary has 100 characters but the model only \d+ ids",
        ),
    ],
    ids=["empty", "truncated", "text", "not-a-dict", "gaps", "too-big"],
)
def test_bad_meta(tmp_path, content, message):
    write_ckpt(tmp_path / "out", meta=False)
    (tmp_path / "out" / "meta.pkl").write_bytes(content)
    with pytest.raises(gptviz.CheckpointError, match=message):
        gptviz.load(tmp_path / "out")
