"""Logit attribution (parts that sum to the real logit, one head by hand against Hugging Face's own
numbers) and health findings (each planted fault gives its finding; `check` exit codes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id

import gptviz
from gptviz.analysis.attribution import COLUMNS, component_labels, head_matrix
from gptviz.analysis.health import ATTN_LOGIT_LIMIT, GROWTH_LIMIT, Finding, _copied_rows, _nonfinite, _row_norms, worst
from gptviz.cli import main
from gptviz.record import Trace

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
TOK = gptviz.CharTokenizer(list("abcdefghij "))  # 11 ids, as tiny_model's vocabulary


# --- logit attribution --------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS[::2], ids=variant_id)
def test_parts_sum_to_the_real_logit_and_difference(variant):
    model = tiny_model(**variant)
    tr = gptviz.trace(model, IDS)
    for position in (0, 5, -1):
        logits = tr["logits"][position].astype(np.float64)
        for target, baseline in ((7, None), (2, 9), (4, 4)):
            df = gptviz.logit_attribution(model, tr, target, position, baseline)
            real = logits[target] - (logits[baseline] if baseline is not None else 0.0)
            assert df.attrs["logit"] == pytest.approx(real, abs=1e-9)
            assert df["value"].sum() == pytest.approx(real, abs=1e-4 * max(1.0, abs(real)))
            if baseline == target:  # a logit minus itself: every part is 0
                assert np.abs(df["value"]).max() < 1e-12


def test_rows_columns_and_components(model):
    cfg = model.config
    tr = gptviz.trace(model, IDS)
    df = gptviz.logit_attribution(model, tr, 3)
    assert list(df.columns) == COLUMNS == ["component", "layer", "head", "value"]
    L, Hn = cfg.n_layer, cfg.n_head
    assert len(df) == 1 + L * (Hn + 3) + 1  # embed; heads, attn bias, MLP, MLP bias per layer; ln_f bias
    assert df["component"].iloc[0] == "embed" and df["component"].iloc[-1] == "ln_f_bias"
    heads = df[df["component"] == "head"]
    assert len(heads) == L * Hn and heads["head"].notna().all()
    assert df[df["component"] != "head"]["head"].isna().all()
    assert set(df["component"]) == {"embed", "head", "attn_bias", "mlp", "mlp_bias", "ln_f_bias"}
    m = head_matrix(df, L, Hn)
    assert m.shape == (L, Hn) and m[1, 0] == heads[(heads["layer"] == 1) & (heads["head"] == 0)]["value"].item()
    assert component_labels(df)[:3] == ["embed", "L0 H0", "L0 H1"] and "L1 MLP bias" in component_labels(df)
    nobias = tiny_model(bias=False, norm="rmsnorm")
    df = gptviz.logit_attribution(nobias, gptviz.trace(nobias, IDS), 3)
    assert len(df) == 1 + L * (Hn + 1)  # no biases, and RMSNorm has no bias either
    assert set(df["component"]) == {"embed", "head", "mlp"}


def test_baseline_is_the_difference_of_two_attributions(model):
    tr = gptviz.trace(model, IDS)
    a, b = (gptviz.logit_attribution(model, tr, t, 4) for t in (6, 1))
    d = gptviz.logit_attribution(model, tr, 6, 4, baseline=1)
    np.testing.assert_allclose(d["value"], a["value"] - b["value"], atol=1e-12)


def test_the_scale_is_the_real_runs(model):
    """The frozen σ is the one the final norm really divided by: rebuild ln_f's output with it."""
    tr = gptviz.trace(model, IDS)
    x = tr["blocks.1.resid_post"][-1].astype(np.float64)
    df = gptviz.logit_attribution(model, tr, 2)
    ln = model.transformer.ln_f
    rebuilt = (x - x.mean()) / df.attrs[
        "sigma"
    ] * ln.weight.detach().double().numpy() + ln.bias.detach().double().numpy()
    np.testing.assert_allclose(rebuilt, tr["ln_f"][-1], atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(target=11), "target must be a token id in [0, 10]"),
        (dict(target=-1), "target must be a token id"),
        (dict(target=True), "target must be a token id"),
        (dict(target=2.0), "target must be a token id"),
        (dict(target=2, baseline=99), "baseline must be a token id"),
        (dict(target=2, position=12), "position 12 is outside the prompt's 12 tokens"),
        (dict(target=2, position=-13), "outside the prompt"),
    ],
)
def test_bad_targets_and_positions_are_clear_errors(model, kwargs, words):
    tr = gptviz.trace(model, IDS)
    with pytest.raises(gptviz.PromptError, match=words.replace("[", r"\[").replace("]", r"\]")):
        gptviz.logit_attribution(model, tr, **kwargs)


