"""A scan folder is held to the contract when it is read: each crafted folder below (a real scan of a
real checkpoint, one thing edited) is one line from gptviz.load_scan and one error on the Corpus page,
never a traceback, "Internal error" or a wrong token drawn."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import test_app_corpus
from apptest_helpers import app_session, ok, serve

import gptviz
from gptviz.bench.checkpoints import CONFIG, NAME
from gptviz.scanning import ScanFolderError, queries
from gptviz.scanning import jobs as scan_jobs

roots = test_app_corpus.roots  # the Corpus page tests' checkpoints and their real scan (module-scoped)


def table(name: str, edit):
    def apply(folder: Path) -> None:
        df = pd.read_parquet(folder / f"{name}.parquet")
        df = edit(df)
        df.to_parquet(folder / f"{name}.parquet", index=False)

    return apply


def summary(**fields):
    def apply(folder: Path) -> None:
        s = json.loads((folder / "summary.json").read_text())
        (folder / "summary.json").write_text(json.dumps({**s, **fields}))

    return apply


def at_row(column: str, value, row: int = 1):
    def edit(df):
        df = df.copy()
        values = list(df[column])
        values[row] = value
        df[column] = pd.Series(values, dtype=object) if not np.isscalar(value) else values
        return df

    return edit


def each_ids(fn):
    return lambda df: df.assign(token_ids=[fn(list(ids)) for ids in df["token_ids"]])


def shift_windows(by: int):
    """Every table's window ids moved up by `by`, consistently: only their size is wrong."""

    def apply(folder: Path) -> None:
        for f in folder.glob("*.parquet"):
            df = pd.read_parquet(f)
            if "window" in df:
                df.assign(window=df["window"].astype("int64") + by).to_parquet(f, index=False)

    return apply


def both(*edits):
    return lambda folder: [edit(folder) for edit in edits]


def remove(name: str):
    return lambda folder: (folder / f"{name}.parquet").unlink()


CASES = {
    # the eight "Internal error" folders
    "window-duplicate": (table("windows", at_row("window", 0)), "window 0 appears twice"),
    "window-negative": (table("windows", at_row("window", -1, 0)), "column window holds -1"),
    "windows-empty": (table("windows", lambda df: df.iloc[:0]), "windows.parquet: has no rows"),
    "neurons-empty": (table("neurons", lambda df: df.iloc[:0]), "neurons.parquet: has no rows"),
    "heads-empty": (table("heads", lambda df: df.iloc[:0]), "heads.parquet: has no rows"),
    "tokens-empty": (table("tokens", lambda df: df.iloc[:0]), "tokens.parquet: has no rows"),
    "ids-float": (table("windows", each_ids(lambda ids: [float(i) for i in ids])), "one holds floats"),
    "ids-nan": (table("windows", each_ids(lambda ids: [float("nan")] + [float(i) for i in ids[1:]])), "floats"),
    "ids-nested": (table("windows", each_ids(lambda ids: [[i] for i in ids])), "nested lists"),
    "ids-text": (table("windows", lambda df: df.assign(token_ids=[str(list(i)) for i in df["token_ids"]])), "str"),
    "layer-negative": (table("neurons", at_row("layer", -1)), "column layer holds -1"),
    "ids-2-62": (table("windows", each_ids(lambda ids: [2**62] + ids[1:])), "outside any vocabulary"),
    "seconds-1e308": (summary(seconds=1e308), "seconds is 1e+308"),
    # negative ids passed the `max_id >= vocab` check and were drawn as the wrong characters
    "ids-negative": (table("windows", each_ids(lambda ids: [-1] + ids[1:])), "token_ids holds -1"),
    "loss-nan": (summary(loss=float("nan")), "loss is nan"),
    "windows-miscounted": (summary(windows=10**6), "says 1,000,000 windows but windows.parquet holds"),
    "docs-fraction": (summary(docs=1.5), "docs must be a whole number"),
    "tokens-unknown-window": (table("tokens", at_row("window", 999)), "names window 999"),
    "neuron-position-outside": (table("neurons", at_row("position", 5000)), "outside its window's tokens"),
    "window-float": (table("windows", lambda df: df.assign(window=df["window"].astype(float))), "not integers"),
    "n-tokens-wrong": (table("windows", at_row("n_tokens", 1, 0)), "n_tokens differs"),
    "heads-twice": (table("heads", lambda df: pd.concat([df, df.iloc[:1]])), "a (layer, head) appears twice"),
    "token-loss-negative": (table("tokens", at_row("loss", -3.0)), "a loss is never negative"),
    "engine-long": (summary(engine="x" * 100), "engine is 100 characters"),
    # the fifth round's five "Internal error" folders
    "window-2-53": (shift_windows(2**53), "more than an id a page shows exactly (2**53 - 1)"),
    "rank-2-62": (table("neurons", at_row("rank", 2**62)), "column rank holds 4,611,686,018,427,387,904"),
    "rank-k": (table("neurons", at_row("rank", 5)), "a rank is below 5 (k, and the windows)"),
    "head-windows-missing": (remove("head_windows"), "head_windows.parquet: missing, but summary.json says"),
    # a scan from before summary.json listed its tables: the ones written together still are
    "head-windows-missing-older": (
        both(remove("head_windows"), summary(tables=None)),
        "head_windows.parquet: missing, but head_attention.parquet is there",
    ),
    "named-table-missing": (
        summary(tables=["heads", "neurons", "tokens", "windows", "feature_density"]),
        "feature_density.parquet: missing, but summary.json says",
    ),
    "doc-names-dict": (summary(doc_names={"a": 1}), "doc_names must be a list"),
    "doc-names-numbers": (summary(doc_names=[1, 2]), "doc_names must be a list"),
    "window-size-dict": (summary(window={"a": 1}), "window must be a whole number"),
    "k-zero": (summary(k=0), "k must be a whole number"),
}
# within every bound of the contract, but not this model's: refused by the page, which knows the model
MODEL_CASES = {
    "neuron-beyond-mlp": (table("neurons", at_row("neuron", 4 * CONFIG["n_embd"])), "This scan holds neuron 128"),
    "ids-beyond-vocab": (table("windows", each_ids(lambda ids: [CONFIG["vocab_size"]] + ids[1:])), "outside this"),
    "layers-beyond-model": (table("neurons", at_row("layer", 7)), "This scan has 8 layers and 4 heads"),
}


