"""The Corpus page through AppTest: a shipped scan opens at once and shows the library's numbers;
a context opens as the prompt on Next token; a scan run from the page (its own process) ends in the
page, and a bad corpus ends in one line."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.analysis.heads import SCORES
from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard import keys
from gptviz.dashboard.sources import classmode
from gptviz.scanning import jobs as scan_jobs
from gptviz.scanning import queries

TEXT = "To be, or not to be: that is the question.\nWhether 'tis nobler in the mind to suffer\n" * 6


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> tuple[Path, Path]:
    ckpts = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    samples = tmp_path_factory.mktemp("samples")
    (samples / "hamlet").mkdir()
    (samples / "hamlet" / "a.txt").write_text(TEXT)
    (samples / "hamlet" / "b.txt").write_text("To be.")  # one short window: a document's tail
    gptviz.scan(str(ckpts / NAME), samples / "hamlet", window=32, k=5, out=samples / "scans" / NAME)
    return ckpts, samples


@pytest.fixture
def at(roots, monkeypatch, tmp_path) -> AppTest:
    ckpts, samples = roots
    serve(monkeypatch, ckpts, NAME)
    monkeypatch.setenv(queries.SAMPLES_ENV, str(samples))
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    return ok(ok(app_session()).switch_page("views/corpus.py").run())


def test_the_shipped_scan_opens_at_once_with_the_librarys_numbers(at, roots):
    _, samples = roots
    scan = gptviz.load_scan(samples / "scans" / NAME)
    assert at.title[0].value == "Corpus"
    assert at.radio(key="corpus_mode").value == "the shipped scan"
    assert "Transcoder features" not in [t.label for t in at.tabs]  # scanned without transcoders
    metrics = {m.label: m.value for m in at.metric}
    assert (
        metrics["Windows"] == f"{len(scan.windows):,}" and metrics["Mean loss (nats)"] == f"{scan.summary['loss']:.3f}"
    )
    full = scan.windows[scan.windows.n_tokens >= queries.short_length(scan)]  # short windows hidden by default
    worst = int(full.sort_values("loss", ascending=False)["window"].iloc[0])
    assert at.number_input(key="corpus_window").value == worst  # the worst full window first
    assert (scan.windows.n_tokens < queries.short_length(scan)).any()  # there was a short one to hide
    check_heads_figure(at, scan, SCORES[0])
    # the neuron browser: layer 0, neuron 0's contexts, rank 0 first, with its value
    top = scan.neurons[(scan.neurons.layer == 0) & (scan.neurons.neuron == 0)].sort_values("rank")
    shown = [h.proto.body for h in at.get("html") if "window " in h.proto.body and "activation" in h.proto.body]
    assert len(shown) == len(top)
    assert f"{top['value'].iloc[0]:.3f}" in shown[0] and f"window {top['window'].iloc[0]}" in shown[0]
    # every table downloads as CSV
    for key in ("corpus_dl_windows", "corpus_dl_tokens", "corpus_dl_heads", "corpus_dl_neurons"):
        assert at.get_by_key(key) is not None
    ok(at.selectbox(key="corpus_score").set_value("induction").run())
    check_heads_figure(at, scan, "induction")
    table = [d.value for d in at.dataframe if "name" in d.value.columns and "induction" in d.value.columns][0]
    assert table["induction"].tolist() == sorted(table["induction"], reverse=True)  # sorted by the chosen score


def check_heads_figure(at, scan, score: str) -> None:
    """One box per head, labelled, highest mean first; the box spans the quartiles, no whiskers."""
    box = figure(at, "corpus_heads_fig")["data"][0]
    means = scan.heads.sort_values(score, ascending=False, kind="stable")
    assert list(box["x"]) == [f"L{l} H{h}" for l, h in zip(means["layer"], means["head"])]
    np.testing.assert_allclose(array(box["mean"]), means[score], rtol=1e-6)
    q = scan.head_windows.groupby(["layer", "head"])[score].quantile(0.75).loc[list(zip(means.layer, means["head"]))]
    np.testing.assert_allclose(array(box["q3"]), q.to_numpy(), rtol=1e-6)
    np.testing.assert_array_equal(array(box["upperfence"]), array(box["q3"]))


def test_the_neurons_that_fire_on_a_token(at, roots):
    _, samples = roots
    scan = gptviz.load_scan(samples / "scans" / NAME)
    tok = gptviz.load(roots[0] / NAME).tokenizer
    ok(at.text_input(key="corpus_token").input("e").run())
    found = [d.value for d in at.dataframe if "contexts_on_token" in d.value.columns]
    assert len(found) == 1 and len(found[0]) > 0
    expected = queries.neurons_for_token(scan, tok.encode("e")[0])
    assert found[0][["layer", "neuron"]].values.tolist() == expected[["layer", "neuron"]].values.tolist()
    for row in found[0].head(5).itertuples():  # each such neuron really peaks on "e" that many times
        top = scan.neurons[(scan.neurons.layer == row.layer) & (scan.neurons.neuron == row.neuron)]
        ids = scan.windows.set_index("window")["token_ids"]
        on = sum(ids[w][p] == tok.encode("e")[0] for w, p in zip(top["window"], top["position"]))
        assert on == row.contexts_on_token
    ok(at.text_input(key="corpus_token").input("ee").run())
    assert "exactly one token" in at.warning[0].value


def test_a_context_opens_as_the_prompt_on_next_token(at, roots):
    _, samples = roots
    scan = gptviz.load_scan(samples / "scans" / NAME)
    r = scan.neurons[(scan.neurons.layer == 0) & (scan.neurons.neuron == 0) & (scan.neurons["rank"] == 0)].iloc[0]
    ids = scan.windows.set_index("window")["token_ids"][int(r.window)][: int(r.position) + 1]
    tok = gptviz.load(roots[0] / NAME).tokenizer
    ok(at.button(key="corpus_next_0").click().run())
    assert at.title[0].value == "Next token"
    assert at.text_area(key="prompt").value == tok.decode(list(ids))


def test_a_bad_scan_folder_is_one_line(at, tmp_path):
    ok(at.radio(key="corpus_mode").set_value("open a scan folder").run())
    at.text_input(key="corpus_folder").input(str(tmp_path / "nothing"))
    at.button(key="corpus_open_folder").click().run()
    assert not at.exception
    assert "Scan not opened" in at.error[0].value and "no such folder" in at.error[0].value


def wait_for_scan(at: AppTest, timeout: float = 120) -> AppTest:
    deadline = time.monotonic() + timeout
    while "corpus_job" in at.session_state and at.session_state["corpus_job"]:
        assert time.monotonic() < deadline, "the scan did not end"
        time.sleep(0.5)
        at.run()
    return at


@pytest.mark.slow  # starts the scan as its own process, as the page does
def test_a_scan_run_from_the_page_opens_and_a_bad_corpus_is_one_line(at, tmp_path):
    ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
    assert at.selectbox(key="corpus_source").value == "shipped sample: hamlet"
    at.number_input(key="corpus_window_size").set_value(16)
    ok(at.button(key="corpus_run").click().run())
    ok(wait_for_scan(at))
    assert at.session_state["corpus_scan"].startswith(str(tmp_path / "scans"))
    metrics = {m.label: m.value for m in at.metric}
    again = gptviz.load_scan(at.session_state["corpus_scan"])
    assert metrics["Windows"] == f"{len(again.windows):,}" and again.summary["window"] == 16
    # a binary file as the corpus: the scan process fails with one line, shown on the page
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"abc\x00\x01")
    ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
    ok(at.selectbox(key="corpus_source").set_value("a path on this server").run())
    ok(at.text_input(key="corpus_path").input(str(bad)).run())  # the button waits for a path
    at.button(key="corpus_run").click().run()
    wait_for_scan(at)
    assert not at.exception
    assert "Scan failed" in at.error[0].value and "looks binary" in at.error[0].value
    assert not any(scan_jobs.running(j) for j in list(scan_jobs._JOBS))  # "failed" is shown once its process is gone


def test_a_scan_folders_summary_is_shown_as_text(at, roots, tmp_path):
    """summary.json is a file anyone may have left on the server: its engine reaches st.metric, which
    renders Markdown, only escaped."""
    import json
    import shutil

    _, samples = roots
    folder = tmp_path / "planted"
    shutil.copytree(samples / "scans" / NAME, folder)
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "engine": "[Log in](https://evil.example/x)"}))
    ok(at.radio(key="corpus_mode").set_value("open a scan folder").run())
    at.text_input(key="corpus_folder").input(str(folder))
    ok(at.button(key="corpus_open_folder").click().run())
    engine = next(m for m in at.metric if m.label == "Engine").value
    assert "evil" in engine and "](" not in engine


def test_the_server_runs_at_most_a_few_scans_at_once(monkeypatch, tmp_path):
    """Each scan loads its model and takes a core: a third start while two run is one line, and a
    scan that ended no longer counts. (The processes are real, but sleep instead of scanning; the
    command each would have run is kept, its paths as --flag=value so a name starting with - stays a value.)"""
    import subprocess
    import sys

    from gptviz.errors import GptvizError

    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    monkeypatch.setattr(scan_jobs, "_JOBS", {})  # this server's scans only: none left by another test counts here
    real, commands = subprocess.Popen, []

    def sleeper(cmd, **kw):
        commands.append(cmd)
        return real([sys.executable, "-c", "import time; time.sleep(60)"], **kw)

    monkeypatch.setattr(scan_jobs.subprocess, "Popen", sleeper)
    corpus = tmp_path / "-corpus.txt"
    jobs = [scan_jobs.start_scan(tmp_path / "ck", corpus, 8, 2) for _ in range(scan_jobs.MAX_RUNNING_SCANS)]
    try:
        assert all(scan_jobs.running(j.id) for j in jobs)
        with pytest.raises(GptvizError, match="scans are running on this server already"):
            scan_jobs.start_scan(tmp_path / "ck", corpus, 8, 2)
        scan_jobs.stop_scan(jobs[0])
        jobs.append(scan_jobs.start_scan(tmp_path / "ck", corpus, 8, 2))
        assert f"--data={corpus}" in commands[0]
    finally:
        for job in jobs:
            scan_jobs.stop_scan(job)
    assert not any(scan_jobs.running(j.id) for j in jobs)


def test_the_page_keeps_only_its_newest_folders_and_never_a_running_scans(monkeypatch, tmp_path):
    """A neighbour uploading corpora again and again cannot fill the disk: each new upload or scan
    removes the oldest of the page's folders beyond MAX_KEPT, but never the corpus or the output of
    a scan still running, nor a file the page did not make."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    monkeypatch.setattr(scan_jobs, "_JOBS", {})
    monkeypatch.setattr(scan_jobs, "MAX_KEPT", 3)
    real = subprocess.Popen

    def sleeper(cmd, **kw):  # a real process that holds its arguments, as a scan's would, but sleeps
        return real([sys.executable, "-c", "import time; time.sleep(60)", *cmd[3:]], **kw)

    monkeypatch.setattr(scan_jobs.subprocess, "Popen", sleeper)

    def aged(path, t):  # folders made in one test share a second: give each its own age
        os.utime(path.parent, (t, t))
        return path

    first = aged(scan_jobs.save_upload("a.txt", b"first corpus"), 1_000)
    job = scan_jobs.start_scan(tmp_path / "ck", first, 8, 2)  # runs (sleeps) on the oldest upload
    os.utime(Path(job.out).parent, (1_001, 1_001))
    theirs = tmp_path / "scans" / "notes-of-mine"
    theirs.mkdir()
    try:
        made = [aged(scan_jobs.save_upload(f"{i}.txt", b"more"), 2_000 + i) for i in range(4)]
        left = {p.name for p in (tmp_path / "scans").iterdir()}
        # the running scan's corpus and folder stay although they are the oldest; of the rest, the newest
        assert first.parent.name in left and Path(job.out).parent.name in left
        assert made[-1].parent.name in left and made[0].parent.name not in left
        assert "notes-of-mine" in left  # not a name the page gives: never touched
        scan_jobs.stop_scan(job)
        scan_jobs.save_upload("last.txt", b"last")
        left = {p.name for p in (tmp_path / "scans").iterdir()}
        assert first.parent.name not in left and Path(job.out).parent.name not in left  # no longer in use
        assert len([n for n in left if scan_jobs.OWN_FOLDER.fullmatch(n)]) == 3
    finally:
        scan_jobs.stop_scan(job)


