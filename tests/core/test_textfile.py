"""bot/core/textfile.py: UTF-8 text as it is in the file (CRLF kept), or one line naming the file, line and byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.textfile import NotText, decode_utf8, read_utf8


def test_utf8_text_is_read_with_its_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes("a: caf\u00e9\r\nb: 2\n".encode())
    assert read_utf8(path) == "a: caf\u00e9\r\nb: 2\n"
    assert read_utf8(str(path)) == read_utf8(path)


@pytest.mark.parametrize(
    ("data", "line", "byte", "offset"),
    [
        (b"\xff", 1, 0xFF, 0),
        (b"a: 1\nb: caf\xe9\n", 2, 0xE9, 11),  # Latin-1
        (b"a: 1\r\nb: 2\r\n# \x80\r\n", 3, 0x80, 14),
        (b"a: \xe2\x82\n", 1, 0xE2, 3),  # a truncated multi-byte sequence
    ],
)
def test_a_bad_byte_is_one_line_naming_file_line_and_byte(
    tmp_path: Path, data: bytes, line: int, byte: int, offset: int
) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(data)
    with pytest.raises(NotText) as info:
        read_utf8(path)
    assert str(info.value) == (
        f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x} at offset {offset}); save the file as UTF-8"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_not_text_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^upload\.json:1: not UTF-8 text \(byte 0xfe at offset 0\)"):
        decode_utf8(b"\xfe{}", "upload.json")
    assert decode_utf8(b"{}", "upload.json") == "{}"


def test_os_errors_pass_through(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_utf8(tmp_path / "missing.yaml")
    with pytest.raises(IsADirectoryError):
        read_utf8(tmp_path)
