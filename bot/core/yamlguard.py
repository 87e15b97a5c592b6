"""Checks on YAML text from outside (recipes, data files) before it is built into objects.

Anchors and aliases are refused: an alias repeats a subtree, so a few kilobytes can expand into megabytes (and so
can every error message that quotes the result). Text over :data:`MAX_YAML_BYTES` is refused before it is parsed.
Both answers are one line naming the source, the line and what to do.
"""

from __future__ import annotations

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import AliasEvent

MAX_YAML_BYTES = 1024 * 1024  # 1 MiB: a recipe or data file is a few kilobytes


def yaml_problem(text: str, source: str) -> str | None:
    """Why ``text`` may not be loaded (too large, or it uses an anchor or alias), one line; None when it may.
    A YAML syntax error is left to the loader, which reports it in its own words."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_YAML_BYTES:
        return f"{source}: {size:,} bytes; a YAML input holds at most {MAX_YAML_BYTES:,} bytes (1 MiB)"
    if "&" not in text and "*" not in text:  # no anchor or alias can be written without one of them
        return None
    try:
        for event in YAML(typ="rt", pure=True).parse(text):
            anchor = getattr(event, "anchor", None)
            if isinstance(event, AliasEvent) or anchor:
                line = event.start_mark.line + 1 if event.start_mark is not None else 1
                kind = "alias *" if isinstance(event, AliasEvent) else "anchor &"
                return (
                    f"{source}:{line}: YAML {kind}{str(anchor)[:40]} is not accepted "
                    "(no anchors, aliases or merge keys); write the value out in full"
                )
    except YAMLError:
        return None
    return None