def crafted(roots, tmp_path, edit) -> Path:
    folder = tmp_path / "scan"
    shutil.copytree(roots[1] / "scans" / NAME, folder)
    edit(folder)
    return folder


@pytest.mark.parametrize("name", list(CASES))
def test_a_crafted_scan_folder_is_one_line_from_load_scan(roots, tmp_path, name):
    edit, words = CASES[name]
    with pytest.raises(ScanFolderError) as e:
        gptviz.load_scan(crafted(roots, tmp_path, edit))
    message = str(e.value)
    assert words in message and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_a_scan_of_another_model_loads_but_is_not_drawn(roots, tmp_path, name):
    assert gptviz.load_scan(crafted(roots, tmp_path, MODEL_CASES[name][0])) is not None


@pytest.fixture
def page(roots, monkeypatch, tmp_path):
    ckpts, samples = roots
    serve(monkeypatch, ckpts, NAME)
    monkeypatch.setenv(queries.SAMPLES_ENV, str(samples))
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    return ok(ok(app_session()).switch_page("views/corpus.py").run())


@pytest.mark.parametrize("name", list(CASES) + list(MODEL_CASES))
def test_the_corpus_page_says_what_is_wrong_with_a_crafted_folder(roots, page, tmp_path, name):
    edit, words = {**CASES, **MODEL_CASES}[name]
    folder = crafted(roots, tmp_path, edit)
    ok(page.radio(key="corpus_mode").set_value("open a scan folder").run())
    page.text_input(key="corpus_folder").input(str(folder))
    page.button(key="corpus_open_folder").click().run()
    assert not page.exception, page.exception
    errors = [e.value.replace("\\", "") for e in page.error]  # the page escapes Markdown
    assert len(errors) == 1 and words in errors[0], errors
    assert not page.get("html") and not page.metric  # nothing of the scan is drawn


def test_an_older_scan_without_per_window_heads_opens_with_a_note(roots, page, tmp_path):
    """The legitimate neighbour of a missing head_windows.parquet: a scan from before either per-window
    table was kept (and before summary.json listed its tables) opens; the head tab says what it lacks."""
    edit = both(remove("head_windows"), remove("head_attention"), summary(tables=None))
    folder = crafted(roots, tmp_path, edit)
    ok(page.radio(key="corpus_mode").set_value("open a scan folder").run())
    page.text_input(key="corpus_folder").input(str(folder))
    page.button(key="corpus_open_folder").click().run()
    assert not page.exception and not page.error, (page.exception, [e.value for e in page.error])
    notes = " ".join(i.value for i in page.info)
    assert "no windows to show per head" in notes, notes
