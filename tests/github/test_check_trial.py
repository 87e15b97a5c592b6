"""bot/github/check_trial.py: a step's recipe may change catalog levers only — never the workload, the objective, the
cluster, the bench or the environment (what a self-hosted runner would otherwise execute on a pull request's say)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.recipe import RecipeError, parse_recipe_text, set_lever_text
from bot.github.check_trial import recipe_change_problem

ROOT = Path(__file__).resolve().parents[2]
PATH = "recipes/llama3-tiny/cpu.yaml"
BASE = (ROOT / PATH).read_text()


def test_one_catalog_lever_changed_may_run() -> None:
    head = set_lever_text(BASE, "training.local_batch_size", 2, source=PATH)
    assert recipe_change_problem(BASE, head, PATH) is None
    assert recipe_change_problem(BASE, head, PATH, {"training.local_batch_size"}) is None


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace("module: bot.inrank.workloads.llama3_tiny", "module: evil.payload"), "workload differs"),
        (lambda t: t.replace('GOMP_SPINCOUNT: "10000"', 'GOMP_SPINCOUNT: "1"'), "env differs"),
        (lambda t: t.replace("OMP_NUM_THREADS:", "LD_PRELOAD: /tmp/x.so\n  OMP_NUM_THREADS:"), "LD_PRELOAD"),
        (lambda t: t, "no lever differs"),
    ],
    ids=["workload", "env-value", "env-preload", "nothing"],
)
def test_anything_but_a_lever_is_refused(edit, why) -> None:
    problem = recipe_change_problem(BASE, edit(BASE), PATH)
    assert problem is not None and why in problem


def test_a_lever_the_campaign_did_not_propose_is_refused() -> None:
    head = set_lever_text(BASE, "training.local_batch_size", 2, source=PATH)
    problem = recipe_change_problem(BASE, head, PATH, {"activation_checkpoint"})
    assert problem is not None and "not the levers of this step" in problem


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "PYTHONPATH",
        "PATH",
        "BASH_ENV",
        "PYTHONSTARTUP",
        "omp_num_threads",
        # inside the allowed prefixes, but they load code or write files
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "OMP_TOOL_LIBRARIES",
        "TORCHINDUCTOR_CACHE_DIR",
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
        "TORCHINDUCTOR_REDIS_HOST",
        "NCCL_DEBUG_FILE",
        "TORCH_LOGS_OUT",
    ],
)
def test_a_recipe_cannot_set_a_variable_that_changes_what_code_runs(name: str) -> None:
    text = BASE.replace("OMP_NUM_THREADS:", f"{name}: x\n  OMP_NUM_THREADS:")
    with pytest.raises(RecipeError, match=f"{name}: not an allowed variable"):
        parse_recipe_text(text, PATH)


def test_check_trial_refuses_a_step_branch_whose_recipe_was_edited_beyond_its_lever(contract) -> None:
    from fake_github import FakeGitHub
    from forge_helpers import TOKEN

    from bot.forge.base import StepRequest
    from bot.forge.github import GitHubForge
    from bot.github.check_trial import check_trial

    gh = FakeGitHub(contract).start()
    try:
        gh.seed({PATH: BASE})
        forge = GitHubForge(
            gh.full_name,
            TOKEN,
            seconds_between_requests=None,
            seconds_between_writes=None,
            retry=None,
            bot_login=gh.actor,
        )
        ref = forge.open_step(
            StepRequest(
                campaign="c1",
                n=1,
                recipe_path=PATH,
                lever="training.local_batch_size",
                value="2",
                title="attune step 1",
                body="step",
            )
        )
        lines, reason = check_trial(forge, pr=ref.number, sha=ref.head_sha, campaign="c1", runner_labels='["gpu"]')
        assert reason == "ok" and "ok=true" in lines
        pushed = gh.seed(
            {PATH: gh.file(PATH, ref.branch).replace('GOMP_SPINCOUNT: "10000"', 'GOMP_SPINCOUNT: "1"')},
            "a person's edit",
            branch=ref.branch,
        )
        lines, reason = check_trial(forge, pr=ref.number, sha=pushed, campaign="c1", runner_labels='["gpu"]')
        assert "ok=false" in lines and "env differs" in reason
    finally:
        gh.stop()
    gh.assert_contract_kept()


def test_check_trial_for_a_pair_names_the_default_branch_head_and_the_order(contract) -> None:
    """A pair runs the step's head and the incumbent (the default branch head now) in one job: check emits that head
    as ``base_sha`` with the order, and refuses an order that is not AB or BA, or an early-stop bound (pairs run out)."""
    from fake_github import FakeGitHub
    from forge_helpers import TOKEN

    from bot.forge.base import StepRequest
    from bot.forge.github import GitHubForge
    from bot.github.check_trial import check_trial

    gh = FakeGitHub(contract).start()
    try:
        gh.seed({PATH: BASE})
        forge = GitHubForge(
            gh.full_name,
            TOKEN,
            seconds_between_requests=None,
            seconds_between_writes=None,
            retry=None,
            bot_login=gh.actor,
        )
        ref = forge.open_step(
            StepRequest(
                campaign="c1",
                n=1,
                recipe_path=PATH,
                lever="training.local_batch_size",
                value="2",
                title="attune step 1",
                body="step",
            )
        )
        lines, reason = check_trial(
            forge, pr=ref.number, sha=ref.head_sha, campaign="c1", kind="pair", order="BA", runner_labels='["gpu"]'
        )
        out = dict(line.split("=", 1) for line in lines)
        assert reason == "ok" and out["ok"] == "true" and out["kind"] == "pair"
        assert out["base_sha"] == gh.head("main") != ref.head_sha and out["order"] == "BA"
        lines, reason = check_trial(
            forge, pr=ref.number, sha=ref.head_sha, campaign="c1", kind="pair", order="AA", runner_labels='["gpu"]'
        )
        assert "ok=false" in lines and "order 'AA'" in reason and "base_sha=" in lines
        lines, reason = check_trial(
            forge,
            pr=ref.number,
            sha=ref.head_sha,
            campaign="c1",
            kind="pair",
            order="AB",
            runner_labels='["gpu"]',
            limits='{"stop_below_tps": 10}',
        )
        assert "ok=false" in lines and "only a trial may stop early" in reason
        lines, reason = check_trial(
            forge,
            pr=0,
            sha=gh.head("main"),
            campaign="c1",
            kind="pair",
            order="AB",
            recipe=PATH,
            runner_labels='["gpu"]',
        )
        assert "ok=false" in lines and "needs a step PR" in reason
    finally:
        gh.stop()
    gh.assert_contract_kept()


class UntouchedForge:
    """A forge a refused check may not ask anything."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"check_trial asked the forge for {name}")


