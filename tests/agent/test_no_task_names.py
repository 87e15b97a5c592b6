"""No code comment or docstring under bot/ names a benchmark task or quotes an oracle score; no bot/agent module
is over MAX_LINES. The measurements behind a rule live in its lesson's ``evidence`` or in docs/, not in the code."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOT = ROOT / "bot"
TASKS = BOT / "bench" / "tasks"
MAX_LINES = 400
# a measured score: "87.1 % of the oracle", "93.6 -> 100 % of the oracle"; a round target ("95 % of the oracle") is not
SCORE = re.compile(r"(\d\.\d+|->\s*\d+)\s*%\s+of\s+(the\s+)?oracle", re.IGNORECASE)


def task_ids(tasks: Path) -> set[str]:
    """The benchmark's task ids as ``<model>/<cluster>`` and its model ids, read from ``tasks/<model>/<cluster>.yaml``."""
    ids = {f"{p.parent.name}/{p.stem}" for p in tasks.glob("*/*.yaml")}
    return ids | {i.split("/")[0] for i in ids}


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring (module, class, function) in ``source``."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield first.lineno, first.value.value


def findings(files: Iterable[Path], ids: set[str]) -> list[str]:
    """``path:line: what`` for every comment or docstring naming a task id (as spelled in the task tree, whole words:
    a model's published name, e.g. a paper's title, is not a task id) or quoting a measured score as a share of the
    oracle (SCORE)."""
    names = re.compile(
        r"(?<![\w.-])(" + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r")(?![\w-])"
    )
    out = []
    for path in files:
        for line, text in sorted(prose(path.read_text(encoding="utf-8"))):
            for m in names.finditer(text):
                out.append(f"{path}:{line}: names the benchmark task {m.group(1)!r}")
            if SCORE.search(text):
                out.append(f"{path}:{line}: quotes a score as a share of the oracle")
    return out


def overlong(folder: Path, limit: int = MAX_LINES) -> list[str]:
    """``path: N lines`` for every module under ``folder`` longer than ``limit`` lines."""
    return [
        f"{p}: {n} lines"
        for p in sorted(folder.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit
    ]


def test_the_task_ids_are_read_from_the_task_tree() -> None:
    ids = task_ids(TASKS)
    assert ids, f"{TASKS}: no benchmark tasks found"
    assert all(f"{p.parent.name}/{p.stem}" in ids and p.parent.name in ids for p in TASKS.glob("*/*.yaml"))


def test_no_comment_or_docstring_under_bot_names_a_task_or_quotes_a_score() -> None:
    found = findings(sorted(BOT.rglob("*.py")), task_ids(TASKS))
    assert not found, "move the measurement into its lesson's evidence or docs/:\n" + "\n".join(found)


def test_no_agent_module_is_over_the_limit() -> None:
    assert not overlong(BOT / "agent"), overlong(BOT / "agent")


def test_the_checks_catch_planted_cases(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks" / "some-model-7b"
    tasks.mkdir(parents=True)
    (tasks / "h100x8.yaml").write_text("{}\n")
    ids = task_ids(tmp_path / "tasks")
    assert ids == {"some-model-7b/h100x8", "some-model-7b"}
    code = tmp_path / "planted.py"
    code.write_text(
        '"""Tuned on some-model-7b/h100x8."""\n\n'
        "X = 1  # at 0.4 the jump came late (73.5 -> 83.2 % of the oracle)\n\n\n"
        'def f() -> str:\n    """The target: at least 95 % of the oracle, reaching 95% of the oracle."""\n    return "some-model-7b"  # data, not prose: only the comment counts\n'
    )
    clean = tmp_path / "clean.py"
    clean.write_text(
        '"""A model id as data is fine."""\n\nMODEL = "some-model-7b"\nOTHER = "some-model-7b-chat"  # other-model\n'
    )
    found = findings([code, clean], ids)
    assert found == [
        f"{code}:1: names the benchmark task 'some-model-7b/h100x8'",
        f"{code}:3: quotes a score as a share of the oracle",
    ]
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "agent" / "ok.py").write_text("x = 1\n" * MAX_LINES)
    assert overlong(tmp_path / "agent") == [f"{tmp_path / 'agent' / 'big.py'}: {MAX_LINES + 1} lines"]
