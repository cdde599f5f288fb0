"""A link's numbers that the page cannot take as they are (a layer the model lacks, a coefficient past the
slider) are fitted to the model, and the page names each one it fitted; a link that fits gets no note."""

from __future__ import annotations

from apptest_helpers import PROMPT, app_session, ok

from gptviz.bench.checkpoints import CONFIG, NAME

L, H, MLP = CONFIG["n_layer"], CONFIG["n_head"], 4 * CONFIG["n_embd"]


def warnings(at) -> str:
    return " ".join(w.value for w in at.warning)


def test_a_links_view_beyond_the_model_is_named(env):
    at = ok(app_session(checkpoint=NAME, prompt=PROMPT, layer="99", head="40", position="5000"))
    said = warnings(at)
    assert f"layer 99 as 0 (the model has {L})" in said and f"head 40 as 0 (the model has {H})" in said, said
    assert "position 5,000 as" in said, said
    assert (at.radio(key="layer").value, at.radio(key="head").value) == (0, 0)
    assert "did not fit" not in warnings(ok(at.run()))  # said once, for the link


def test_a_links_view_that_fits_gets_no_note(env):
    at = ok(app_session(checkpoint=NAME, prompt=PROMPT, layer="1", head="3", position="4"))
    assert "did not fit" not in warnings(at)


def test_a_steering_link_beyond_the_model_and_the_slider_is_named(env):
    """The issue's ?steer=neuron:0.1@9999*-1000 ran after the last block with coefficient -20, unsaid."""
    at = ok(app_session("views/next_token.py", timeout=180, checkpoint=NAME, steer="neuron:0.1@9999*-1000"))
    said = warnings(at)
    assert f"block 9999 as {L - 1} (the model has {L})" in said, said
    assert "coefficient -1000 as -20 (the slider's reach)" in said, said
    assert at.selectbox(key="st_layer").value == L - 1 and at.slider(key="st_coeff").value == -20
    at = ok(app_session("views/next_token.py", timeout=180, checkpoint=NAME, steer=f"neuron:{L + 5}.{MLP}@0*4"))
    said = warnings(at)
    assert f"the neuron's block {L + 5} as {L - 1}" in said and f"neuron {MLP} as {MLP - 1} (the MLP has {MLP})" in said
    fits = ok(app_session("views/next_token.py", timeout=180, checkpoint=NAME, steer="neuron:0.1@0*4"))
    assert "did not fit" not in warnings(fits) and fits.slider(key="st_coeff").value == 4
