"""The fake holds to GitHub's contract: bad requests are answered 422 and recorded, drifted responses are caught,
and the two documented allowances (bare label arrays, slashes in ``{ref}``/``{path}``) stay narrow."""

from __future__ import annotations

import time

import pytest
import requests
from forge_helpers import require

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402
from openapi_contract import SPEC_FILE, Contract, ContractViolation  # noqa: E402

API = "https://api.github.com/repos/acme/tuning"
HEADERS = {"Authorization": "token x", "Content-Type": "application/json"}


def post(path: str, body: object) -> requests.Response:
    return requests.post(API + path, json=body, headers=HEADERS, timeout=5)


def take_violations(fake: FakeGitHub) -> list[str]:
    """The recorded violations, cleared so the fixture's own check passes after a deliberate one."""
    found, fake.violations[:] = list(fake.violations), []
    return found


def test_a_request_outside_the_contract_is_answered_422_and_recorded(fake_github: FakeGitHub) -> None:
    issue = fake_github.add_issue("t", "b")
    answer = post(f"/issues/{issue}/comments", {"bdy": "typo"})

    assert answer.status_code == 422
    (violation,) = take_violations(fake_github)
    assert "issues/create-comment" in violation and "'body' is a required property" in violation
    assert fake_github.comments == {}  # the fake did not act on it


def test_an_invalid_enum_value_is_caught(fake_github: FakeGitHub) -> None:
    answer = post(f"/statuses/{fake_github.head('main')}", {"state": "green", "context": "attune/gate"})
    assert answer.status_code == 422
    assert "green" in take_violations(fake_github)[0]
    assert fake_github.statuses == []


def test_the_fixture_fails_a_test_that_swallowed_a_violation(github_contract: Contract) -> None:
    fake = FakeGitHub(github_contract).start()
    try:
        requests.patch(f"{API}/issues/comments/1", json={"body": 5}, headers=HEADERS, timeout=5)
    finally:
        fake.stop()
    with pytest.raises(ContractViolation, match="issues/update-comment"):
        fake.assert_contract_kept()


def test_bare_label_arrays_are_allowed_only_where_github_accepts_them(fake_github: FakeGitHub) -> None:
    issue = fake_github.add_issue("t", "b")
    assert post(f"/issues/{issue}/labels", ["attune", "attune:step"]).status_code == 200
    assert fake_github.issues[issue].labels == ["attune", "attune:step"]
    assert take_violations(fake_github) == []

    assert post(f"/issues/{issue}/labels", [1, 2]).status_code == 422
    assert post(f"/issues/{issue}/comments", ["not", "a", "comment"]).status_code == 422
    assert len(take_violations(fake_github)) == 2


def test_unknown_and_unimplemented_operations_are_violations(fake_github: FakeGitHub) -> None:
    assert requests.get("https://api.github.com/no/such/endpoint", headers=HEADERS, timeout=5).status_code == 404
    assert requests.delete(f"{API}/git/refs/heads/main", headers=HEADERS, timeout=5).status_code == 501
    found = take_violations(fake_github)
    assert "no GitHub REST operation" in found[0] and "does not implement git/delete-ref" in found[1]


def test_a_drifted_response_is_caught(fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    issue = fake_github.add_issue("t", "b")
    original = fake_github._comment_obj

    def drifted(comment):
        obj = original(comment)
        del obj["user"]  # the schema requires it
        return obj

    monkeypatch.setattr(fake_github, "_comment_obj", drifted)
    assert post(f"/issues/{issue}/comments", {"body": "hi"}).status_code == 500
    assert "drifted from the contract" in take_violations(fake_github)[0]


def test_error_answers_are_github_shaped(fake_github: FakeGitHub) -> None:
    main = fake_github.head("main")
    answer = post("/git/refs", {"ref": "refs/heads/main", "sha": main})
    assert answer.status_code == 422 and answer.json()["message"] == "Reference already exists"
    answer = post(f"/statuses/{'0' * 40}", {"state": "success"})  # undocumented 422, checked as basic-error
    assert answer.status_code == 422 and "No commit found" in answer.json()["message"]
    assert take_violations(fake_github) == []


def test_pagination_follows_link_headers(fake_github: FakeGitHub) -> None:
    issue = fake_github.add_issue("t", "b")
    for i in range(5):
        fake_github.add_comment(issue, f"c{i}")
    first = requests.get(f"{API}/issues/{issue}/comments?per_page=2", headers=HEADERS, timeout=5)
    assert [c["body"] for c in first.json()] == ["c0", "c1"]
    second = requests.get(first.links["next"]["url"], headers=HEADERS, timeout=5)
    assert [c["body"] for c in second.json()] == ["c2", "c3"]


def test_multi_segment_refs_and_paths_match_their_operation(github_contract: Contract) -> None:
    ref = github_contract.match("GET", "/repos/o/r/git/ref/heads/attune/c7/1-compile")
    assert ref is not None and ref.operation_id == "git/get-ref" and ref.params["ref"] == "heads/attune/c7/1-compile"
    encoded = github_contract.match("GET", "/repos/o/r/git/matching-refs/heads%2Fattune%2Fc7%2F1-")
    assert encoded is not None and encoded.params["ref"] == "heads/attune/c7/1-"
    content = github_contract.match("PUT", "/repos/o/r/contents/recipes/llama3/h100.yaml")
    assert content is not None and content.params["path"] == "recipes/llama3/h100.yaml"
    status = github_contract.match("GET", "/repos/o/r/commits/abc/status")
    assert status is not None and status.operation_id == "repos/get-combined-status-for-ref"
    assert github_contract.match("GET", "/repos/o/r/pulls/1").params["repo"] == "r"


def test_the_spec_loads_fast_without_validating_itself(github_contract: Contract) -> None:
    started = time.perf_counter()
    contract = Contract(SPEC_FILE)
    elapsed = time.perf_counter() - started
    assert contract.version == "23.0.2"  # package.json pins @octokit/openapi 23.0.2
    assert len(contract.routes) > 1000
    assert elapsed < 15, f"loading the contract took {elapsed:.1f}s"
