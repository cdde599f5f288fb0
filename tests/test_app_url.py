"""What the URL keeps: a view restored from its query parameters and written back, a multi-line prompt,
keep-last and the upload names across a reload, and bad values ignored or explained, never markup."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

import pytest
from apptest_helpers import (
    MARKUP,
    PROMPT,
    app_session,
    errors,
    figure,
    no_markup,
    ok,
    run_prompt,
    shown,
    upload,
)

from gptviz.bench.checkpoints import NAME
from gptviz.figures.style import WORD_JOINER


def test_query_params_restore_a_view(env):
    at = ok(app_session(checkpoint=NAME, prompt=PROMPT, layer="1", head="3", position="4"))
    assert at.text_area(key="prompt").value == PROMPT
    assert (at.radio(key="layer").value, at.radio(key="head").value, at.select_slider(key="position").value) == (
        1,
        3,
        4,
    )
    ok(at.switch_page("views/attention.py").run())
    assert figure(at, "attn_heatmap")["layout"]["title"]["text"].startswith("Layer 1, head 3")
    assert "query 4 " in figure(at, "attn_lines")["layout"]["title"]["text"]
    assert at.query_params["layer"] == "1" and at.query_params["position"] == "4"


def test_changed_view_is_written_to_the_url(at):
    ok(at.radio(key="head").set_value(2).run())
    assert at.query_params["head"] == "2"


def test_a_multi_line_prompt_from_the_url_is_kept(env):
    prompt = "First Citizen:\nBefore we proceed, hear me.\n\nAll:\nSpeak."
    at = ok(app_session(prompt=prompt))
    assert at.text_area(key="prompt").value == prompt
    ok(at.switch_page("views/shapes.py").run())
    assert any(m.label.startswith("T ") and m.value == str(len(prompt)) for m in at.metric)
    ok(at.radio(key="head").set_value(1).run())
    assert at.query_params["prompt"] == prompt


def test_keep_last_and_the_upload_names_survive_a_reload(at, env):
    long = "All the world's a stage. " * 4
    assert "at most 64" in errors(run_prompt(at, long))
    ok(at.button(key="fix_long_btn").click().run())
    reloaded = ok(app_session(**{k: at.query_params[k] for k in at.query_params}))
    assert "last 64 tokens" in reloaded.info[0].value and reloaded.get("plotly_chart")
    ok(upload(at, env / NAME))
    names = at.query_params["upload"]
    again = app_session(checkpoint="upload", upload=names)
    assert not again.exception and names in shown(again.info[0].value) and "again" in again.info[0].value


@pytest.mark.parametrize("text", MARKUP)
def test_a_checkpoint_path_in_the_url_is_shown_as_text(env, text):
    at = app_session(checkpoint=text)
    msg = errors(at)
    assert str(Path(text)) in msg.replace(WORD_JOINER, ""), msg  # as typed (a path collapses "//")
    for e in [*at.error, *at.info, *at.warning, *at.caption]:
        no_markup(e.value)


@pytest.mark.parametrize(
    "query",
    [
        {"layer": "²"},
        {"head": "٣"},
        {"position": "99999999999999999999999"},
        {"layer": "-1"},
        {"head": "1e3"},
        {"position": " 4"},
        {"layer": "1.5"},
        {"device": "bogus"},
        {"prompt": ""},
        {"prompt": "x" * 5000},
    ],
)
def test_bad_url_values_are_ignored_or_explained(env, query):
    at = app_session(**query)
    assert not at.exception, [e.value for e in at.exception]
    assert "Internal error" not in errors(at)
    if "prompt" not in query:
        assert at.get("plotly_chart") and at.radio(key="layer").value == 0 and at.radio(key="head").value == 0


def test_opening_a_head_from_heads_keeps_the_sessions_dtype_sae_and_steering(env):
    # st.switch_page forgets every widget's value: the dtype and the SAE picked fell back to their defaults
    chosen = dict(dtype="bfloat16", sae="my-saes/l0", steer="neuron:0.1@0*4")
    at = ok(app_session("views/heads.py", checkpoint=NAME, **chosen))
    assert {k: at.query_params[k] for k in chosen} == chosen
    ok(at.button(key="heads_open").click().run())
    assert at.title[0].value == "Attention"
    assert {k: at.query_params.get(k) for k in chosen} == chosen
    assert at.selectbox(key="dtype").value == "bfloat16" and at.text_input(key="sae_path").value == "my-saes/l0"


def test_opening_a_head_from_heads_keeps_a_gemma_scope_saes_layer(env, tmp_path):
    # a params.npz says no layer: the sidebar's box names it, and a page switch must not forget it
    (tmp_path / "params.npz").write_bytes(b"")  # never read here: only its name says what it is
    at = ok(app_session("views/heads.py", checkpoint=NAME, sae=str(tmp_path / "params.npz")))
    ok(at.number_input(key="sae_layer").set_value(1).run())
    ok(at.selectbox(key="sae_site").set_value("mlp.out").run())
    ok(at.button(key="heads_open").click().run())
    assert at.title[0].value == "Attention"
    assert (at.number_input(key="sae_layer").value, at.selectbox(key="sae_site").value) == (1, "mlp.out")
    assert not [w.value for w in at.warning]  # nor Streamlit's word on a widget set twice


def test_a_link_to_the_same_prompt_keeps_its_keep_last(env):
    # Worked examples' "One forward pass" link names the checkpoint and prompt chosen now: the prompt's
    # own choice (keep its last tokens) must come along, or the page opens on "too long" again
    long = "All the world's a stage. " * 4
    at = ok(app_session(checkpoint=NAME, prompt=long, keep_last="1"))
    ok(at.switch_page("views/worked_examples.py").run())
    links = {el.proto.label: parse_qs(el.proto.query_string) for el in at.get("page_link")}
    step = links["One forward pass, step by step"]
    assert step["prompt"] == [long] and step["keep_last"] == ["1"]
    others = [q for label, q in links.items() if "prompt" in q and label != "One forward pass, step by step"]
    assert others and not [q for q in others if "keep_last" in q]  # another prompt: its choice is made on it
