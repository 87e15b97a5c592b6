"""Every reference to a repository file resolves inside the repository (issue 49).

A user's clone has only what git tracks, so a comment, lesson, recipe or page that cites a file must cite one the
repository holds. :func:`dangling_references` scans text files (``.py .md .yaml .yml .toml``) line by line for

* markdown links to relative paths (``[text](../docs/gate.md#anchor)``), resolved from the file's folder, and their
  ``#anchor`` when the target is a markdown file (GitHub's heading slugs);
* ``docs/...`` paths, resolved from the repository root;
* notes kept outside the repository: a path through a ``shared`` folder, the old design note, and the old research
  notes' bare file names, unless such a name resolves from the file's own folder (``docs/`` pages link each other).

It returns one ``file:line: target (why)`` per miss; the test runs it over ``git ls-files`` and over planted files.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml")

_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_DOCS_PATH = re.compile(r"(?<![\w/.:@-])docs/[\w./-]*[\w/](?:#[\w-]+)?")
# the notes outside the repository, by name, spelled in pieces so this file cites none of them itself
_SHARED = "sha" + "red"
_NOTE_NAMES = ("DE" + "SIGN", "perf" + "model", "cpu-" + "torchtitan", "torch" + "titan", "ga" + "te", "git" + "ops")
_OUTSIDE = re.compile(r"(?<![\w/.-])(?:\.\./)*" + _SHARED + "/|/work/" + _SHARED + r"\b")
_OLD_NOTE = re.compile(r"(?<![\w/.-])(" + "|".join((*_NOTE_NAMES, "anch" + "ors")) + r")\.md\b")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#|\{|\$)", re.I)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")

# planted dangling references, spelled in pieces too
OUTSIDE = "../" + _SHARED + "/"
OLD_DESIGN = _NOTE_NAMES[0] + ".md"
OLD_PERF = _NOTE_NAMES[1] + ".md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*_~]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path, memo: dict[Path, frozenset[str]]) -> frozenset[str]:
    """Every heading anchor of a markdown file (repeated headings get -1, -2, ... as on GitHub), memoised per scan."""
    if path in memo:
        return memo[path]
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    out.update(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8", errors="replace")))
    memo[path] = frozenset(out)
    return memo[path]


def _resolve(root: Path, base: Path, target: str, memo: dict[Path, frozenset[str]]) -> str | None:
    """Why ``target`` (a path, maybe with ``#anchor``, relative to ``base``) does not resolve, or None when it does."""
    path_part, _, anchor = target.partition("#")
    path = (base / path_part).resolve() if path_part else None
    if path is not None:
        try:
            path.relative_to(root.resolve())
        except ValueError:
            return "outside the repository"
        if not path.exists():
            return "no such file"
    if anchor and path is not None and path.suffix == ".md" and path.is_file() and anchor not in _anchors(path, memo):
        return f"no heading #{anchor}"
    return None


def dangling_references(root: Path, files: Iterable[str]) -> list[str]:
    """``file:line: target (why)`` for each reference in ``files`` (paths relative to ``root``) that does not resolve."""
    problems: list[str] = []
    memo: dict[Path, frozenset[str]] = {}
    for rel in files:
        path = root / rel
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        here = path.parent
        is_md = rel.endswith(".md")
        fenced = False
        for n, line in enumerate(text.splitlines(), 1):
            if is_md and line.lstrip().startswith("```"):
                fenced = not fenced
            found: list[tuple[str, str]] = []
            prose = line
            if is_md and not fenced:
                for target in _LINK.findall(line):
                    if _EXTERNAL.match(target):
                        if target.startswith("#") and (why := _resolve(root, here, path.name + target, memo)):
                            found.append((target, why))
                        continue
                    if why := _resolve(root, here, target, memo):
                        found.append((target, why))
                # a link to another site may show that site's path as its text: not a path of this repository
                prose = _LINK.sub(lambda m: "" if _EXTERNAL.match(m.group(1)) else m.group(0), line)
            for m in _DOCS_PATH.finditer(prose):
                if why := _resolve(root, root, m.group(0), memo):
                    found.append((m.group(0), why))
            for m in _OUTSIDE.finditer(line):
                found.append((m.group(0), "a note outside the repository"))
            for m in _OLD_NOTE.finditer(line):
                if not (here / m.group(0)).is_file():
                    found.append((m.group(0), "an old note name; cite docs/ instead"))
            problems.extend(f"{rel}:{n}: {target} ({why})" for target, why in dict.fromkeys(found))
    return problems


def tracked_text_files(root: Path = ROOT) -> list[str]:
    """The text files git tracks (``.github`` included), minus this test, whose patterns name the old notes."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    own = Path(__file__).resolve().relative_to(root).as_posix()
    return [f for f in out.split("\0") if f.endswith(SUFFIXES) and f != own and (root / f).is_file()]


def test_every_reference_in_the_repository_resolves() -> None:
    problems = dangling_references(ROOT, tracked_text_files())
    assert not problems, f"{len(problems)} dangling reference(s):\n" + "\n".join(problems)


def test_a_planted_dangling_reference_is_named_by_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Two words\n\nSee [the model](reference/model.md#memory).\n"
    )
    (tmp_path / "docs" / "reference" / "model.md").write_text("# Model\n\n## Memory\n")
    (tmp_path / "code.py").write_text(
        '"""Fine: docs/guide.md, docs/reference/model.md#memory, [x](https://example.com/gate.md)."""\n'
        "# facts: docs/reference/missing.md section 2\n"
        f"# from {OUTSIDE}reference/notes.md and {OLD_DESIGN}\n"
        f"X = 1  # {OLD_PERF} §4.2\n"
    )
    (tmp_path / "README.md").write_text(
        "[ok](docs/guide.md#two-words) [gone](docs/nowhere.md) [bad anchor](docs/guide.md#three-words)"
        " [their docs/x.md](https://example.com/docs/x.md)\n"
        "```\n[inside a fence](not/checked.md)\n```\n[up](../outside.md) [self](#readme-heading)\n"
    )
    problems = dangling_references(tmp_path, ["docs/guide.md", "docs/reference/model.md", "code.py", "README.md"])
    assert problems == [
        "code.py:2: docs/reference/missing.md (no such file)",
        f"code.py:3: {OUTSIDE} (a note outside the repository)",
        f"code.py:3: {OLD_DESIGN} (an old note name; cite docs/ instead)",
        f"code.py:4: {OLD_PERF} (an old note name; cite docs/ instead)",
        "README.md:1: docs/nowhere.md (no such file)",
        "README.md:1: docs/guide.md#three-words (no heading #three-words)",
        "README.md:5: ../outside.md (outside the repository)",
        "README.md:5: #readme-heading (no heading #readme-heading)",
    ]
    # the same content, fixed, is clean
    (tmp_path / "code.py").write_text("# facts: docs/reference/model.md#memory\n")
    (tmp_path / "README.md").write_text("# Readme heading\n[ok](docs/guide.md#two-words) [self](#readme-heading)\n")
    assert dangling_references(tmp_path, ["docs/guide.md", "code.py", "README.md"]) == []
