"""Class mode: a dashboard served to a room keeps the server's disk to itself.

On by default whenever the server listens beyond loopback (Streamlit's server.address, read at run
time), or with GPTVIZ_CLASS=1 (`gptviz dashboard --class`); GPTVIZ_CLASS=0 turns it off. Then no
box or URL parameter reaches a path on the server (checkpoint, corpus, scan folder, lesson, Timeline,
Compare) except the shipped items and the folders the teacher names in GPTVIZ_DATA_ROOTS, each
checked after resolving links. Every refusal is the same line, whether or not the file exists, so
a page answers nothing about the disk. Uploads and scans started from a page are off unless the
teacher turns them on (GPTVIZ_CLASS_UPLOADS=1, GPTVIZ_CLASS_SCANS=1), and are then bounded for the
whole server (uploads.py, corpus/scans.py)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from ...errors import CheckpointError
from ...formats.safe import user_path
from ...shipped import shipped_dir

CLASS_ENV = "GPTVIZ_CLASS"
DEFAULT_ENV = "GPTVIZ_DEFAULT_CHECKPOINT"  # the teacher's checkpoint: the sidebar opens on it, a class may read it
ROOTS_ENV = "GPTVIZ_DATA_ROOTS"  # folders a class may read, separated by os.pathsep (":")
UPLOADS_ENV = "GPTVIZ_CLASS_UPLOADS"  # 1: a class server takes uploads (bounded: UPLOAD_TOTAL_ENV)
SCANS_ENV = "GPTVIZ_CLASS_SCANS"  # 1: a class server's Corpus page may start scans (one per client)
UPLOAD_TOTAL_ENV = "GPTVIZ_CLASS_UPLOAD_TOTAL_MB"  # uploads held by all sessions together
UPLOAD_TOTAL_MB = 400
CORPUS_MB = 4  # a corpus a class uploads for a scan: about 4 million characters
REFUSED = (
    "this is a class server: it opens only its shipped items and the folders its teacher names in "
    f"{ROOTS_ENV}; pick one of those"
)
OFF = ("0", "false", "no", "off")
ON = ("1", "true", "yes", "on")


class ClassRefusal(CheckpointError):
    """A path a class server does not open: always the one line REFUSED."""

    def __init__(self) -> None:
        super().__init__(REFUSED)


def bound_address() -> str:
    """The address the Streamlit server listens on ('' for every interface, Streamlit's default)."""
    try:
        from streamlit import config

        return str(config.get_option("server.address") or "")
    except Exception:  # no Streamlit config to read: a library caller, not a server
        return "127.0.0.1"


def loopback(address: str) -> bool:
    """Whether only this machine can reach an address ('' and 0.0.0.0 are every interface)."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip().strip("[]")).is_loopback
    except ValueError:  # '' or a host name: it may be reachable from the room
        return False


def class_mode() -> bool:
    """Whether this server is a class server: $GPTVIZ_CLASS if set (1 or 0), else whether it listens
    beyond loopback."""
    flag = os.environ.get(CLASS_ENV, "").strip().lower()
    if flag in ON:
        return True
    if flag in OFF:
        return False
    return not loopback(bound_address())


def _switch(env: str) -> bool:
    return os.environ.get(env, "").strip().lower() in ON


def uploads_allowed() -> bool:
    """Whether pages take uploads: always off a class server, on one only when the teacher says so."""
    return not class_mode() or _switch(UPLOADS_ENV)


def scans_allowed() -> bool:
    """Whether the Corpus page may start a scan: on a class server only when the teacher says so."""
    return not class_mode() or _switch(SCANS_ENV)


def upload_total_bytes() -> int:
    """What all sessions' uploads may hold together on a class server ($GPTVIZ_CLASS_UPLOAD_TOTAL_MB)."""
    raw = os.environ.get(UPLOAD_TOTAL_ENV, "").strip()
    return (int(raw) if raw.isascii() and raw.isdigit() else UPLOAD_TOTAL_MB) * 2**20


def client_address() -> str:
    """The address this session's browser connects from ('' where there is none: a test's session),
    what bounds per client count by."""
    import streamlit as st

    try:
        ip = st.context.ip_address
    except Exception:  # no session: a library caller
        return ""
    return ip if isinstance(ip, str) else ""


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def data_roots(extra: tuple[Path, ...] = ()) -> list[Path]:
    """The folders a class server opens, links resolved: the shipped checkpoints and samples, the
    checkpoint the teacher started the server on, the folders in $GPTVIZ_DATA_ROOTS, and extra."""
    roots = [shipped_dir("checkpoints"), shipped_dir("samples"), *extra]
    teacher = os.environ.get(DEFAULT_ENV, "")
    if os.path.isabs(teacher) and "\0" not in teacher:  # `gptviz dashboard --checkpoint PATH` wrote it absolute
        roots.append(Path(teacher))
    roots += [Path(p).expanduser() for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    return [_real(r) for r in roots if "\0" not in str(r)]


def allowed_path(text: str | Path, extra: tuple[Path, ...] = ()) -> Path:
    """A path typed or linked by a person, as user_path gives it; on a class server only one inside
    data_roots() (after resolving links, so a link in a root to elsewhere is refused), else
    ClassRefusal: the same line whatever the path names, so nothing is learnt of the disk."""
    if not class_mode():
        return user_path(text)
    try:
        real = _real(user_path(text))
    except (CheckpointError, OSError, ValueError, RuntimeError):  # a NUL byte, a link loop
        raise ClassRefusal() from None
    if any(real == root or root in real.parents for root in data_roots(extra)):
        return real
    raise ClassRefusal()
