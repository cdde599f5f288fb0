"""Joining a class: the teacher's join screen (the follow link in large type and its QR code, drawn on
this server by segno: nothing is fetched from anywhere) and the "join a class" box of the first page.

The link names an address the room can reach, not the one the teacher's own browser happens to use:
a teacher on the server's own machine opens http://127.0.0.1:8501, which on a student's laptop is the
student's laptop. So a loopback host is replaced by the address the server listens on, or, when it
listens on every interface (0.0.0.0, Streamlit's default), by this machine's address on its network.
A host the teacher typed that the room can reach (a LAN address, a name) is kept as it is.
"""

from __future__ import annotations

import html
import io
import ipaddress
import re
import socket
from urllib.parse import urlsplit

import segno
import streamlit as st

from ..sources.classmode import bound_address, loopback
from ..widgets import plain
from . import live

QR_SCALE = 10  # px per module: a 37-module code is 450 px with its border, read from the back of a room
QR_BORDER = 4  # modules of quiet zone, as the QR standard asks
QR_WIDTH = 380  # px on screen: beside the link, the whole join screen fits a 1280 × 720 projector
_HOST = re.compile(r"[A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")  # a name, IPv4 or [IPv6]: nothing else
WILDCARD = ("", "0.0.0.0", "::", "[::]")


def lan_address() -> str | None:
    """This machine's address on its network (the interface its default route leaves by), or None.
    A UDP socket's connect sends nothing: it only asks the kernel which interface it would use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
        except OSError:
            ip = ""
    if ip and not ipaddress.ip_address(ip).is_loopback and ip != "0.0.0.0":
        return ip
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
    return None if ipaddress.ip_address(ip).is_loopback else ip


def follow_link(browser_url: str, bound: str, code: str, lan: str | None, base_path: str = "") -> str:
    """The link students open: the teacher's browser URL's scheme and port, a host the room can reach
    (see the module's note; lan: lan_address()), the server's base path, ?follow=CODE."""
    parts = urlsplit(browser_url if "://" in browser_url else f"http://{browser_url}")
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    if not _HOST.fullmatch(shown) or loopback(host):
        if loopback(bound):  # only this machine reaches the server: no other address would work
            shown = shown if _HOST.fullmatch(shown) else "127.0.0.1"
        elif bound.strip() not in WILDCARD:
            shown = bound.strip()  # the one address the server listens on
        elif lan:
            shown = lan
        elif not _HOST.fullmatch(shown):
            shown = "127.0.0.1"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is no number (a hostile Host header): the default port
        port = ""
    scheme = parts.scheme if parts.scheme in ("http", "https") else "http"
    base = "/" + base_path.strip("/") + "/" if base_path.strip("/") else "/"
    return f"{scheme}://{shown}{port}{base}?follow={code}"


def qr_png(link: str) -> bytes:
    """The link's QR code as a PNG (error correction M: a code read off a projector survives glare)."""
    out = io.BytesIO()
    segno.make(link, error="m", micro=False).save(out, kind="png", scale=QR_SCALE, border=QR_BORDER)
    return out.getvalue()


def this_link(code: str) -> str:
    """follow_link for this session's browser and this server."""
    from streamlit import config

    url = st.context.url or f"http://{st.context.headers.get('host', '127.0.0.1')}"
    base = str(config.get_option("server.baseUrlPath") or "")
    return follow_link(url, bound_address(), code, lan_address(), base)


@st.dialog("Join this class", width="large")
def join_screen(code: str) -> None:
    """The link in large type and its QR code, for the projector while students arrive."""
    link = this_link(code)
    host = urlsplit(link).hostname or ""
    unreachable = loopback(host) or loopback(bound_address())
    qr, words = st.columns([1, 1.4], vertical_alignment="center")
    qr.image(qr_png(link), caption="Scan to follow the class", width=QR_WIDTH)
    with words:  # the warning too, beside the code: under it, the screen ran past 720 px
        st.html(
            f'<p style="font-size:2.6rem;font-weight:700;margin:0 0 1rem 0">Class code {html.escape(code)}</p>'
            '<p style="font-size:1.5rem;margin:0">Open this address, or type the code in "Join a class":</p>'
            f'<p class="gptviz-join-link" style="font-size:2rem;line-height:1.2;word-break:break-all;margin:0">'
            f"{html.escape(link)}</p>"
        )
        if unreachable:
            st.warning(
                "This server listens only on this computer, so students cannot open this link: start it with "
                "`gptviz dashboard --address 0.0.0.0` (class mode; docs/classroom.md)."
            )


def join_button(code: str) -> None:
    """The class bar's Join button: it opens the join screen."""
    if st.button(
        ":material/qr_code_2: Join",
        key="join_open",
        help="The join screen: the follow link in large type and as a QR code",
    ):
        join_screen(code)


def join_box() -> None:
    """The first page's "Join a class" box: a student types the code the teacher shows and follows."""
    form = st.form("join_class", border=False, enter_to_submit=True)
    with form, st.container(horizontal=True, vertical_alignment="bottom", key="join_row"):
        typed = st.text_input(
            "Join a class", key="join_code", max_chars=8, placeholder="the code your teacher shows, e.g. K7QX"
        )
        sent = st.form_submit_button("Follow", key="join_go")
    if not sent:
        return
    code = live.normal(typed)
    if not code:
        st.error(
            f"{plain(typed.strip()[:8]) or 'That'} is not a class code: 4 letters and digits, as the teacher shows it"
        )
        return
    st.query_params.clear()
    st.query_params["follow"] = code
    st.rerun()
