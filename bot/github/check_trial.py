"""``check-trial``: may a self-hosted runner execute this sha? (trial.yml's ``check`` job, on a hosted runner.)

A step run (trial, pair) needs the PR checks of ``GitHubForge.check_trial``; a pair also runs the incumbent, the
default branch's head (``base_sha``), whose recipe must be a recipe file there and whose order must be AB or BA; a run without a PR (baseline,
calibrate) needs ``sha`` to be the default branch head and ``recipe`` a recipe file there; a calibration also
needs the campaign's records branch (the recipe as the baseline ran it and the baseline record), whose head
becomes ``records_sha`` so the runner reads exactly what was checked. The ``limits`` input is checked here too:
nothing but its numbers reaches the runner. A step run is also refused when its branch renames a file out of (or a
recipe within) a step's paths, or is based on an older default branch whose code has changed since
(``step_base_problem``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from bot.drive.executor import BASELINE_RECIPE
from bot.forge.github import COMPARE_FILE_LIMIT, DATA_PATHS, DATA_SUFFIXES, GitHubForgeError
from bot.github.github_ports import records_branch
from bot.github.request import plain_digits, runs_on

KINDS = ("baseline", "trial", "pair", "calibrate")
_CAMPAIGN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_trial(
    forge: Any,
    *,
    pr: int,
    sha: str,
    campaign: str,
    kind: str = "",
    recipe: str = "",
    runner_labels: str = "",
    limits: str = "{}",
    issue: int | str | None = None,
    order: str = "",
) -> tuple[list[str], str]:
    """The ``$GITHUB_OUTPUT`` lines (ok, kind, recipe, runs_on, campaign, records_sha, max_wall_s, stop_below,
    base_sha and order (pairs), reason) and the one-line reason (``ok`` when the run may go ahead).

    ``issue`` (trial.yml passes its input as given): a step run may then change only the levers the campaign's
    state on that issue names; an issue that is not a number refuses a step run. None: no state is read."""
    kind = kind or ("baseline" if pr == 0 else "trial")
    records_sha = base_sha = ""
    check: dict[str, Any]
    try:
        labels = runs_on(runner_labels or "")
    except ValueError as exc:
        labels, check = [], {"ok": False, "recipe": "", "reason": str(exc)}
    else:
        if kind not in KINDS:
            check = {"ok": False, "recipe": "", "reason": f"kind {kind[:40]!r}: expected one of {', '.join(KINDS)}"}
        elif not _CAMPAIGN_ID.match(campaign):
            check = {
                "ok": False,
                "recipe": "",
                "reason": f"campaign {campaign[:40]!r}: expected letters, digits, . _ -",
            }
        elif (pr == 0) != (kind in ("baseline", "calibrate")):
            check = {"ok": False, "recipe": "", "reason": f"a {kind} run {'needs a' if pr == 0 else 'has no'} step PR"}
        elif pr == 0:
            tc = forge.check_default_run(sha, recipe or "")
            check = {"ok": tc.ok, "recipe": tc.recipe or "", "reason": tc.reason}
            if tc.ok and kind == "calibrate":
                records_sha = forge._branch_head(records_branch(campaign)) or ""  # noqa: SLF001
                problem = (
                    records_problem(forge, campaign, records_sha, tc.recipe or "", sha)
                    if records_sha
                    else f"no records branch {records_branch(campaign)}"
                )
                if problem:
                    check = {"ok": False, "recipe": "", "reason": problem}
        elif issue is not None and not plain_digits(str(issue)):
            check = {
                "ok": False,
                "recipe": "",
                "reason": f"issue {str(issue)[:20]!r}: expected the campaign issue's number",
            }
        else:
            tc = forge.check_trial(pr, sha)
            check = {"ok": tc.ok, "recipe": tc.recipe or "", "reason": tc.reason}
            problem = step_base_problem(forge, pr, sha) if tc.ok else None
            if problem:
                check = {"ok": False, "recipe": "", "reason": problem}
            elif tc.ok:  # the paths are a step's: now what the recipe says
                try:
                    allowed = allowed_levers(forge, int(issue) if issue is not None else None, campaign, pr)
                except GitHubForgeError as exc:  # the bot's login unknown: no state is trusted, so nothing may run
                    problem = f"the campaign state cannot be trusted: {exc}"
                else:
                    problem = recipe_change_problem(
                        forge.read_file(tc.recipe), forge.read_file(tc.recipe, sha), tc.recipe, allowed
                    )
                if problem:
                    check = {"ok": False, "recipe": "", "reason": problem}
            if check["ok"] and kind == "pair":  # the incumbent side: the default branch's head, as it is now
                base_sha = forge._branch_head(forge.base_branch) or ""  # noqa: SLF001
                bc = forge.check_default_run(base_sha, tc.recipe or "")
                if order not in ("AB", "BA"):
                    check = {
                        "ok": False,
                        "recipe": "",
                        "reason": f"order {order[:10]!r}: a pair runs in order AB or BA",
                    }
                elif not bc.ok:
                    check = {"ok": False, "recipe": "", "reason": f"the pair's incumbent: {bc.reason}"}
    limits_ok, problem = parse_limits(limits, kind)
    if problem and check["ok"]:
        check = {"ok": False, "recipe": "", "reason": problem}
    ok = bool(check["ok"])
    lines = [
        f"ok={'true' if ok else 'false'}",
        f"kind={kind if ok else ''}",
        f"recipe={check['recipe']}",
        f"runs_on={json.dumps(labels)}",
        f"campaign={campaign if ok else ''}",
        f"records_sha={records_sha}",
        f"max_wall_s={limits_ok.get('max_wall_s', '') if ok else ''}",
        f"stop_below={limits_ok.get('stop_below_tps', '') if ok else ''}",
        f"base_sha={base_sha if ok and kind == 'pair' else ''}",
        f"order={order if ok and kind == 'pair' else ''}",
    ]
    reason = check["reason"] or "ok"
    # the report job feeds a refusal back to the campaign with this reason: one line, printable, capped
    lines.append("reason=" + "".join(c if c.isprintable() else " " for c in reason)[:500])
    return lines, reason


def _compare(forge: Any, base: str, head: str) -> dict[str, Any]:
    """``GET /compare/{base}...{head}`` as GitHub sent it (files of ``head`` since the merge base, ``behind_by``)."""
    _, data = forge._repo._requester.requestJsonAndCheck(  # noqa: SLF001 - one call, the JSON as GitHub sent it
        "GET", f"{forge._repo.url}/compare/{base}...{head}"
    )  # noqa: SLF001
    return data or {}


def _step_file(forge: Any, name: str) -> bool:
    return name.startswith(tuple(forge.trial_paths)) or (name.startswith(DATA_PATHS) and name.endswith(DATA_SUFFIXES))


def step_base_problem(forge: Any, pr: int, sha: str) -> str | None:
    """Why step PR ``pr``'s head ``sha`` may not run although its own changes are a step's (None: it may).

    A rename is one entry of a compare, named by its new path with the old one as ``previous_filename``: both
    names must be a step's (a code file renamed into recipes/ deletes that code), and a recipe is never renamed.
    A branch based on an older default branch runs that older code (three dots list only the branch's side): when
    the default branch moved on, no file outside a step's paths may have changed there since the merge base. One
    compare, and one more (``sha...<default branch>``) only when the branch is behind."""
    base = forge.base_branch
    ahead = _compare(forge, base, sha)
    for entry in ahead.get("files") or []:
        old = entry.get("previous_filename")
        if old and (not _step_file(forge, old) or old.startswith("recipes/")):
            return f"PR #{pr} renames {old[:120]} to {str(entry.get('filename'))[:120]}; a step renames nothing"
    if not int(ahead.get("behind_by") or 0):
        return None
    behind = _compare(forge, sha, base)
    files = behind.get("files") or []
    code = sorted({f.get("previous_filename") or "" for f in files} | {str(f.get("filename")) for f in files})
    code = [name for name in code if name and not _step_file(forge, name)]
    if code or len(files) >= COMPARE_FILE_LIMIT:
        return (
            f"PR #{pr} is based on an older {base} ({ahead.get('behind_by')} commits behind) whose code differs "
            f"({', '.join(code[:3]) or 'too many files to list'}): it would run that older code"
        )
    return None


def records_problem(forge: Any, campaign: str, records_sha: str, recipe: str, sha: str) -> str | None:
    """Why a calibration may not read the records branch at ``records_sha`` (None: it may): its head, and every commit
    on it since the default branch, must be a commit the bot made (linked to the bot's login and signed by GitHub, as
    the API signs the bot's writes: a writer's push hidden under the bot's next commit is caught), and the recipe the
    baseline ran, kept there, must be the default branch's ``recipe`` at ``sha``."""
    branch = records_branch(campaign)
    login, verified = forge.commit_signer(records_sha)
    if not forge.bot_login or login != forge.bot_login or not verified:
        return (
            f"{branch} head {records_sha[:12]} is not the bot's commit (linked to {login or 'no account'}, "
            f"{'signature verified' if verified else 'unsigned'}; the bot is {forge.bot_login or 'unknown'})"
        )
    foreign = forge.foreign_commits(forge.base_branch, records_sha, require_descent=False)
    if foreign:
        return f"{branch} holds commits that are not the bot's own under its head: {'; '.join(foreign[:3])}"
    try:
        ran = forge.read_file(f"campaigns/{campaign}/{BASELINE_RECIPE}", records_sha)
    except GitHubForgeError:
        return f"{branch} has no campaigns/{campaign}/{BASELINE_RECIPE} (the recipe the baseline ran)"
    if ran != forge.read_file(recipe, sha):
        return f"{branch}: the recipe the baseline ran differs from {recipe} on the default branch"
    return None


OBJECTIVE_FIELDS = ("workload", "cluster", "pinned", "env", "bench")


def recipe_change_problem(base_text: str, head_text: str, path: str, allowed: set[str] | None = None) -> str | None:
    """Why the step's recipe may not run (None: it may): it must parse, keep the default branch's workload, cluster,
    objective, environment and bench as they are, and change only catalog levers — those of the step (and of the
    steps it stacks on) when the campaign state names them (``allowed``)."""
    from bot.core import levers as catalog
    from bot.core.recipe import RecipeError, parse_recipe_text

    try:
        base, head = parse_recipe_text(base_text, path), parse_recipe_text(head_text, path)
    except (RecipeError, ValueError) as exc:
        return f"{path} at the step's head: {str(exc).splitlines()[0][:300]}"
    for name in OBJECTIVE_FIELDS:
        if getattr(base, name) != getattr(head, name):
            return f"{path}: {name} differs from the default branch's copy (a step changes levers only)"
    changed = sorted(k for k in set(base.levers) | set(head.levers) if base.levers.get(k) != head.levers.get(k))
    if not changed:
        return f"{path}: no lever differs from the default branch's copy"
    unknown = [k for k in changed if k not in catalog.CATALOG]
    if unknown:
        return f"{path}: {unknown[0]} is not a catalog lever"
    if allowed is not None and set(changed) - allowed:
        return f"{path}: changes {sorted(set(changed) - allowed)}, not the levers of this step ({sorted(allowed)})"
    return None


def allowed_levers(forge: Any, issue: int | None, campaign: str, pr: int) -> set[str] | None:
    """The levers the campaign's state says step PR ``pr`` changes (its own and those of the steps it stacks on);
    None without an issue to read the state from."""
    if not issue:
        return None
    from bot.github.github_ports import load_state

    stored = load_state(forge, issue)
    if stored is None or stored.campaign.id != campaign:
        return set()  # no such campaign on that issue: nothing is allowed
    state = stored.campaign
    step = next((s for s in state.steps if s.number == pr), None)
    levers: set[str] = set()
    while step is not None:
        levers |= {step.change.lever, *step.change.extra}
        step = state.step(step.stacked_on) if step.stacked_on else None
    return levers


def parse_limits(text: str, kind: str) -> tuple[dict[str, float], str | None]:
    """trial.yml's ``limits`` input: a JSON object with optional positive numbers ``max_wall_s`` and (trials only)
    ``stop_below_tps``; anything else refuses the run, and nothing but these numbers reaches the runner."""
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        return {}, f"limits {text[:60]!r}: expected a JSON object"
    if not isinstance(raw, dict) or set(raw) - {"max_wall_s", "stop_below_tps"}:
        return {}, f"limits {text[:60]!r}: expected a JSON object with max_wall_s and/or stop_below_tps"
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12:
            return {}, f"limits.{key}: expected a positive number; got {str(value)[:40]!r}"
        out[key] = float(value)
    if "stop_below_tps" in out and kind != "trial":
        return {}, f"limits.stop_below_tps: only a trial may stop early, not a {kind} run"
    return out, None