def test_one_heads_part_by_hand_from_hugging_face(tmp_path):
    """Head h of layer 1's part, computed from Hugging Face GPT-2's own numbers through its hooks:
    the input of c_proj (the merged heads) and the input of ln_f (the final residual)."""
    transformers = pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    torch.manual_seed(5)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_layer=2, n_head=4, n_embd=32)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if ".ln_" in name or "ln_f" in name else 0.2 * torch.randn_like(p))
    hf.save_pretrained(tmp_path / "hf")
    model = gptviz.load(tmp_path / "hf").model
    seen = {}
    hooks = [
        hf.transformer.h[1].attn.c_proj.register_forward_pre_hook(lambda m, a: seen.update(z=a[0][0].double())),
        hf.transformer.ln_f.register_forward_pre_hook(lambda m, a: seen.update(x=a[0][0].double())),
    ]
    ids = [4, 8, 15, 16, 23, 42, 4, 8]
    try:
        with torch.no_grad():
            hf_logits = hf(torch.tensor([ids])).logits[0].double()
    finally:
        for h in hooks:
            h.remove()
    tr = gptviz.trace(model, ids)
    pos, head, target, D = 5, 2, 17, 8
    # by hand: head 2's slice of the merged heads through its rows of c_proj (HF Conv1D: x @ W)
    z = seen["z"][pos, head * D : (head + 1) * D]  # [D]
    w = hf.transformer.h[1].attn.c_proj.weight.detach().double()[head * D : (head + 1) * D]  # [D, C]
    out = z @ w  # [C]
    x = seen["x"][pos]
    ln = hf.transformer.ln_f
    sigma = math.sqrt(float(x.var(unbiased=False)) + ln.eps)
    with torch.no_grad():
        part = float(((out - out.mean()) * ln.weight.double() / sigma) @ hf.lm_head.weight.double()[target])
    df = gptviz.logit_attribution(model, tr, target, pos)
    mine = df[(df["component"] == "head") & (df["layer"] == 1) & (df["head"] == head)]["value"].item()
    assert abs(part) > 1e-3  # a head that writes something, so the comparison means something
    assert mine == pytest.approx(part, rel=1e-4, abs=1e-6)
    assert df["value"].sum() == pytest.approx(float(hf_logits[pos, target]), rel=1e-4, abs=1e-4)


# --- health --------------------------------------------------------------------------------------
NAMES = [
    "nonfinite_weights",
    "nonfinite_activations",
    "attention_rows",
    "collapsed_heads",
    "uniform_heads",
    "sink_heads",
    "max_attention_logit",
    "residual_growth",
    "untrained_embeddings",
    "unreachable_vocab",
]


def findings(model, ids=IDS, tokenizer=None, trace=None) -> dict[str, Finding]:
    out = gptviz.health(model, trace or gptviz.trace(model, ids), tokenizer)
    assert [f.name for f in out] == NAMES
    for f in out:
        assert f.status in ("ok", "warn", "fail") and f.message
        json.dumps(f.to_dict(), allow_nan=False)  # strict JSON, whatever the value
    return {f.name: f for f in out}


def test_a_clean_random_model_has_no_failure(model):
    got = findings(model, tokenizer=TOK)
    assert worst(list(got.values())) != "fail"
    for name in ("nonfinite_weights", "nonfinite_activations", "attention_rows", "residual_growth"):
        assert got[name].status == "ok", got[name]
    assert got["uniform_heads"].status == "warn"  # random weights: every head averages, and says so
    assert all("threshold" in f.message for n, f in got.items() if n != "unreachable_vocab")
    assert got["attention_rows"].value < 1e-5
    assert str(got["nonfinite_weights"]).startswith("ok nonfinite_weights: all ")


def test_a_nan_weight_fails(model):
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[3, 2] = float("nan")
    got = findings(model)
    assert got["nonfinite_weights"].status == "fail" and got["nonfinite_weights"].value == 1
    assert "transformer.h.1.mlp.c_fc.weight" in got["nonfinite_weights"].message
    assert got["nonfinite_activations"].status == "fail"
    assert "first blocks.1.mlp.hidden" in got["nonfinite_activations"].message  # where the NaN starts
    assert worst(list(got.values())) == "fail"


