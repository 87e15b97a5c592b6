"""Text from outside (a runner's reason, a stack field, a problem quoting a key) made safe to put into Markdown.

:func:`md_inline` turns any string into one line that GitHub renders as the same plain text: no image, link, HTML,
heading, table cell break, emphasis or code span can come out of it, and no ``@`` mention notifies anyone. Used
wherever the bot renders such text into a comment, a report or a table.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
# what Markdown (GitHub's flavour) reads: backslash escapes stop every one of them
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~=:-])")
INLINE_CAP = 300  # characters of a quoted text kept by default


def md_inline(text: object, cap: int = INLINE_CAP) -> str:
    """``text`` as one line of plain text in Markdown, at most ``cap`` characters of it kept (then "…")."""
    flat = _CONTROL.sub(" ", str(text)).strip()
    if len(flat) > cap:
        flat = flat[: max(cap - 1, 0)] + "…"
    out = _SPECIAL.sub(r"\\\1", flat)
    out = out.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out.replace("@", "@&#8203;")  # a zero-width space after @: shown the same, mentions nobody


def code_safe(text: str) -> str:
    """``text`` for the inside of a fenced code block: its backticks become look-alikes, so it cannot close the
    fence and let the rest render as Markdown."""
    return text.replace("`", "ˋ")
