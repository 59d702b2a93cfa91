"""Reading input files: transparent gzip, content sniffing, errors that name the file."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import BinaryIO

from tracediag.model.errors import TraceInputError

GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic number (whatever its extension)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes of the file's content, decompressed when it is gzip."""
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as f:
                return f.read(n)
        with open(path, "rb") as f:
            return f.read(n)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceInputError(path, f"cannot read: {_reason(exc)}") from None


def sniff_head(path: Path, n: int) -> bytes:
    """The start of the content for format sniffing: a truncated or damaged gzip gives what
    decompresses (the reader then reports the damage), an unreadable one ``b""``."""
    try:
        return head(path, n)
    except TraceInputError:
        with open(path, "rb") as f:
            raw = f.read(n)
        try:
            return zlib.decompressobj(wbits=31).decompress(raw, n)
        except zlib.error:
            return b""


def open_content(path: Path) -> BinaryIO:
    """The content as a binary stream, decompressed when it is gzip (reading may raise
    ``OSError``, ``EOFError`` or ``zlib.error`` on damage: :func:`read_bytes` says which)."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def read_bytes(path: Path) -> bytes:
    """The whole content, decompressed when it is gzip; truncated or corrupt gzip is an error."""
    try:
        with open_content(path) as f:
            data = f.read()
    except EOFError:
        raise TraceInputError(
            path, "truncated gzip stream (file ends before the end of the data)"
        ) from None
    except (OSError, zlib.error) as exc:
        raise TraceInputError(path, f"cannot read: {_reason(exc)}") from None
    if not data or data.isspace():  # (isspace stops at the first other byte; strip would copy)
        raise TraceInputError(path, "empty file")
    return data


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return " ".join(text.split())