def test_an_exploding_residual_warns(model):
    assert findings(model)["residual_growth"].status == "ok"
    with torch.no_grad():
        for proj in (model.transformer.h[1].attn.c_proj, model.transformer.h[1].mlp.c_proj):
            proj.weight.mul_(100.0)
    f = findings(model)["residual_growth"]
    assert f.status == "warn" and f.value > GROWTH_LIMIT and "block 1" in f.message
    assert "the block after block 0 that grows it most is block 1, ×" in f.message


def test_a_block_that_does_not_grow_the_residual_is_said_plainly(model):
    """Not "grows 1.1×, at most ×0.94 in one block": a block that adds nothing keeps the norm as it is."""
    with torch.no_grad():
        for proj in (model.transformer.h[1].attn.c_proj, model.transformer.h[1].mlp.c_proj):
            proj.weight.zero_()
            proj.bias.zero_()
    f = findings(model)["residual_growth"]
    assert f.status == "ok" and f.value == pytest.approx(1.0)
    assert "no block after block 0 grows it (each keeps or shrinks it; the most is ×1.00)" in f.message
    assert "at most" not in f.message and "the mean residual norm is " in f.message


def collapse_head(model, layer: int, head: int) -> None:
    """Hand-set weights: the head's query ignores its input (W_q = 0) and is one large fixed vector
    (its bias), so every query picks the same kind of key with logits in the thousands: one-hot rows."""
    D, C = model.config.head_dim, model.config.n_embd
    attn = model.transformer.h[layer].attn.c_attn
    with torch.no_grad():
        attn.weight[head * D : (head + 1) * D] = 0.0
        attn.bias[head * D : (head + 1) * D] = 1e5 * torch.randn(D)
    assert attn.weight.shape[1] == C


def test_a_collapsed_head_warns_and_names_itself(model):
    clean = findings(model)
    assert clean["collapsed_heads"].status == "ok" and clean["max_attention_logit"].status == "ok"
    collapse_head(model, 1, 0)
    got = findings(model)
    assert got["collapsed_heads"].status == "warn" and got["collapsed_heads"].value == 1
    assert "L1 H0" in got["collapsed_heads"].message
    assert got["max_attention_logit"].status == "warn" and got["max_attention_logit"].value > ATTN_LOGIT_LIMIT
    assert "L1 H0" in got["max_attention_logit"].message
    assert "L1 H0" not in got["uniform_heads"].message  # no longer averaging


def edited(tr: Trace, name: str, fn) -> Trace:
    tensors = {n: tr.tensor(n).clone() for n in tr.names}
    tensors[name] = fn(tensors[name])
    return Trace(tensors, tr.tokens, tr.token_ids, [])


def test_rows_that_do_not_sum_to_one_fail(model):
    tr = gptviz.trace(model, IDS)
    bad = edited(tr, "blocks.0.attn.weights", lambda w: torch.cat([w[:1] * 0.5, w[1:]]))
    f = findings(model, trace=bad)["attention_rows"]
    assert f.status == "fail" and f.value == pytest.approx(0.5, abs=1e-6) and "L0 H0" in f.message
    assert "L0 H1" not in f.message


def test_a_layer_of_sink_heads_warns(model):
    tr = gptviz.trace(model, IDS)
    T = len(IDS)
    sink = torch.zeros(2, T, T)
    sink[:, :, 0] = 1.0  # every query of both heads reads only the first token
    got = findings(model, trace=edited(tr, "blocks.1.attn.weights", lambda w: sink))
    assert got["sink_heads"].status == "warn" and got["sink_heads"].value == 2
    assert "layer(s) 1" in got["sink_heads"].message
    assert got["attention_rows"].status == "ok"
    assert findings(model)["sink_heads"].status == "ok"


