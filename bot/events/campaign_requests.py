"""``issues`` opened/labeled with ``attune:campaign``: check the requester, validate the form, start the campaign.

Permission comes only from the collaborator-permission API (write/admin), never from ``author_association``. Every
answer is one marker comment (edited in place), so a re-delivered event posts nothing twice; a campaign whose state
is already stored on the issue is only reconciled (its first pending action re-executed idempotently).
"""

from __future__ import annotations

from typing import Any

from bot import campaign as cm
from bot.events.github_driver import GitHubDriver, Stored, load_state
from bot.events.request import RequestError, validate_request
from bot.forge.github import GitHubForge, GitHubForgeError

LABEL = "attune:campaign"
REFUSAL = (
    "Thank you for the request! Campaigns spend shared accelerator time, so only collaborators with write "
    "access to this repository can start one. A maintainer can re-open this request as their own."
)


def is_campaign_issue(payload: dict[str, Any]) -> bool:
    labels = (payload.get("issue") or {}).get("labels") or []
    return any(isinstance(lb, dict) and lb.get("name") == LABEL for lb in labels)


def handle(forge: GitHubForge, payload: dict[str, Any], **driver_kw: Any) -> str:
    """Handle one ``issues`` event; answers a one-line summary of what was done."""
    issue = payload["issue"]
    number, user = int(issue["number"]), str((issue.get("user") or {}).get("login", ""))
    if payload.get("action") not in ("opened", "labeled") or not is_campaign_issue(payload):
        return "ignored: not a campaign request"
    stored = load_state(forge, number)
    if stored is not None:  # re-delivered or re-labelled: reconcile only
        driver = GitHubDriver(forge=forge, stored=stored, **driver_kw)
        driver.loop(stored.campaign)
        return f"campaign {stored.campaign.id}: reconciled"
    if not forge.can_write(user):
        forge.upsert_comment(number, "refusal", f"@{user} {REFUSAL}" if user else REFUSAL)
        return f"refused: {user or 'unknown user'} has no write permission"
    req = validate_request(issue.get("body"))
    if isinstance(req, RequestError):
        forge.upsert_comment(number, "request", req.message)
        return "request invalid: " + "; ".join(req.problems)
    from bot.local_campaign import new_state
    from bot.recipe import parse_recipe_text

    try:
        recipe = parse_recipe_text(forge.read_file(req.recipe), req.recipe)
    except (GitHubForgeError, ValueError) as exc:
        forge.upsert_comment(number, "request", f"This campaign request cannot start yet: {exc}")
        return f"request invalid: {exc}"
    cid = f"{recipe.name.replace('/', '-')}-i{number}"
    # self-hosted GPU runners: a trial below the incumbent by twice the noise band stops early (its bound and the
    # budget cap travel in trial.yml's limits input; twice, because a runner from the label pool may be slower than
    # the one that measured the incumbent); every gain is still re-measured before it is merged
    state = new_state(recipe, req.recipe, budget=req.budget_hours, policy=req.policy, campaign_id=cid, early_stop=True,
                      early_stop_k=2.0)
    driver = GitHubDriver(forge=forge, stored=Stored(issue=number, runner_labels=req.runner_labels, campaign=state), **driver_kw)
    state = driver.advance(cm.CampaignRequested())
    driver.loop(state)
    return f"campaign {cid}: started"
