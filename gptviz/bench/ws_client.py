"""A simulated student: one Streamlit session driven over Streamlit's own websocket protocol (the
BackMsg / ForwardMsg protobufs the browser sends and receives), with no browser. For the class
load script (classroom.py): it opens a page, submits a prompt through the sidebar's form, and
follows a teacher, answering the server's auto-rerun requests of a follower's polling fragment as
the browser would. Only 127.0.0.1 is ever contacted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection
from websockets.typing import Origin, Subprotocol

DONE = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}


@dataclass
class Run:
    """What one script run sent: its text (markdown, headings), widget ids by key, and when it ended."""

    texts: list[str] = field(default_factory=list)
    widgets: dict[str, str] = field(default_factory=dict)  # user key -> element id
    finished: float = 0.0
    fragment: bool = False


def _element_texts(delta) -> tuple[list[str], dict[str, str]]:
    texts: list[str] = []
    widgets: dict[str, str] = {}
    if not delta.HasField("new_element"):
        return texts, widgets
    el = delta.new_element
    kind = el.WhichOneof("type")
    if kind is None:
        return texts, widgets
    body = getattr(el, kind)
    for attr in ("body", "label", "text"):
        value = getattr(body, attr, None)
        if isinstance(value, str) and value:
            texts.append(value)
    wid = getattr(body, "id", "")
    if isinstance(wid, str) and wid.startswith("$$ID-"):
        widgets[wid.rsplit("-", 1)[-1]] = wid
    return texts, widgets


class Student:
    """One session on a dashboard at `url` (http://127.0.0.1:PORT)."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1", "the load script talks to this machine only"
        self.http = url
        self.ws_url = f"ws://{parts.netloc}/_stcore/stream"
        self.ws: ClientConnection | None = None
        self.pages: dict[str, str] = {}  # url path -> page script hash
        self.page_hash = ""
        self.query = ""
        self.widgets: dict[str, str] = {}
        self.auto: dict[str, float] = {}  # fragment id -> interval (s) the server asked to rerun at
        self._poller: asyncio.Task | None = None
        self._partial: Run | None = None

    async def connect(self) -> None:
        self.ws = await websockets.connect(
            self.ws_url,
            subprotocols=[Subprotocol("streamlit")],
            origin=Origin(self.http),
            max_size=2**26,
            open_timeout=120,
            ping_interval=None,  # a server busy with 30 sessions may answer a ping late: not a failure
        )

    async def close(self) -> None:
        if self._poller:
            self._poller.cancel()
        if self.ws is not None:
            await self.ws.close()

    async def _send(self, widget_states=(), fragment_id: str = "", auto: bool = False) -> None:
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_script_hash = self.page_hash
        cs.widget_states.widgets.extend(widget_states)
        if fragment_id:
            cs.fragment_id = fragment_id
            cs.is_auto_rerun = auto
        assert self.ws is not None, "connect() first"
        await self.ws.send(msg.SerializeToString())

    async def _read_run(self, timeout: float) -> Run:
        """ForwardMsgs until a script run finishes; what it drew. On a timeout what was read so far
        is kept for the next call (a run may span it)."""
        assert self.ws is not None, "connect() first"
        run = self._partial or Run()
        self._partial = None
        deadline = time.monotonic() + timeout
        while True:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), max(0.05, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                self._partial = run
                raise
            m = ForwardMsg()
            m.ParseFromString(raw)
            kind = m.WhichOneof("type")
            if kind == "new_session":
                self.pages = {p.url_pathname: p.page_script_hash for p in m.new_session.app_pages}
                self.page_hash = self.page_hash or m.new_session.page_script_hash
            elif kind == "navigation":
                self.pages.update({p.url_pathname: p.page_script_hash for p in m.navigation.app_pages})
                self.page_hash = m.navigation.page_script_hash or self.page_hash
            elif kind == "page_info_changed":
                self.query = m.page_info_changed.query_string
            elif kind == "auto_rerun":
                self.auto[m.auto_rerun.fragment_id] = m.auto_rerun.interval
            elif kind == "delta":
                texts, widgets = _element_texts(m.delta)
                run.texts += texts
                run.widgets.update(widgets)
            elif kind == "script_finished" and m.script_finished in DONE:
                run.finished = time.monotonic()
                run.fragment = m.script_finished == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
                self.widgets.update(run.widgets)
                return run

    async def open(self, path: str = "", timeout: float = 300, **query) -> float:
        """A new session on a page: seconds until its first script run has finished."""
        t0 = time.monotonic()
        self.query = urlencode(query)
        await self.connect()
        self.page_hash = ""
        await self._send()
        run = await self._read_run(timeout)
        if path and self.pages.get(path) and self.pages[path] != self.page_hash:
            self.page_hash = self.pages[path]
            await self._send()
            run = await self._read_run(timeout)
        self.last = run
        return run.finished - t0

    async def click(self, key: str, timeout: float = 300) -> float:
        """Press the button with this widget key; seconds until the full run it starts has finished."""
        t0 = time.monotonic()
        await self._send([WidgetState(id=self.widgets[key], trigger_value=True)])
        while True:
            run = await self._read_run(timeout)
            if not run.fragment:
                self.last = run
                return run.finished - t0

    async def prompt(self, text: str, timeout: float = 300) -> float:
        """Type a prompt in the sidebar and press Run (the form submits both together)."""
        t0 = time.monotonic()
        states = [WidgetState(id=self.widgets["prompt"], string_value=text)]
        states.append(WidgetState(id=self.widgets["run_btn"], trigger_value=True))
        await self._send(states)
        while True:  # a run that stops early for another is followed by the one that counts
            run = await self._read_run(timeout)
            if not run.fragment:
                self.last = run
                return run.finished - t0

    async def follow_until(self, seen, timeout: float = 60) -> float:
        """As a follower: answer the polling fragment's auto-reruns until a full run draws a text
        for which seen(text) is true; the monotonic time it finished."""
        deadline = time.monotonic() + timeout
        next_poll = {f: time.monotonic() + i for f, i in self.auto.items()}
        while time.monotonic() < deadline:
            now = time.monotonic()
            for fid, due in list(next_poll.items()):
                if now >= due:
                    await self._send(fragment_id=fid, auto=True)
                    next_poll[fid] = now + self.auto[fid]
            wait = min([*next_poll.values(), deadline]) - time.monotonic()
            try:
                run = await self._read_run(max(0.05, wait))
            except asyncio.TimeoutError:
                continue
            if not run.fragment and any(seen(t) for t in run.texts):
                return run.finished
            next_poll = {f: next_poll.get(f, time.monotonic() + i) for f, i in self.auto.items()}
        raise TimeoutError("the follower never saw the new slide")
