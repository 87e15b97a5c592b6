"""Read the body GitHub renders from an issue form: one ``### <label>`` section per field.

GitHub writes each answer as ``### <field label>``, a blank line, then the value; an empty optional field reads
``_No response_``. Issue forms enforce ``required`` only in public repositories, and anyone can edit the body
afterwards, so these sections are untrusted text: this module only splits them; ``request`` validates them.
"""

from __future__ import annotations

import re

NO_RESPONSE = "_No response_"
_HEADING = re.compile(r"^###[ \t]+(.+?)[ \t]*$")


def parse_sections(body: str | None) -> dict[str, str]:
    """``{label: value}`` for every ``### label`` section of ``body``; empty answers become ``""``.

    Text before the first heading is ignored. A label that appears twice keeps its first value (GitHub never
    repeats a label; an edited body that does is not allowed to override an earlier answer).
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (body or "").replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        heading = _HEADING.match(line)
        if heading:
            label = heading.group(1)
            current = [] if label in sections else sections.setdefault(label, [])
            continue
        if current is not None:
            current.append(line)
    result = {}
    for label, lines in sections.items():
        value = "\n".join(lines).strip()
        result[label] = "" if value == NO_RESPONSE else value
    return result
