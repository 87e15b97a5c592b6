"""bot/core/datafile.py: data files are read as UTF-8 (one line naming the byte otherwise, CRLF or LF alike), and a
``check`` hook refuses a validated entry at its field's line with the file, entry index, id and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from bot.core.datafile import DataFileError, EntryProblem, load_entries, load_yaml


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    size: int
    tags: list[str] = []


class ItemError(DataFileError):
    """The caller's own error type."""


BODY = """\
about: a test file
items:
  - id: small
    size: 1
  - id: big
    size: 100
    tags: [heavy, slow]
"""


def _write(tmp_path: Path, data: bytes | str, name: str = "items.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_a_crlf_file_loads_as_its_lf_twin(tmp_path: Path) -> None:
    lf = load_yaml(_write(tmp_path, BODY, "lf.yaml"))
    crlf = load_yaml(_write(tmp_path, BODY.replace("\n", "\r\n"), "crlf.yaml"))
    assert crlf == lf
    assert [i.id for i in load_entries(tmp_path / "crlf.yaml", "items", Item, ItemError)] == ["small", "big"]


def test_a_file_that_is_not_utf8_is_one_line_of_the_callers_error(tmp_path: Path) -> None:
    data = BODY.replace("tags: [heavy, slow]", "tags: [lourd, caf\u00e9]").encode("latin-1")
    path = _write(tmp_path, data)
    offset = data.index(b"\xe9")
    expected = f"{path}:7: not UTF-8 text (byte 0xe9 at offset {offset}); save the file as UTF-8"
    with pytest.raises(DataFileError) as raw:
        load_yaml(path)
    assert str(raw.value) == expected
    with pytest.raises(ItemError) as info:
        load_entries(path, "items", Item, ItemError, kind="item")
    assert str(info.value) == expected


def _too_big(item: Item) -> EntryProblem | None:
    if item.size > 10:
        return EntryProblem(("size",), f"expected at most 10; got {item.size}")
    return None


def test_a_check_refuses_an_entry_at_its_fields_line(tmp_path: Path) -> None:
    path = _write(tmp_path, BODY)
    with pytest.raises(ItemError) as info:
        load_entries(path, "items", Item, ItemError, kind="item", check=_too_big)
    assert str(info.value) == f"{path}, line 6: item 1 (id 'big'): field 'size': expected at most 10; got 100"


@pytest.mark.parametrize(
    ("field", "line", "shown"),
    [(("tags", 1), 7, "tags.1"), (("tags", 5), 7, "tags.5"), (("nope",), 5, "nope"), ((), 5, "(the entry itself)")],
)
def test_a_check_problem_falls_back_to_the_nearest_line_the_file_knows(
    tmp_path: Path, field: tuple[str | int, ...], line: int, shown: str
) -> None:
    path = _write(tmp_path, BODY)

    def check(item: Item) -> EntryProblem | None:
        return EntryProblem(field, "refused") if item.id == "big" else None

    with pytest.raises(ItemError) as info:
        load_entries(path, "items", Item, ItemError, kind="item", check=check)
    assert str(info.value) == f"{path}, line {line}: item 1 (id 'big'): field '{shown}': refused"


def test_a_check_that_finds_nothing_loads_every_entry(tmp_path: Path) -> None:
    seen: list[str] = []

    def check(item: Item) -> EntryProblem | None:
        seen.append(item.id)
        return None

    items = load_entries(_write(tmp_path, BODY), "items", Item, ItemError, check=check)
    assert [i.id for i in items] == seen == ["small", "big"]


def test_a_validation_error_comes_before_the_check(tmp_path: Path) -> None:
    path = _write(tmp_path, BODY.replace("size: 1\n", "size: one\n"))
    with pytest.raises(ItemError, match=r"line 4: item 0 \(id 'small'\): field 'size': .*valid integer"):
        load_entries(path, "items", Item, ItemError, kind="item", check=_too_big)
