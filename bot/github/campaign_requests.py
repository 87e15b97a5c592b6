"""``issues`` opened/labeled with ``attune:campaign``: check the requester, validate the form, start the campaign.

Permission comes only from the collaborator-permission API (write/admin), never from ``author_association``, and is
checked before anything else (a stored campaign is reconciled only for a requester with write permission). Every
answer is one marker comment (edited in place), so a re-delivered event posts nothing twice; a campaign whose state
is already stored on the issue is only reconciled (its first pending action re-executed idempotently).
"""

from __future__ import annotations

from typing import Any

from bot import campaign as cm
from bot.campaign.measurement_settings import github_measurement_options
from bot.campaign.new_campaign import new_state
from bot.forge.github import GitHubForge, GitHubForgeError
from bot.github.github_ports import Stored, github_executor, load_state, settled
from bot.github.request import RequestError, validate_request

LABEL = "attune:campaign"
REFUSAL = (
    "Thank you for the request! Campaigns spend shared accelerator time, so only collaborators with write "
    "access to this repository can start one. A maintainer can re-open this request as their own."
)


def is_campaign_issue(payload: dict[str, Any]) -> bool:
    labels = (payload.get("issue") or {}).get("labels") or []
    return any(isinstance(lb, dict) and lb.get("name") == LABEL for lb in labels)


def handle(
    forge: GitHubForge, payload: dict[str, Any], *, measurement: dict[str, Any] | None = None, **driver_kw: Any
) -> str:
    """Handle one ``issues`` event; answers a one-line summary of what was done. ``measurement``: the campaign's
    measurement settings (``Campaign`` fields; default :func:`bot.campaign.measurement_settings.github_measurement_options`)."""
    issue = payload["issue"]
    number, user = int(issue["number"]), str((issue.get("user") or {}).get("login", ""))
    if payload.get("action") not in ("opened", "labeled") or not is_campaign_issue(payload):
        return "ignored: not a campaign request"
    if not forge.can_write(user):  # before anything else, the reconcile of a stored campaign included
        forge.upsert_comment(number, "refusal", f"@{user} {REFUSAL}" if user else REFUSAL)
        return f"refused: {user or 'unknown user'} has no write permission"

    def reconcile() -> str | None:
        stored = load_state(forge, number)
        if stored is None:
            return None
        executor, ports = github_executor(forge, stored, **driver_kw)
        executor.loop(stored.campaign)
        ports.settle()
        return f"campaign {stored.campaign.id}: reconciled"

    reconciled = settled(reconcile)  # re-delivered or re-labelled: reconcile only
    if reconciled is not None:
        return reconciled
    req = validate_request(issue.get("body"))
    if isinstance(req, RequestError):
        forge.upsert_comment(number, "request", req.message)
        return "request invalid: " + "; ".join(req.problems)
    from bot.core.recipe import parse_recipe_text

    try:
        recipe = parse_recipe_text(forge.read_file(req.recipe), req.recipe)
    except (GitHubForgeError, ValueError) as exc:
        forge.upsert_comment(number, "request", f"This campaign request cannot start yet: {exc}")
        return f"request invalid: {exc}"
    cid = f"{recipe.name.replace('/', '-')}-i{number}"
    # self-hosted GPU runners: see github_measurement_options (early stop below twice the band, every gain re-measured)
    state = new_state(
        recipe,
        req.recipe,
        budget=req.budget_hours,
        policy=req.policy,
        campaign_id=cid,
        **(github_measurement_options() if measurement is None else measurement),
    )
    executor, ports = github_executor(
        forge, Stored(issue=number, runner_labels=req.runner_labels, campaign=state), **driver_kw
    )
    executor.feed(state, cm.CampaignRequested())
    ports.settle()  # a second delivery racing this one loses here (its state.json create is refused) and reconciles
    return f"campaign {cid}: started"
