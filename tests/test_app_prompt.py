"""The prompt box: empty, too long, unknown characters, markup and bad token ids are each a message
with a way on, never a traceback."""

from __future__ import annotations

import pytest
from apptest_helpers import (
    MARKUP,
    PROMPT,
    app_session,
    errors,
    no_markup,
    ok,
    rendered,
    run_prompt,
    shown,
)

from gptviz.figures.style import WORD_JOINER


def test_empty_prompt(at):
    assert "the prompt is empty" in errors(run_prompt(at, ""))
    assert "Nothing to show" in at.info[0].value
    ok(run_prompt(at, PROMPT))


def test_too_long_prompt_offers_to_keep_the_last_block(at):
    long = "All the world's a stage. " * 4  # 100 characters, block_size is 64
    assert "at most 64" in errors(run_prompt(at, long))
    ok(at.button(key="fix_long_btn").click().run())
    assert "last 64 tokens" in at.info[0].value
    ok(at.switch_page("views/shapes.py").run())
    assert any(m.label.startswith("T ") and m.value == "64" for m in at.metric)


def test_unknown_characters_offer_to_drop_them(at):
    assert "does not know 2 character(s)" in errors(run_prompt(at, "Café | bar"))
    ok(at.button(key="fix_unknown_btn").click().run())
    assert "Dropped 2 unknown" in at.info[0].value
    assert at.query_params["prompt"] == "Café | bar"


@pytest.mark.parametrize("text", MARKUP)
def test_a_prompt_with_markup_is_shown_as_text(env, text):
    at = app_session(prompt=text + " | ~")  # unknown characters: the message quotes the prompt's characters
    assert "does not know" in errors(at)
    at = ok(app_session(prompt=text.replace("`", "'")[:60]))  # runs: the chips and captions quote the tokens
    for kind in ("error", "info", "warning", "caption", "subheader"):
        for e in at.get(kind):
            no_markup(e.value)
    ok(at.switch_page("views/qkv.py").run())
    for e in [*at.caption, *at.subheader]:
        no_markup(e.value)


def test_plain_escapes_every_markdown_character():
    from gptviz.dashboard.widgets import plain

    for text in [*MARKUP, "a\\b", "*_~`|<>&#!", "1. item", "- item", "> quote"]:
        # as typed, but for the invisible word joiners that keep addresses from becoming links
        assert shown(plain(text)).replace(WORD_JOINER, "") == text.strip(), (text, rendered(plain(text)))
        no_markup(plain(text))


@pytest.mark.parametrize("typed", ["99999999999999999999999", "1, 95", "-1", "1 2 x", "1,,2.0", "0x10"])
def test_bad_ids_in_the_prompt_box_are_a_message(ids_only, typed):
    at = run_prompt(ids_only, typed)
    assert "no tokenizer" in errors(at) and not at.get("plotly_chart")
    ok(run_prompt(at, "4, 5, 6"))


def test_too_many_ids_offer_to_keep_the_last_block(ids_only):
    at = run_prompt(ids_only, " ".join(["7"] * 70))
    assert "at most 64" in errors(at)
    ok(at.button(key="fix_long_btn").click().run())
    assert at.query_params["keep_last"] == "1"