def test_untrained_embedding_rows_and_unreachable_vocabulary(model):
    assert findings(model, tokenizer=TOK)["untrained_embeddings"].status == "ok"
    with torch.no_grad():
        wte = model.transformer.wte.weight
        wte[10] = 0.0  # never trained and zeroed
        wte[9] = wte[2]  # an exact copy
        wte[8] *= 0.01  # far shorter than the others
    small = gptviz.CharTokenizer(list("abcdefgh"))  # 8 ids: 8, 9, 10 cannot be produced
    got = findings(model, ids=[1, 2, 3, 4], tokenizer=small)
    f = got["untrained_embeddings"]
    assert f.status == "warn" and f.value == 4  # 2 and its copy 9, 8, 10
    assert "1 zero, 2 copies, 1 short" in f.message and "3 of them lie beyond" in f.message
    v = got["unreachable_vocab"]
    assert v.status == "warn" and v.value == 3
    big = gptviz.CharTokenizer(list("abcdefghijklm"))  # 13 ids for a model of 11
    assert findings(model, tokenizer=big)["unreachable_vocab"].status == "fail"
    assert findings(model)["unreachable_vocab"].value is None  # not checked without a tokenizer


def test_the_quick_weight_and_row_checks_count_what_the_slow_ones_did():
    """The checks read a 1B model's weights in one pass (a sum) and hash the embedding rows, instead of
    counting every value and sorting every row: the counts must be those of the definitions."""
    big = torch.full((8,), 6e4, dtype=torch.float16)  # finite, but its sum overflows float16
    assert _nonfinite(big) == 0
    big[3], big[5] = float("inf"), float("nan")
    assert _nonfinite(big) == 2 == int((~torch.isfinite(big)).sum())
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        w = torch.randn(9000, 16, generator=g).to(dtype)  # more rows than ROWS_AT_ONCE
        w[8999] = w[3]
        w[7], w[100] = 0.0, -0.0  # zero rows: not among the rows judged
        w[50, :] = w[60, :]
        w[50, 0], w[60, 0] = 0.0, -0.0  # equal under ==, not bit for bit
        w[200] = w[201] = float("nan")  # NaN != NaN: never copies
        norms, want_norms = _row_norms(w), torch.linalg.vector_norm(w.double(), dim=1)
        assert torch.equal(norms.isnan(), want_norms.isnan()) and torch.equal(norms[:200], want_norms[:200])
        among = torch.isfinite(norms) & (norms != 0)  # as check_embeddings asks
        want = torch.zeros(9000, dtype=torch.bool)
        want[[3, 8999, 50, 60]] = True
        assert torch.equal(_copied_rows(w, among), want), dtype
    wide = torch.randn(50, 300, generator=g)  # only every 3rd column is hashed
    wide[10], wide[20], wide[30] = wide[40], wide[40], wide[40]
    wide[10, 1] += 1.0  # equal to row 40 in every hashed column, not in all
    assert torch.nonzero(_copied_rows(wide, torch.ones(50, dtype=torch.bool))).flatten().tolist() == [20, 30, 40]


def test_one_token_prompt_and_nonfinite_values_are_reported_not_raised(model):
    got = findings(model, ids=[4])
    assert got["collapsed_heads"].value is None and "one token" in got["collapsed_heads"].message
    with torch.no_grad():
        model.transformer.wte.weight[4] = float("inf")
    got = findings(model, ids=[4, 4, 1])
    assert got["nonfinite_activations"].status == "fail"
    assert got["residual_growth"].value is None and "not judged" in got["residual_growth"].message
    assert got["nonfinite_weights"].to_dict()["value"] == model.config.n_embd


