"""What the dashboard computes once: a view widget never reruns the model, sessions share runs, a
checkpoint is loaded again only when its files change, a failed load is remembered, forward passes
run one at a time, and nothing holds a Trace between runs but the caches."""

from __future__ import annotations

import dataclasses
import gc
import io
import os
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import streamlit as st
import torch
from apptest_helpers import (
    PAGES,
    PROMPT,
    RUNS,
    app_session,
    array,
    errors,
    figure,
    ok,
    run_prompt,
)

import gptviz
from gptviz.bench.checkpoints import CHARS, CONFIG, NAME, make_checkpoints
from gptviz.dashboard import caches, state
from gptviz.dashboard.sources import checkpoints


def test_view_widgets_never_rerun_the_model(at):
    ok(run_prompt(at, PROMPT))
    assert len(RUNS) == 2  # the preset prompt, then this one
    ok(at.switch_page("views/attention.py").run())
    ok(at.radio(key="layer").set_value(1).run())
    ok(at.radio(key="head").set_value(3).run())
    ok(at.select_slider(key="position").set_value(5).run())
    ok(at.checkbox(key="attn_skip_first").check().run())
    ok(at.toggle(key="presentation").set_value(True).run())
    for path in PAGES:
        ok(at.switch_page(path).run())
    assert len(RUNS) == 2
    ok(run_prompt(at, PROMPT + " Again."))
    assert len(RUNS) == 3


def test_a_second_session_reuses_the_cached_run(at):
    run_prompt(at, PROMPT)
    ok(app_session(prompt=PROMPT))
    assert len(RUNS) == 2


def test_a_checkpoint_rewritten_in_place_is_loaded_again(tmp_path, monkeypatch, env):
    make_checkpoints(tmp_path)
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(tmp_path))
    at = ok(app_session())
    before = array(figure(at, "overview_topk")["data"][0]["x"])
    torch.manual_seed(99)  # the same shape, new weights: as a training run saving as it goes
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / NAME, gptviz.CharTokenizer(CHARS))
    ok(at.run())
    assert len(RUNS) == 2
    assert not np.array_equal(array(figure(at, "overview_topk")["data"][0]["x"]), before)


def test_a_failed_load_is_remembered_for_that_version(at, env, monkeypatch, tmp_path):
    loads = []
    real = caches.load
    monkeypatch.setattr(caches, "load", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"gptviz_format": 1, "config": {"n_layer": "two"}}')
    at.selectbox(key="ckpt_choice").set_value(state.Pick.PATH).run()
    at.text_input(key="ckpt_path").input(str(broken)).run()
    for _ in range(3):
        assert "Checkpoint not loaded" in errors(at.run())
    assert len(loads) == 1
    assert "Checkpoint not loaded" in errors(app_session(checkpoint=str(broken)))  # another session: still once
    assert len(loads) == 1
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), broken, gptviz.CharTokenizer(CHARS))  # a new version
    ok(at.run())
    assert len(loads) == 2


def test_the_version_stamp_reads_only_what_a_loader_reads(tmp_path, monkeypatch):
    folder = tmp_path / "big"
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), folder, gptviz.CharTokenizer(CHARS))
    for i in range(20_000):  # training logs, samples, old checkpoints: none of them is loaded
        (folder / f"sample_{i}.txt").touch()
    calls = []
    real = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **k: calls.append(self) or real(self, **k))
    stamp = checkpoints.version(str(folder))
    assert len([p for p in calls if folder in (p, p.parent)]) <= len(checkpoints.LOADER_FILES) + 4  # not 20,000
    assert "model.safetensors" in stamp and "sample_" not in stamp
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())  # rewritten in place
    os.utime(folder / "model.safetensors", ns=(1, 1))
    assert checkpoints.version(str(folder)) != stamp


def test_a_download_button_holds_a_copy_not_the_page(monkeypatch):
    """Streamlit keeps a download button's callable for the session's life: it must not keep what
    the page's lambda closes over (in a page, its globals: the Trace)."""
    from gptviz.dashboard import widgets

    kept = []
    monkeypatch.setattr(st, "download_button", lambda label, data, **kwargs: kept.append(data))

    class Big:  # stands in for a Trace: a weakref tells when nothing holds it any more
        def __init__(self):
            self.weights = np.arange(12.0).reshape(3, 4)

    def page() -> weakref.ref:  # as a page script does: lambdas over what the page holds
        big = Big()
        widgets.download("w", lambda: {"weights": big.weights[1]}, "w.npz", key="w")
        widgets.download("t", lambda: pd.DataFrame({"x": big.weights[0]}), "t.csv", key="t")
        return weakref.ref(big)

    alive = page()
    gc.collect()
    assert alive() is None  # the buttons' callables hold copies only
    with np.load(io.BytesIO(kept[0]())) as npz:
        np.testing.assert_array_equal(npz["weights"], [4.0, 5.0, 6.0, 7.0])
    assert kept[1]().decode().split() == ["x", "0.0", "1.0", "2.0", "3.0"]


