"""Calls into the `tokenizers` library, each in `guard`: whatever fails in it, a Rust panic included,
becomes one line of a gptviz error, and on the command line the panic's own report never reaches the
terminal."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import TokenizerError


@contextmanager
def guard(what: str, error: type[Exception] = TokenizerError, quiet: bool = True) -> Iterator[None]:
    """Run a call into `tokenizers`; its failures, panics included, become one line of `error`.

    A panic in the library's Rust code arrives as pyo3's PanicException, a BaseException that passes
    every `except Exception`; Ctrl-C and exit still go through. Rust's panic hook also writes the
    panic (and, with RUST_BACKTRACE, ~60 lines of backtrace) to file descriptor 2: in the main thread
    (the CLI) that is held back while the call runs and dropped if it panicked, so the command ends
    in one line. The dashboard's scripts run in other threads, where it goes to the server's log."""
    held = _hold_stderr() if quiet and threading.current_thread() is threading.main_thread() else None
    panicked = False
    try:
        yield
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # noqa: BLE001 - PanicException derives from BaseException
        panicked = not isinstance(e, Exception)
        if isinstance(e, error):
            raise
        first = str(e).splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise error(f"{what}: the tokenizers library failed ({first})") from None
    finally:
        if held is not None:
            _release_stderr(held, keep=not panicked)


_spool: list = []  # one temporary file per process, reused by every held call (main thread only)


def _hold_stderr() -> int | None:
    try:
        sys.stderr.flush()
        if not _spool:
            _spool.append(tempfile.TemporaryFile())  # noqa: SIM115 - kept open for the process's life
        saved = os.dup(2)
        os.dup2(_spool[0].fileno(), 2)
        return saved
    except (OSError, ValueError, AttributeError):  # no fd 2 (a service), or a closed stderr
        return None


def _release_stderr(saved: int, keep: bool) -> None:
    spool = _spool[0]
    os.dup2(saved, 2)
    os.close(saved)
    if keep and spool.tell():  # what the library wrote without panicking goes where it was going
        spool.seek(0)
        os.write(2, spool.read())
    spool.seek(0)
    spool.truncate()