def test_pruning_from_many_sessions_at_once(monkeypatch, tmp_path):
    """Sessions saving uploads side by side prune the same folder: none fails on a folder another
    just removed (four threads: 193 failures in 200 trials before the lock)."""
    import threading

    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    monkeypatch.setattr(scan_jobs, "_JOBS", {})
    monkeypatch.setattr(scan_jobs, "MAX_KEPT", 2)
    errors, barrier = [], threading.Barrier(4)

    def saver() -> None:
        barrier.wait()
        for i in range(10):
            try:
                scan_jobs.save_upload(f"{i}.txt", b"words")
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(e)

    threads = [threading.Thread(target=saver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    assert len(list((tmp_path / "scans").iterdir())) <= 2


def test_a_scan_refused_for_room_saves_no_upload(at, monkeypatch, tmp_path):
    """Two scans run already: the page's Run scan on an uploaded corpus is one line, and the upload
    is not written (a class pressing it again and again pushed everyone's scans out)."""
    import subprocess
    import sys

    sleeping = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    monkeypatch.setattr(scan_jobs, "_JOBS", {f"job{i}": p for i, p in enumerate(sleeping)})
    try:
        ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
        ok(at.selectbox(key="corpus_source").set_value("upload a .txt or .jsonl").run())
        ok(at.get_by_key("corpus_upload").set_value([("words.txt", TEXT.encode(), "text/plain")]).run())
        at.button(key="corpus_run").click().run()
        assert not at.exception
        assert "Scan not started" in at.error[0].value and "running on this server already" in at.error[0].value
        assert not list((tmp_path / "scans").glob("upload-*"))
    finally:
        for p in sleeping:
            p.kill()
            p.wait()


def test_an_uploaded_corpus_is_there_when_its_scan_starts_whatever_others_upload(monkeypatch, tmp_path):
    """start_scan saves the upload and starts its scan in one turn of the folder lock: other sessions
    saving uploads meanwhile (each pruning the oldest) cannot remove it first (saved, then started in
    two steps, it was gone after 20 other uploads in between)."""
    import subprocess
    import sys
    import threading

    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    monkeypatch.setattr(scan_jobs, "_JOBS", {})
    monkeypatch.setattr(scan_jobs, "MAX_KEPT", 2)
    monkeypatch.setattr(scan_jobs, "MAX_RUNNING_SCANS", 100)
    real, missing = subprocess.Popen, []

    def sleeper(cmd, **kw):
        data = next(a.removeprefix("--data=") for a in cmd if a.startswith("--data="))
        if not Path(data).is_file():
            missing.append(data)
        return real([sys.executable, "-c", "pass"], **kw)

    monkeypatch.setattr(scan_jobs.subprocess, "Popen", sleeper)
    stop = threading.Event()

    def others() -> None:
        while not stop.is_set():
            scan_jobs.save_upload("other.txt", b"words")

    crowd = [threading.Thread(target=others) for _ in range(3)]
    for t in crowd:
        t.start()
    try:
        jobs = [scan_jobs.start_scan(tmp_path / "ck", (f"{i}.txt", b"my corpus"), 8, 2) for i in range(30)]
    finally:
        stop.set()
        for t in crowd:
            t.join(30)
    assert len(jobs) == 30 and not missing, missing[:3]


def test_the_windows_tab_reads_without_hovering(at, roots):
    _, samples = roots
    scan = gptviz.load_scan(samples / "scans" / NAME)
    chips = [h.proto.body for h in at.get("html") if "nats" in h.proto.body and "position 0" in h.proto.body][0]
    assert "NaN" not in chips  # position 0 is not predicted, not a NaN the model computed
    w = at.number_input(key="corpus_window").value
    first = scan.tokens[(scan.tokens.window == w) & (scan.tokens.position == 1)]["loss"].iloc[0]
    assert f">{first:.2f}<" in chips and ">—<" in chips  # each loss printed on its chip
    table = [d.value for d in at.dataframe if "document" in d.value.columns][0]
    assert set(table["document"]) == {"a.txt"} and not table["short"].any()
    ok(at.checkbox(key="corpus_hide_short").uncheck().run())
    table = [d.value for d in at.dataframe if "document" in d.value.columns][0]
    assert table["short"].any() and len(table) == len(scan.windows) and "b.txt" in set(table["document"])


def test_a_heads_view_across_the_corpus(at, roots):
    _, samples = roots
    scan = gptviz.load_scan(samples / "scans" / NAME)
    from gptviz.scanning.heads import head_metrics, head_samples

    scatter = figure(at, "corpus_heads_scatter")["data"][0]
    metrics = head_metrics(scan)
    assert len(scatter["text"]) == len(metrics)  # every head, labelled
    np.testing.assert_allclose(array(scatter["x"]), metrics["prev_token_score"], rtol=1e-6)
    ok(at.selectbox(key="corpus_head_pick").set_value("L1 H0").run())
    shown = [d.value for d in at.dataframe if "interval" in d.value.columns][0]
    want = head_samples(scan, 1, 0, "max_attention", n_intervals=10, per_interval=2, top=5)
    assert shown["window"].tolist() == want["window"].tolist()
    assert shown["interval"].iloc[0] == 10
    best = int(want["window"].iloc[0])
    heat = figure(at, f"corpus_head_map_{best}")
    assert f"window {best}" in heat["layout"]["title"]["text"]
    qk = figure(at, "corpus_head_qk")["data"][0]
    assert array(qk["y"]).sum() > 0
    assert figure(at, "corpus_head_keys")["data"][0]["orientation"] == "h"


def test_a_click_in_the_token_neurons_table_opens_that_neuron(roots):
    from gptviz.dashboard.corpus.scans import take_neuron_pick

    _, samples = roots
    scan = gptviz.load_scan(samples / "scans" / NAME)
    tok = gptviz.load(roots[0] / NAME).tokenizer
    found = queries.neurons_for_token(scan, tok.encode("e")[0])
    state = {"corpus_token": "e", "corpus_token_neurons": {"selection": {"rows": [1]}}}
    take_neuron_pick(state, scan, tok)
    assert (state["corpus_layer"], state["corpus_neuron"]) == tuple(found.iloc[1][["layer", "neuron"]].astype(int))
    state["corpus_layer"] = 0
    take_neuron_pick(state, scan, tok)  # the same selection again: taken once, the box is the user's
    assert state["corpus_layer"] == 0


def test_scan_b_is_picked_from_the_scans_found_and_a_class_server_lists_only_its_sessions(roots, monkeypatch, tmp_path):
    ckpts, samples = roots
    ran = tmp_path / "scans" / "0123abcd" / "scan"  # where a scan the page ran lands (jobs.py)
    gptviz.scan(str(ckpts / NAME), samples / "hamlet", window=16, k=3, out=ran)
    b = gptviz.load_scan(ran)
    serve(monkeypatch, ckpts, NAME)
    monkeypatch.setenv(queries.SAMPLES_ENV, str(samples))
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    at = ok(app_session("views/corpus.py"))
    pick = at.selectbox(key="corpus_compare_pick")
    assert pick.options[0] == "a folder typed below…" and len(pick.options) == 2  # scan A itself is not offered
    assert pick.options[1] == f"ran here: {NAME} on hamlet, {len(b.windows):,} windows, " + time.strftime(
        "%H:%M", time.localtime((ran / "summary.json").stat().st_mtime)
    )
    ok(pick.select_index(1).run())
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Mean loss, B (nats)"] == f"{b.summary['loss']:.3f}"
    # a class server lists no other session's scan (its corpus may be a student's upload) until this one ran it
    monkeypatch.setenv(classmode.CLASS_ENV, "1")
    at = ok(app_session("views/corpus.py"))
    assert not [s for s in at.selectbox if s.key == "corpus_compare_pick"] and at.text_input(
        key="corpus_compare_folder"
    )
    at.session_state[keys.CORPUS_MINE] = [str(ran)]  # what the page keeps when a scan it started ends
    ok(at.run())
    assert at.selectbox(key="corpus_compare_pick").options[1].startswith(f"this session: {NAME} on hamlet")


@pytest.mark.slow  # starts the scan as its own process, as the page does
def test_a_scan_with_the_shipped_transcoders_gives_the_graph_page_its_contexts(at, roots):
    """Transcoders shipped beside the checkpoint are offered by the scan form; the scan it runs (its own
    process) reads them, and the Graph page then finds it by itself for a feature's contexts."""
    from test_app_graph import random_set

    from gptviz.transcoders.files import save_transcoders

    ckpts, _ = roots
    cfg = gptviz.load(ckpts / NAME).model.config
    save_transcoders(random_set(cfg.n_embd, cfg.n_layer), ckpts / NAME / "transcoders")
    ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
    assert at.selectbox(key="corpus_transcoders").options == ["none", "transcoders"]
    at.selectbox(key="corpus_transcoders").set_value("transcoders")
    at.number_input(key="corpus_window_size").set_value(32)
    ok(at.button(key="corpus_run").click().run())
    ok(wait_for_scan(at))
    made = gptviz.load_scan(at.session_state["corpus_scan"])
    tcs = gptviz.load_transcoders(ckpts / NAME / "transcoders")
    assert made.summary["transcoders"]["fingerprint"] == tcs.fingerprint() and len(made.transcoder_features)
    ok(at.switch_page("views/graph.py").run())
    assert not any("No corpus scan" in i.value for i in at.info)
    assert any(c.value.startswith("From the scan") for c in at.caption)


def test_the_shipped_scans_transcoder_features_tab(monkeypatch):
    """The shipped scan was made with the shipped transcoders: a tab lists a feature's strongest contexts,
    the library's rows in rank order (a scan without transcoders has no such tab: the first test)."""
    from apptest_helpers import shipped_room

    shipped_room(monkeypatch)
    at = ok(ok(app_session()).switch_page("views/corpus.py").run())
    assert [t.label for t in at.tabs][-1] == "Transcoder features"
    at.selectbox(key="corpus_tc_layer").set_value(2)
    ok(at.number_input(key="corpus_tc_feature").set_value(5).run())
    root = Path(__file__).resolve().parents[1]
    rows = queries.transcoder_contexts(gptviz.load_scan(root / "samples/scans/shakespeare-char"), 2, 5)
    shown = [h.proto.body for h in at.tabs[-1].get("html")]
    assert len(rows) and len(shown) == min(len(rows), 8)
    for body, r in zip(shown, rows.itertuples()):
        assert body.startswith(f"<b>#{r.rank}</b> · {r.value:.3f} · window {r.window} · ")