def test_a_later_download_is_made_only_when_pressed_from_the_cached_run(env, monkeypatch):
    """download_later offers what a partial over the run's key makes, made when the button is pressed (not
    on the page's run: a long prompt's [T, T] map), from the run the caches hold; a page's lambda, which
    would keep the page's Trace for the session's life, is refused."""
    import functools

    from gptviz.dashboard import widgets

    kept, made = [], []
    monkeypatch.setattr(st, "download_button", lambda label, data, **kwargs: kept.append(data))
    real = gptviz.analysis.attention_matrix
    monkeypatch.setattr(gptviz.analysis, "attention_matrix", lambda *a: made.append(a) or real(*a))
    tokenizer = gptviz.load(env / NAME).tokenizer
    ids = tuple(int(i) for i in tokenizer.encode(PROMPT))
    key = caches.RunKey(caches.ModelKey(NAME, "cpu", checkpoints.version(NAME)), ids)
    texts = tuple(tokenizer.decode([i]) for i in ids)
    widgets.download_later("w", functools.partial(caches.attention_arrays, key, 1, 0, "weights", texts), "w.npz", "w")
    assert len(kept) == 1 and not made  # nothing made yet
    with np.load(io.BytesIO(kept[0]())) as npz:
        np.testing.assert_array_equal(npz["weights"], real(caches.run_trace(key), 1, 0))
        assert list(npz["tokens"]) == list(texts)
    assert len(made) == 1
    with pytest.raises(TypeError, match="partial of a gptviz function"):
        widgets.download_later("w", lambda: {"w": np.zeros(2)}, "w.npz", "w2")


def test_the_dashboard_fixes_the_mmap_threshold_so_evicted_traces_leave_the_process():
    import platform

    from gptviz.dashboard import memory

    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert memory.fix_mmap_threshold() is True
    else:  # elsewhere there is no glibc threshold to fix, and the call must say so, not fail
        assert memory.fix_mmap_threshold() is False


def test_forward_passes_of_different_sessions_run_one_at_a_time(env, monkeypatch):
    """caches.FORWARD: sessions' threads running passes side by side handed the GIL back and forth at
    every torch operation (30 prompts at once cost 2.5 times the CPU of the same runs in turn)."""
    import threading
    import time

    inside, most, lock = [0], [0], threading.Lock()
    real = caches.trace

    def slow_trace(*a, **k):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # long enough for the other threads to arrive while this pass runs
        try:
            return real(*a, **k)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(caches, "trace", slow_trace)
    model = caches.ModelKey(NAME, "cpu", checkpoints.version(NAME))
    keys = [caches.RunKey(model, (1, 2, i)) for i in range(3, 7)]  # four runs, four cache entries
    threads = [threading.Thread(target=caches.run_trace, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(not t.is_alive() for t in threads)
    assert most[0] == 1


def test_the_mask_leak_runs_wait_for_the_forward_lock(env):
    """The Mask leak page's two passes, and a mask-leak slide's, take caches.FORWARD too: while
    another session's pass holds it they wait, and then finish."""
    import threading

    from gptviz.dashboard.classroom import slide_view
    from gptviz.dashboard.panels import edited_runs
    from gptviz.lessons import Slide

    model = caches.ModelKey(NAME, "cpu", checkpoints.version(NAME))
    slide = Slide(page="mask-leak", title="t", checkpoint=NAME, prompt="abc")
    slide_view.slide_content(dataclasses.replace(slide, title="first"), model)  # the prompt's run cached, not waited on
    runs = {
        "leak_run": lambda: edited_runs.leak_run(caches.RunKey(model, (1, 2, 3, 4))),
        "slide": lambda: slide_view.slide_content(slide, model),
    }
    for name, run in runs.items():
        done = threading.Event()
        with caches.FORWARD:
            t = threading.Thread(target=lambda r=run: (r(), done.set()))
            t.start()
            assert not done.wait(0.5), f"{name} ran while another pass held the lock"
        t.join(60)
        assert done.is_set(), f"{name} did not finish once the lock was free"


def test_nothing_cached_is_called_holding_the_forward_lock(env):
    """A cached value is computed under Streamlit's lock for its key, taken before caches.FORWARD on
    every path: called the other way round (FORWARD, then a cached function) two sessions computing
    the same run could wait on each other for good, so that call raises."""
    import threading

    model = caches.ModelKey(NAME, "cpu", checkpoints.version(NAME))
    key = caches.RunKey(model, (1, 2, 3))
    caches.run_trace(key)  # the usual order: cached function, then FORWARD inside it
    with caches.FORWARD, pytest.raises(RuntimeError, match="holding caches.FORWARD"):
        caches.run_trace(key)
    # what the guard stops: one thread holds the key's compute lock and waits for FORWARD, the other
    # holds FORWARD and asks for the same key (run in threads: without the guard they hang, not the test)
    other, done, raised = caches.RunKey(model, (3, 2, 1)), threading.Event(), []

    def holder() -> None:
        with caches.FORWARD:
            t = threading.Thread(target=lambda: (caches.run_trace(other), done.set()), daemon=True)
            t.start()
            assert not done.wait(0.3)  # it holds the key's compute lock now and waits for FORWARD
            try:
                caches.run_trace(other)
            except RuntimeError as e:
                raised.append(e)

    h = threading.Thread(target=holder, daemon=True)
    h.start()
    h.join(30)
    assert not h.is_alive() and raised, "FORWARD, then a cached function: the two threads wait on each other"
    assert done.wait(30)  # the other thread's run goes on once FORWARD is free