# --- python -m gptviz check ----------------------------------------------------------------------
def check(capsys, *args) -> tuple[int, str, str]:
    """The CLI's main() in this process (a subprocess per case would cost a torch import each)."""
    rc = main(["check", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def saved(tmp_path, name, edit=None):
    model = tiny_model()
    if edit:
        with torch.no_grad():
            edit(model)
    return str(gptviz.save(model, tmp_path / name, TOK))


def statuses(out: str) -> dict[str, str]:
    """'ok|warn|fail name: message' lines -> {name: status}."""
    got = {}
    for line in out.splitlines():
        status, rest = line.split(" ", 1)
        got[rest.split(": ", 1)[0]] = status
    return got


def test_check_gates_a_pipeline_by_exit_status(tmp_path):
    """A real process, as a training pipeline would call it: 0 on a clean model, 1 on a NaN weight."""
    nan = saved(tmp_path, "nan", lambda m: m.transformer.h[0].attn.c_attn.weight[0, 0].fill_(math.nan))
    script = "; ".join(
        f"p = subprocess.run([sys.executable, '-m', 'gptviz', 'check', '--checkpoint', {c!r}]); print(p.returncode)"
        for c in (saved(tmp_path, "clean"), nan)
    )
    p = subprocess.run([sys.executable, "-c", "import subprocess, sys; " + script], capture_output=True, text=True)
    codes = [line for line in p.stdout.splitlines() if line in ("0", "1", "2")]
    assert codes == ["0", "1"], p.stdout + p.stderr
    assert "fail nonfinite_weights: 1 of " in p.stdout


def test_check_exit_codes_and_lines(tmp_path, capsys):
    rc, out, _ = check(capsys, "--checkpoint", saved(tmp_path, "clean"), "--prompt", "bad cafe head")
    assert rc == 0 and list(statuses(out)) == NAMES and "fail" not in statuses(out).values()
    assert len(out.splitlines()) == len(NAMES)  # one line per finding

    nan = saved(tmp_path, "nan", lambda m: m.transformer.h[0].attn.c_attn.weight[0, 0].fill_(math.nan))
    rc, out, _ = check(capsys, "--checkpoint", nan)
    assert rc == 1 and statuses(out)["nonfinite_weights"] == "fail"

    def explode(m):
        for proj in (m.transformer.h[1].attn.c_proj, m.transformer.h[1].mlp.c_proj):
            proj.weight.mul_(100.0)

    rc, out, _ = check(capsys, "--checkpoint", saved(tmp_path, "big", explode), "--token-ids", "1,2,3,4,5,6,7,8")
    assert rc == 0 and statuses(out)["residual_growth"] == "warn"

    rc, out, _ = check(capsys, "--checkpoint", saved(tmp_path, "collapsed", lambda m: collapse_head(m, 0, 1)), "--json")
    assert rc == 0
    got = {f["name"]: f for f in json.loads(out)}
    assert got["collapsed_heads"]["status"] == "warn" and "L0 H1" in got["collapsed_heads"]["message"]
    assert list(got) == NAMES and set(got["sink_heads"]) == {"name", "status", "value", "message"}

    rc, out, _ = check(
        capsys, "--checkpoint", saved(tmp_path, "nan2", lambda m: m.lm_head.weight[0, 0].fill_(math.nan)), "--json"
    )
    assert rc == 1 and json.loads(out)[0]["status"] == "fail"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--prompt", ""], "the prompt is empty"),
        (["--prompt", "xyz"], "does not know 3 character(s)"),
        (["--token-ids", "1,99"], "token id 99 is outside the vocabulary"),
        (["--token-ids", "1;2"], "must be comma-separated integers"),
        (["--token-ids", ""], "no --token-ids given"),
    ],
)
def test_check_bad_input_exits_2_with_one_line(tmp_path, capsys, args, words):
    rc, out, err = check(capsys, "--checkpoint", saved(tmp_path, "clean"), *args)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_check_a_missing_or_broken_checkpoint_exits_2(tmp_path, capsys):
    rc, _, err = check(capsys, "--checkpoint", str(tmp_path / "nope"))
    assert rc == 2 and "no such file or directory" in err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{")
    rc, _, err = check(capsys, "--checkpoint", str(tmp_path / "broken"))
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_a_bf16_models_rows_pass_at_bf16s_rounding_and_broken_rows_still_fail():
    """A bf16 model's attention rows are sums of weights rounded to 8 bits: off by ~0.002 from 1,
    which the float32 threshold (1e-3) called broken (469 heads of a 1B model failed)."""
    torch.manual_seed(0)
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=97, block_size=64, n_layer=2, n_head=4, n_embd=64))
    model = model.eval().to(torch.bfloat16)
    t = gptviz.trace(model, torch.randint(0, 97, (48,)))
    rows = {f.name: f for f in gptviz.health(model, t)}["attention_rows"]
    assert rows.status == "ok" and 1e-3 < rows.value < 2 * torch.finfo(torch.bfloat16).eps, rows
    assert "the weights' own rounding" in rows.message
    with torch.no_grad():
        model.transformer.h[1].attn.c_attn.weight[0, 0] = float("nan")  # q of head 0 NaN: its rows are NaN
    t = gptviz.trace(model, torch.randint(0, 97, (48,)))
    rows = {f.name: f for f in gptviz.health(model, t)}["attention_rows"]
    assert rows.status == "fail" and "L1 H0" in rows.message