@pytest.mark.parametrize("issue", ["²", "٣", "1²", "-1", ""])
def test_an_issue_that_is_no_plain_number_refuses_a_step_run_before_any_look_up(issue: str) -> None:
    from bot.github.check_trial import check_trial

    lines, reason = check_trial(
        UntouchedForge(), pr=5, sha="a" * 40, campaign="c1", kind="trial", runner_labels='["gpu"]', issue=issue
    )
    assert "ok=false" in lines and reason == f"issue {issue!r}: expected the campaign issue's number"


def _step_forge(gh):  # type: ignore[no-untyped-def]
    from forge_helpers import TOKEN

    from bot.forge.base import StepRequest
    from bot.forge.github import GitHubForge

    gh.seed({PATH: BASE, "bot/github/router.py": "# the router\n"})
    forge = GitHubForge(
        gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None, bot_login=gh.actor
    )
    ref = forge.open_step(
        StepRequest(
            campaign="c1",
            n=1,
            recipe_path=PATH,
            lever="training.local_batch_size",
            value="2",
            title="attune step 1",
            body="step",
        )
    )
    return forge, ref


def test_check_trial_refuses_a_step_branch_based_on_an_older_default_branch_whose_code_moved_on(contract) -> None:
    """Three dots list only the branch's side: a step branch cut before a code change on the default branch would run
    the older code. Results or recipes landing there in the meantime (another campaign's merge) do not refuse it."""
    from fake_github import FakeGitHub

    from bot.github.check_trial import check_trial

    gh = FakeGitHub(contract).start()
    try:
        forge, ref = _step_forge(gh)
        gh.seed({"results/other/record.json": "{}\n"}, "another campaign's record", by_bot=True)
        lines, reason = check_trial(forge, pr=ref.number, sha=ref.head_sha, campaign="c1", runner_labels='["gpu"]')
        assert reason == "ok" and "ok=true" in lines
        gh.seed({"bot/github/router.py": "# the router, fixed\n"}, "a fix on main")
        lines, reason = check_trial(forge, pr=ref.number, sha=ref.head_sha, campaign="c1", runner_labels='["gpu"]')
        assert "ok=false" in lines and "based on an older main" in reason and "bot/github/router.py" in reason, reason
    finally:
        gh.stop()
    gh.assert_contract_kept()


@pytest.mark.parametrize("to", ["campaigns/c1/notes.md", "results/c1/router.json"])
def test_check_trial_checks_a_rename_by_both_names(contract, to: str) -> None:
    """A code file renamed into a step's paths deletes that code from what runs; GitHub lists it under its new name."""
    from fake_github import FakeGitHub

    from bot.github.check_trial import check_trial

    gh = FakeGitHub(contract).start()
    try:
        forge, ref = _step_forge(gh)
        tree = dict(gh.commits[ref.head_sha].tree)
        tree[to] = tree.pop("bot/github/router.py")
        gh._commit(tree, [ref.head_sha], "a person's rename", branch=ref.branch)  # noqa: SLF001
        lines, reason = check_trial(
            forge, pr=ref.number, sha=gh.head(ref.branch), campaign="c1", runner_labels='["gpu"]'
        )
        assert "ok=false" in lines and "renames bot/github/router.py" in reason, reason
    finally:
        gh.stop()
    gh.assert_contract_kept()
