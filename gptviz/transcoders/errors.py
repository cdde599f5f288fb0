"""The error a transcoder file or argument raises: here, below every module of the package that raises it."""

from __future__ import annotations

from ..errors import GptvizError


class TranscoderError(GptvizError, ValueError):
    """A transcoder file or argument that cannot be used: the message names the file or the mismatch."""
