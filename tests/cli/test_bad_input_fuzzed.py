"""Bad input, everywhere, fuzzed: structure-aware mutations of valid files and arguments fed to every entry point.

Whatever the mutation, an entry point either accepts the input or answers one error line that names the file (and,
where there is one, the field), exits 2 and writes nothing — never a traceback. In process, bounded examples.
"""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.cli import main

ROOT = Path(__file__).resolve().parents[2]
SIM_RECIPE = ROOT / "bot" / "bench" / "tasks" / "llama3.1-405b" / "h200x128.yaml"
LESSON_FILE = ROOT / "bot" / "agent" / "lessons_catalog" / "memory.yaml"  # the packaged catalog
RULE_FILE = ROOT / "gate" / "rules" / "defects.yaml"
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

JUNK = st.sampled_from(
    [
        "",
        "x",
        "-1",
        "1e999",
        "[",
        "]",
        "{",
        "}",
        ":",
        "- ",
        "\t",
        "null",
        "true",
        "'",
        '"',
        "&a",
        "*a",
        "!!python/object:os.system",
        "\u00e9",
        "0x10",
        "999999999999999999999",
        "nan",
        "---",
        "...",
    ]
)


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """A text made from ``text`` by a few line-level edits: delete, duplicate, swap, truncate, replace a value,
    insert junk, break the indentation."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "value", "junk", "indent"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "truncate":
            lines = lines[:i]
        elif op == "value" and ":" in lines[i]:
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {draw(JUNK)}"
        elif op == "junk":
            lines.insert(i, draw(JUNK))
        else:
            lines[i] = draw(st.sampled_from(["", " ", "   ", "\t"])) + lines[i].lstrip()
    return "\n".join(lines) + "\n"


def run_cli(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def assert_one_clear_line(rc: int, err: str, names: str) -> None:
    assert "Traceback" not in err
    if rc == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert names in lines[0], lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "recipes" / "x").mkdir(parents=True)
    shutil.copytree(LESSON_FILE.parent, root / "lessons")  # the repository's own lessons/, read over the catalog
    return root


@FUZZ
@given(
    text=mutated(SIM_RECIPE.read_text()),
    lever=st.sampled_from(["training.local_batch_size", "activation_checkpoint", "nope"]),
    value=JUNK | st.sampled_from(["2", "none", "full", "8"]),
)
def test_a_mutated_recipe_is_refused_in_one_line_and_left_as_it_was(
    repo: Path, monkeypatch, text: str, lever: str, value: str
) -> None:
    path = repo / "recipes" / "x" / "sim.yaml"
    path.write_text(text)
    for argv in (["recipe", "show", str(path)], ["recipe", "set", "--", str(path), lever, value]):
        before = snapshot(repo)
        rc, _, err = run_cli(argv, repo, monkeypatch)
        assert_one_clear_line(rc, err, str(path) if rc == 2 and "no such" not in err else "")
        if rc != 0:
            assert snapshot(repo) == before  # a refused input changes nothing


@FUZZ
@given(text=mutated(LESSON_FILE.read_text()))
def test_a_mutated_lessons_file_is_named_in_one_line(repo: Path, monkeypatch, text: str) -> None:
    target = repo / "lessons" / LESSON_FILE.name
    target.write_text(text)
    rc, out, err = run_cli(["lessons", "list"], repo, monkeypatch)
    assert rc in (0, 2)
    assert_one_clear_line(rc, err, LESSON_FILE.name)


@FUZZ
@given(text=mutated(RULE_FILE.read_text()))
def test_a_mutated_rule_file_is_one_error_naming_file_and_line(tmp_path_factory, text: str) -> None:
    from bot.core.datafile import DataFileError
    from gate.rules import load_defects

    path = tmp_path_factory.mktemp("rules") / "defects.yaml"
    path.write_text(text)
    try:
        load_defects(path)
    except DataFileError as exc:
        message = str(exc)
        assert message.startswith(str(path)) and "\n" not in message.strip()


SECTIONS = ["Recipe path", "Budget (device-hours)", "Policy", "Runner labels", "Bench steps"]


@FUZZ
@given(
    body=st.lists(st.tuples(st.sampled_from(SECTIONS + ["Other"]), JUNK | st.text(max_size=40)), max_size=7).map(
        lambda parts: "\n\n".join(f"### {h}\n\n{v}" for h, v in parts)
    )
    | st.text(max_size=200)
)
def test_any_issue_form_body_is_a_request_or_a_list_of_problems(body: str) -> None:
    from bot.github.request import CampaignRequest, RequestError, validate_request

    answer = validate_request(body)
    assert isinstance(answer, CampaignRequest | RequestError)
    if isinstance(answer, RequestError):
        assert answer.problems and all(isinstance(p, str) and p for p in answer.problems)


PAYLOAD = {
    "action": "opened",
    "issue": {
        "number": 1,
        "title": "t",
        "body": "b",
        "user": {"login": "alice"},
        "labels": [{"name": "attune:campaign"}],
    },
    "comment": {"id": 5, "body": "/attune stop", "user": {"login": "alice"}},
}


@st.composite
def broken_payload(draw: st.DrawFn) -> object:
    data = json.loads(json.dumps(PAYLOAD))
    where = draw(
        st.sampled_from(
            [("issue",), ("issue", "number"), ("issue", "user"), ("comment",), ("comment", "id"), ("action",)]
        )
    )
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = draw(st.sampled_from([None, "x", [], {}, -1, 1.5, True]))
    return draw(st.sampled_from([data, [data], "text", 3]))


@FUZZ
@given(payload=broken_payload(), event=st.sampled_from(["issues", "issue_comment", "workflow_dispatch", "push"]))
def test_a_malformed_webhook_payload_is_one_line_exit_2(
    tmp_path_factory, monkeypatch, payload: object, event: str
) -> None:
    folder = tmp_path_factory.mktemp("event")
    path = folder / "event.json"
    path.write_text(json.dumps(payload))
    for key in ("GITHUB_REPOSITORY", "GITHUB_TOKEN", "ATTUNE_GITHUB_TOKEN"):
        monkeypatch.delenv(key, raising=False)  # nothing may reach the network either way
    rc, _, err = run_cli(["github", "handle", "--event-name", event, "--event-path", str(path)], folder, monkeypatch)
    assert rc == 2 and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


ARGS = st.lists(
    JUNK | st.sampled_from(["--budget", "--steps", "--json", "--policy", "--seeds", "--jobs", "-5", "0", "abc"]),
    max_size=4,
)


@FUZZ
@given(
    command=st.sampled_from(
        [
            ["run"],
            ["campaign", "run"],
            ["campaign", "show"],
            ["gate"],
            ["recipe", "set"],
            ["bench", "tuners"],
            ["lessons", "show"],
            ["github", "check-trial"],
        ]
    ),
    rest=ARGS,
)
def test_random_arguments_never_raise(repo: Path, monkeypatch, command: list[str], rest: list[str]) -> None:
    if command[0] in ("run", "campaign", "bench") and not any(a.startswith("--") for a in rest):
        rest = (
            [*rest, "--budget", "-1"] if command[0] == "campaign" else [*rest, "--steps", "1"]
        )  # nothing may really run
    if command == ["bench", "tuners"]:
        rest = [*rest, "--recipe", "missing.yaml"]
    rc, _, err = run_cli([*command, *rest], repo, monkeypatch)
    assert rc in (0, 1, 2, 3) and "Traceback" not in err
