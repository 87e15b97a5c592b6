"""Reading a user's text file: UTF-8 or a one-line error naming the file, line and byte.

Every command that reads a file a user or a runner wrote (recipes, lessons catalogs, run
records) reads it through :func:`read_utf8`, so a stray Latin-1 byte is an error that names
where it is, never a ``UnicodeDecodeError`` traceback.
"""

from __future__ import annotations

import os
from pathlib import Path


class NotText(ValueError):
    """The file is not UTF-8 text; the message is ``file:line: ...`` and names the byte."""


def decode_utf8(data: bytes, source: str) -> str:
    """``data`` as text, or :class:`NotText` naming ``source``, the line and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise NotText(
            f"{source}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None


def read_utf8(path: str | os.PathLike[str]) -> str:
    """The file's text. ``OSError`` passes through (callers phrase it); bad encoding is :class:`NotText`.

    Line ends are kept as they are in the file (no universal-newline translation), so a file
    written back from this text keeps its CRLF or LF endings.
    """
    p = Path(path)
    return decode_utf8(p.read_bytes(), str(p))
