"""Every page of the dashboard on Hugging Face directories of the new families (AppTest): a GQA
Llama with a SentencePiece-style tokenizer, GPT-Neo (no attention scale, local layers) and Gemma 2
(post-norms, soft-caps, where logit attribution is refused in one sentence)."""

from __future__ import annotations

import pytest
from apptest_helpers import app_session, ok, serve
from hf_helpers import hf_random_decoder
from test_hf_families import _sentencepiece_style

pytest.importorskip("transformers")

PAGES = [
    "views/overview.py",
    "views/attention.py",
    "views/qkv.py",
    "views/shapes.py",
    "views/residual.py",
    "views/next_token.py",
    "views/heads.py",
    "views/logit_lens.py",
    "views/attribution.py",
    "views/health.py",
    "views/interventions.py",
    "views/patching.py",
    "views/generate.py",
    "views/forward_pass.py",
    "views/compare.py",
    "views/timeline.py",
    "views/worked_examples.py",
    "views/mask_leak.py",
    "views/corpus.py",
    "views/lesson.py",
]
MODELS = {"llama-gqa": "llama", "gpt-neo": "gpt_neo", "gemma-2": "gemma2"}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    for name, kind in MODELS.items():
        hf_random_decoder(kind, seed=2, vocab_size=300).save_pretrained(root / name)
        _sentencepiece_style(root / name)
    return root


@pytest.mark.parametrize("name", list(MODELS))
def test_every_page_renders_on_each_family(root, name, monkeypatch):
    serve(monkeypatch, root, name)
    at = ok(app_session())
    at.text_area(key="prompt").input("hello world hello world hello")
    at = ok(at.button(key="run_btn").click().run())
    for page in PAGES:
        at.switch_page(page).run()
        if page.endswith("attribution.py") and name == "gemma-2":
            assert not at.exception
            shown = [e.value for e in (*at.error, *at.warning, *at.info)]
            assert any("logit attribution is undefined for this model" in s for s in shown), shown
            continue
        ok(at)
        assert at.title or at.markdown, page  # the page drew something
