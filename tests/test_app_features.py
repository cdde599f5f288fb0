"""The Features page and the steering panel (Next token) through AppTest: the numbers drawn against
the library run directly, and a bad or mismatched SAE as one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import app_session, array, figure, ok, open_lesson_file, serve
from sae_helpers import random_sae

import gptviz
from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard import keys, progress
from gptviz.dashboard.sources.classmode import CLASS_ENV
from gptviz.dashboard.sources.saes import SAEPick
from gptviz.dashboard.state import PRESET_PROMPT
from gptviz.features import save_sae
from gptviz.features.reading import top_features
from gptviz.figures.style import WORD_JOINER
from gptviz.steering_spec import SteeringSpec

SITE = "blocks.1.resid_post"


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory) -> Path:
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    save_sae(random_sae("topk", d_in=32, d_sae=96, site=SITE, k=8), root / NAME / "saes" / "tiny-sae")
    save_sae(
        random_sae("standard", d_in=32, d_sae=64, site="blocks.0.resid_post", seed=3),
        root / NAME / "saes" / "tiny-sae-2",
    )
    save_sae(random_sae("topk", d_in=16, site=SITE), root / "other-sae")
    samples = tmp_path_factory.mktemp("samples")
    (samples / "shakespeare").mkdir()
    (samples / "shakespeare" / "a.txt").write_text("To be, or not to be, that is the question.\n" * 20)
    return root, samples


def open_page(monkeypatch, roots, page: str):
    root, samples = roots
    monkeypatch.setenv("GPTVIZ_SAMPLES_DIR", str(samples))
    serve(monkeypatch, root, NAME)
    return ok(app_session(page, timeout=180))


def _run(root: Path):
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, PRESET_PROMPT, bundle.model.config.block_size)
    return bundle, ids, gptviz.trace(bundle.model, ids, bundle.tokenizer)


def test_features_page_draws_the_prompts_features_and_edits_one(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    assert at.title[0].value == "Features"
    bundle, ids, t = _run(ckpt_root[0])
    sae = gptviz.load_sae(ckpt_root[0] / NAME / "saes" / "tiny-sae")
    acts = gptviz.feature_activations(t, sae)
    heat = figure(at, "ft_heatmap")["data"][0]
    shown = [int(x[1:]) for x in heat["x"]]
    np.testing.assert_allclose(array(heat["z"]), acts[:, shown], atol=1e-6)
    assert acts[:, shown].max(0).min() >= np.sort(acts.max(0))[-len(shown)]  # the strongest ones
    feature = int(at.number_input(key="ft_feature").value)
    bars = figure(at, "ft_effect")["data"][0]
    effect = bundle.model.lm_head.weight.detach() @ sae.W_dec[feature]
    assert max(array(bars["x"])) == pytest.approx(float(effect.max()), abs=1e-5)
    edited = gptviz.trace(bundle.model, ids, interventions=[gptviz.edit_features(sae, [feature])])
    after = figure(at, "ft_after")["data"][0]
    top = np.sort(np.exp(edited["logits"][-1] - edited["logits"][-1].max()))[::-1]
    top = top / np.exp(edited["logits"][-1] - edited["logits"][-1].max()).sum()
    np.testing.assert_allclose(sorted(array(after["x"]), reverse=True), top[: len(array(after["x"]))], atol=1e-5)
    fired = acts[:, feature][acts[:, feature] > 0]
    hist = figure(at, "ft_hist")
    np.testing.assert_allclose(np.sort(array(hist["data"][0]["x"])), np.sort(fired), atol=1e-6)
    title = f"Feature {feature} fires on {len(fired)} of this prompt's {len(ids)} tokens"
    assert hist["layout"]["title"]["text"].startswith(title)
    at.toggle(key="ft_scan").set_value(True)
    ok(at.run())
    contexts = at.dataframe[-1].value  # the strongest contexts of the feature in the sample corpus
    s = gptviz.scan(bundle.model, ckpt_root[1] / "shakespeare", bundle.tokenizer, k=8, saes=[sae])
    want = s.features[s.features.feature == feature].sort_values("rank")
    np.testing.assert_allclose(contexts["activation"], want.value, atol=1e-6)
    assert all(c.endswith("]]") for c in contexts.iloc[:, -1])
    # the bars stay the prompt's, titled as such; the corpus's density is said apart, as the corpus's
    hist = figure(at, "ft_hist")
    np.testing.assert_allclose(np.sort(array(hist["data"][0]["x"])), np.sort(fired), atol=1e-6)
    assert hist["layout"]["title"]["text"].startswith(title)
    density = float(s.feature_density.set_index("feature").loc[feature, "density"])
    corpus = f"in the sample corpus's {s.summary['tokens']:,} tokens it fires on {100 * density:.2f}%"
    assert corpus in hist["layout"]["title"]["subtitle"]["text"]


def test_the_sample_scan_reports_its_windows_into_a_bar(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    got: list[gptviz.Progress] = []
    real = progress.describe
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)  # every step counts as slow
    monkeypatch.setattr(progress, "describe", lambda p: got.append(p) or real(p))
    at.toggle(key="ft_scan").set_value(True)
    ok(at.run())
    windows = [p.done for p in got if p.what == "windows"]
    assert windows[0] == 0 and windows[-1] == got[-1].total > 0 and windows == sorted(windows)
    assert not at.get("progress") and at.dataframe  # gone once done; the contexts shown


def test_a_bad_or_mismatched_sae_is_one_line(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    at.sidebar.selectbox(key="sae_choice").set_value(SAEPick.PATH)
    ok(at.run())
    at.sidebar.text_input(key="sae_path").set_value(str(ckpt_root[0] / "other-sae"))
    at.run()
    assert not at.exception
    assert "trained on another model" in at.error[0].value and "\n" not in at.error[0].value
    at.sidebar.text_input(key="sae_path").set_value(str(ckpt_root[0] / "nothing-here"))
    at.run()
    assert not at.exception and "no such file" in at.error[0].value


def _heat_features(at) -> list[int]:
    return [int(x[1:]) for x in figure(at, "ft_heatmap")["data"][0]["x"]]


def test_the_sae_is_one_sidebar_choice_kept_in_the_url(monkeypatch, ckpt_root):
    root, _ = ckpt_root
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    assert at.sidebar.selectbox(key="sae_choice").value == "tiny-sae"  # the first shipped one
    assert "sae" not in at.query_params  # the default is not written
    acts = gptviz.feature_activations(_run(root)[2], gptviz.load_sae(root / NAME / "saes" / "tiny-sae-2"))
    ok(at.sidebar.selectbox(key="sae_choice").set_value("tiny-sae-2").run())
    assert at.query_params["sae"] == "tiny-sae-2"
    assert _heat_features(at) == top_features(acts, 12).tolist()
    # a new session opened on that URL shows the same SAE; the page switch keeps it
    fresh = ok(app_session("views/next_token.py", timeout=180, sae="tiny-sae-2"))
    assert fresh.sidebar.selectbox(key="sae_choice").value == "tiny-sae-2"
    ok(fresh.switch_page("views/features.py").run())
    assert _heat_features(fresh) == top_features(acts, 12).tolist()
    assert fresh.query_params["sae"] == "tiny-sae-2"
    # none, and a path, round-trip too
    none = ok(app_session("views/features.py", timeout=180, sae="none"))
    assert none.sidebar.selectbox(key="sae_choice").value == SAEPick.NONE
    assert "Pick an SAE" in none.info[0].value and not none.get("plotly_chart")
    path = str(root / NAME / "saes" / "tiny-sae-2")
    typed = ok(app_session("views/features.py", timeout=180, sae=path))
    assert typed.sidebar.text_input(key="sae_path").value == path and typed.query_params["sae"] == path
    assert _heat_features(typed) == top_features(acts, 12).tolist()


def _sae_files(folder: Path) -> list:
    return [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(folder.iterdir())]


def test_an_uploaded_sae_is_read_from_memory_and_checked(monkeypatch, ckpt_root):
    root, _ = ckpt_root
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    ok(at.sidebar.selectbox(key="sae_choice").set_value(SAEPick.UPLOAD).run())
    assert at.query_params["sae"] == "upload" and "Pick an SAE" in at.info[0].value
    ok(at.get_by_key("sae_upload").set_value(_sae_files(root / NAME / "saes" / "tiny-sae-2")).run())
    acts = gptviz.feature_activations(_run(root)[2], gptviz.load_sae(root / NAME / "saes" / "tiny-sae-2"))
    assert _heat_features(at) == top_features(acts, 12).tolist()
    captions = "".join(re.sub(r"\\(.)", r"\1", c.value).replace(WORD_JOINER, "") for c in at.caption)
    assert "upload: cfg.json, sae_weights.safetensors" in captions
    assert str(root) not in captions  # named by its files, never a server path
    at.get_by_key("sae_upload").set_value(_sae_files(root / "other-sae")).run()
    assert not at.exception and "trained on another model" in at.error[0].value
    at.get_by_key("sae_upload").set_value([("model.pt", b"x", "application/octet-stream")]).run()
    assert not at.exception and "not an SAE file" in at.sidebar.error[0].value


def test_a_class_server_opens_no_sae_path_and_takes_no_sae_upload(monkeypatch, ckpt_root, tmp_path):
    monkeypatch.setenv(CLASS_ENV, "1")
    root, _ = ckpt_root
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    assert _heat_features(at)  # the shipped SAE is in the class's data roots
    ok(at.sidebar.selectbox(key="sae_choice").set_value(SAEPick.UPLOAD).run())
    assert not at.get("file_uploader") and any("Uploads are off" in i.value for i in at.sidebar.info)
    shown = []
    fits = save_sae(gptviz.load_sae(root / NAME / "saes" / "tiny-sae"), tmp_path / "fits")  # outside the roots
    for path in (fits, "/etc", tmp_path / "nothing"):
        opened = app_session("views/features.py", timeout=180, sae=str(path))
        shown.append(opened.error[0].value)
    assert len(set(shown)) == 1 and "class server" in shown[0]


def test_steering_panel_matches_the_library(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/next_token.py")
    bundle, ids, t = _run(ckpt_root[0])
    with pytest.raises(KeyError):  # off until asked: the page runs nothing more
        at.get_by_key("st_sweep")
    at.toggle(key="st_on").set_value(True)
    ok(at.run())
    at.segmented_control(key="st_source").set_value("a neuron")
    ok(at.run())
    at.number_input(key="st_neuron").set_value(5)
    at.slider(key="st_coeff").set_value(6.0)
    ok(at.run())
    layer = int(at.selectbox(key="st_layer").value)
    v = gptviz.neuron_direction(bundle.model, 0, 5)
    site = f"blocks.{layer}.resid_post"
    steered = gptviz.trace(bundle.model, ids, interventions=[gptviz.steer(site, v, 6.0)])
    probs = np.exp(steered["logits"][-1] - steered["logits"][-1].max())
    probs /= probs.sum()
    bars = figure(at, "st_top_steered")["data"][0]
    np.testing.assert_allclose(
        sorted(array(bars["x"]), reverse=True), np.sort(probs)[::-1][: len(array(bars["x"]))], atol=1e-5
    )
    sweep = figure(at, "st_sweep")["data"]
    assert [s["name"] for s in sweep] == ["blocks.0.resid_post", "blocks.1.resid_post"]
    want = gptviz.steering_sweep(bundle.model, ids, v, "resid_post", [-16, -8, -4, -2, 2, 4, 8, 16])
    np.testing.assert_allclose(array(sweep[0]["y"]), want[want.site == "blocks.0.resid_post"].kl, atol=1e-5)
    at.segmented_control(key="st_source").set_value("prompt pairs")
    ok(at.run())
    at.text_area(key="st_pairs").set_value("no bar here")
    at.run()
    assert not at.exception and "between its positive and negative" in at.error[0].value


def _by_hand(model, ids, sae, features, to: float) -> np.ndarray:
    """The last position's logits with `features` of the topk SAE at blocks.1.resid_post set to `to`,
    computed in a forward hook from the SAE's equations (not gptviz's SAE module or edit_features):
    x + (f' - f) @ W_dec, the reconstruction's error term left as it was."""
    W_enc, b_enc, W_dec, b_dec = (getattr(sae, n).detach().double() for n in ("W_enc", "b_enc", "W_dec", "b_dec"))

    def hook(module, args, out):
        x = out.double()  # [1, T, C]
        pre = (x - b_dec) @ W_enc + b_enc
        top = pre.topk(sae.k, dim=-1)
        f = torch.zeros_like(pre).scatter(-1, top.indices, top.values.clamp_min(0))
        g = f.clone()
        g[..., list(features)] = to
        return (x + (g - f) @ W_dec).to(out.dtype)

    handle = model.transformer.h[1].register_forward_hook(hook)  # a block's output is its resid_post
    try:
        with torch.no_grad():
            return model(torch.tensor([ids]))[0, -1].double().numpy()
    finally:
        handle.remove()


def test_interventions_zero_and_clamp_sae_features_as_a_hook_does(monkeypatch, ckpt_root):
    root, _ = ckpt_root
    at = open_page(monkeypatch, ckpt_root, "views/interventions.py")
    bundle, ids, t = _run(root)
    sae = gptviz.load_sae(root / NAME / "saes" / "tiny-sae")
    acts = gptviz.feature_activations(t, sae)
    firing = top_features(acts[-1:], 2).tolist()  # two features that fire on the last token
    at.sidebar.select_slider(key="position").set_value(len(ids) - 1)
    at.multiselect(key="iv_features").set_value(firing)
    ok(at.run())
    assert any("edit features" in c.value for c in at.caption)
    for how, to in (("zero", 0.0), ("a value", 3.5)):
        ok(at.button_group(key="iv_fhow").set_value(how).run())
        if how != "zero":  # the value box is off while zero is chosen
            ok(at.number_input(key="iv_fvalue").set_value(to).run())
        logits = _by_hand(bundle.model, ids, sae, firing, to)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        change = at.dataframe[0].value
        np.testing.assert_allclose(change["after"], probs[change["id"]], atol=1e-5)
        after = figure(at, "iv_top_after")["data"][0]
        np.testing.assert_allclose(array(after["x"]), np.sort(probs)[::-1][: len(array(after["x"]))], atol=1e-5)
    plain = np.exp(t["logits"][-1] - t["logits"][-1].max())
    assert np.abs(probs - plain / plain.sum()).max() > 1e-3  # the edit moved the prediction


def test_steering_round_trips_through_the_url_and_steers_generate(monkeypatch, ckpt_root):
    root, _ = ckpt_root
    at = open_page(monkeypatch, ckpt_root, "views/next_token.py")
    assert "steer" not in at.query_params
    at.toggle(key="st_on").set_value(True)
    ok(at.run())
    ok(at.segmented_control(key="st_source").set_value("an SAE feature").run())
    at.number_input(key="st_feature").set_value(7)
    at.selectbox(key="st_layer").set_value(0)
    at.slider(key="st_coeff").set_value(-3.5)
    ok(at.run())
    spec = SteeringSpec("feature", 0, -3.5, feature=7)
    assert at.query_params["steer"] == spec.text  # written by the run that chose it
    bars = array(figure(at, "st_top_steered")["data"][0]["x"])
    # a new session on that URL: the panel shows the same steering, and Generate applies it
    fresh = ok(app_session("views/next_token.py", timeout=180, steer=spec.text))
    assert fresh.toggle(key="st_on").value and fresh.number_input(key="st_feature").value == 7
    assert fresh.selectbox(key="st_layer").value == 0 and fresh.slider(key="st_coeff").value == -3.5
    np.testing.assert_array_equal(array(figure(fresh, "st_top_steered")["data"][0]["x"]), bars)
    ok(fresh.switch_page("views/generate.py").run())
    assert fresh.query_params["steer"] == spec.text and fresh.toggle(key="st_on").value
    fresh.slider(key="gen_temperature").set_value(0.0)
    fresh.number_input(key="gen_n").set_value(12)
    ok(fresh.button(key="gen_run").click().run())
    bundle, ids, _ = _run(root)
    sae = gptviz.load_sae(root / NAME / "saes" / "tiny-sae")
    iv = gptviz.steer("blocks.0.resid_post", sae.W_dec[7], -3.5)
    want = gptviz.generate(bundle.model, ids, 12, temperature=0, crop_context=True, interventions=[iv])
    plain = gptviz.generate(bundle.model, ids, 12, temperature=0, crop_context=True)
    assert fresh.session_state["gen"]["ids"] == want.new_ids != plain.new_ids
    # off: the URL drops it, and Generate runs unsteered
    ok(fresh.run())  # Clear was drawn before the tokens came
    ok(fresh.button(key="gen_clear").click().run())
    ok(fresh.toggle(key="st_on").set_value(False).run())
    assert "steer" not in fresh.query_params
    ok(fresh.button(key="gen_run").click().run())
    assert fresh.session_state["gen"]["ids"] == plain.new_ids


def test_a_bad_steering_link_is_one_line_and_steers_nothing(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/next_token.py")
    bad = app_session("views/next_token.py", timeout=180, steer="vector:1,2@0*4")
    assert not bad.exception and not bad.toggle(key="st_on").value
    assert any("steering was not used" in w.value and "comes from" in w.value for w in bad.warning)
    assert "steer" not in bad.query_params
    assert at  # the server the two sessions share


LESSON_HEAD = 'title = "Mine"\n\n[[slides]]\npage = "mask"\ntitle = "first"\n\n[[slides]]\ntitle = "second"\n'


def _open_lesson(monkeypatch, ckpt_root, tmp_path, slide: str):
    monkeypatch.setenv(CLASS_ENV, "0")  # a teacher's own machine: the path box opens files
    f = tmp_path / "mine.toml"
    f.write_text(LESSON_HEAD + slide + "\n")
    return open_lesson_file(open_page(monkeypatch, ckpt_root, "views/lesson.py"), f)


@pytest.mark.parametrize(
    "slide, said, line",  # line: that of the key the message names first (the slide's lines are 9 to 11)
    [
        (f'page = "features"\ncheckpoint = "{NAME}"\nsae = "no-such-sae"', "ships no SAE 'no-such-sae'", 10),
        (f'page = "features"\ncheckpoint = "{NAME}"\nfeature = 96', "feature 96 does not exist", 11),
        (
            f'page = "heads"\ncheckpoint = "{NAME}"\nsteer = {{ feature = 1, layer = 5, coeff = 1 }}',
            "the model has 2",
            11,
        ),
        (
            f'page = "heads"\ncheckpoint = "{NAME}"\nsteer = {{ neuron = [0, 999], layer = 0, coeff = 1 }}',
            "neurons",
            11,
        ),
    ],
)
def test_a_features_or_steered_slide_the_model_cannot_show_refuses_the_file(
    monkeypatch, ckpt_root, tmp_path, slide, said, line
):
    at = _open_lesson(monkeypatch, ckpt_root, tmp_path, slide)
    (msg,) = [e.value for e in at.error]
    assert (
        f"mine: line {line}, slide 2: " in msg.replace("\\", "") and said in msg.replace("\\", "") and "\n" not in msg
    )


def test_a_steered_features_slide_shows_the_librarys_numbers(monkeypatch, ckpt_root, tmp_path):
    root, _ = ckpt_root
    slide = f'page = "features"\ncheckpoint = "{NAME}"\nsae = "tiny-sae-2"\n'
    slide += 'prompt = "To be, or not"\nsteer = { neuron = [1, 3], layer = 0, coeff = 2.5 }'
    at = ok(_open_lesson(monkeypatch, ckpt_root, tmp_path, slide))
    ok(at.button(key="slide_next").click().run())
    bundle = gptviz.load(root / NAME)
    sae = gptviz.load_sae(root / NAME / "saes" / "tiny-sae-2")
    ids = bundle.tokenizer.encode("To be, or not")
    iv = gptviz.steer("blocks.0.resid_post", gptviz.neuron_direction(bundle.model, 1, 3), 2.5)
    want = gptviz.feature_activations(gptviz.trace(bundle.model, ids, interventions=[iv]), sae)
    f = int(np.argmax(want[-1]))  # no feature named: the strongest at the last token
    np.testing.assert_allclose(array(figure(at, "slide_figure")["data"][0]["y"]), want[:, f], atol=1e-5)
    plain = gptviz.feature_activations(gptviz.trace(bundle.model, ids), sae)
    assert np.abs(plain - want).max() > 1e-4  # the slide's run is steered


def test_an_uploaded_gemma_scope_params_npz_reads_the_layer_named_beside_it(monkeypatch, tmp_path):
    # Gemma Scope's layout: W_enc [d_in, d_sae], W_dec, b_enc, b_dec, threshold (jumprelu), and no word of its site
    shipped = Path(__file__).resolve().parents[1] / "checkpoints"
    serve(monkeypatch, shipped, "shakespeare-char")
    g = np.random.default_rng(7)
    d_in, d_sae = 192, 40  # shakespeare-char's n_embd
    params = dict(
        W_enc=g.normal(0, 0.2, (d_in, d_sae)),
        W_dec=g.normal(0, 0.2, (d_sae, d_in)),
        b_enc=g.normal(0, 0.1, d_sae),
        b_dec=g.normal(0, 0.1, d_in),
        threshold=np.abs(g.normal(0, 0.3, d_sae)),
    )
    np.savez(tmp_path / "params.npz", **{k: v.astype(np.float32) for k, v in params.items()})
    at = ok(app_session("views/features.py", timeout=180, checkpoint="shakespeare-char", sae="upload"))
    upload = [("params.npz", (tmp_path / "params.npz").read_bytes(), "application/octet-stream")]
    ok(at.get_by_key("sae_upload").set_value(upload).run())
    assert "Say which layer this Gemma Scope SAE reads (0 … 3)." in [w.value for w in at.sidebar.warning]
    assert at.number_input(key="sae_layer").max == 3 and not at.get("plotly_chart")
    ok(at.number_input(key="sae_layer").set_value(2).run())
    # by hand: JumpReLU of the block-2 residual stream, no b_dec taken from the input (Gemma Scope's encoder)
    bundle = gptviz.load(shipped / "shakespeare-char")
    ids = gptviz.encode_prompt(bundle.tokenizer, at.session_state["prompt"], bundle.model.config.block_size)
    x = gptviz.trace(bundle.model, ids, bundle.tokenizer)["blocks.2.resid_post"].astype(np.float64)
    pre = x @ params["W_enc"] + params["b_enc"]
    acts = np.where(pre > params["threshold"], pre, 0.0)
    assert _heat_features(at) == top_features(acts, 12).tolist() and len(_heat_features(at)) > 3
    # the library's door, given the same site, reads the same file the same way
    sae = gptviz.load_sae(tmp_path / "params.npz", site="blocks.2.resid_post")
    lib = gptviz.feature_activations(gptviz.trace(bundle.model, ids, bundle.tokenizer), sae)
    np.testing.assert_allclose(lib, acts, atol=1e-4)
    # a model with fewer layers: the layer picked is out of range, said in one line
    at.selectbox(key="ckpt_choice").set_value("induction-2l").run()
    assert not at.exception
    assert any("Layer 2 is not a layer of this model (0 … 1)" in e.value for e in at.sidebar.error)


def test_an_uploaded_sae_stays_in_use_across_a_page_switch(monkeypatch, ckpt_root):
    """A click that opens another page (st.switch_page) empties the SAE uploader: its SAE stays in use."""
    root, _ = ckpt_root
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    ok(at.sidebar.selectbox(key="sae_choice").set_value(SAEPick.UPLOAD).run())
    ok(at.get_by_key("sae_upload").set_value(_sae_files(root / NAME / "saes" / "tiny-sae-2")).run())
    ok(at.switch_page("views/heads.py").run())
    at.session_state[keys.HEADS_OPEN_ATTENTION] = True  # the Heads grid's click: st.switch_page to Attention
    ok(at.run())
    captions = [re.sub(r"\\(.)", r"\1", c.value) for c in at.sidebar.caption]
    assert any(c.startswith("In use: cfg.json, sae_weights.safetensors, uploaded on the page before") for c in captions)
    ok(at.switch_page("views/features.py").run())
    acts = gptviz.feature_activations(_run(root)[2], gptviz.load_sae(root / NAME / "saes" / "tiny-sae-2"))
    assert _heat_features(at) == top_features(acts, 12).tolist()
