"""The campaign issue form offers every registered policy, and the request check accepts each one it offers.

A newly registered policy (``bot.agent.POLICIES``) fails here until the form lists it and
``bot.github.request.Policy`` accepts it, in the registry's order.
"""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from bot.agent import POLICIES as REGISTERED
from bot.github.request import POLICIES as ACCEPTED
from bot.github.request import CampaignRequest, validate_request

FORM = Path(__file__).resolve().parents[2] / ".github" / "ISSUE_TEMPLATE" / "campaign.yml"


def form_options() -> list[str]:
    form = YAML(typ="safe").load(FORM.read_text())
    (policy,) = [item for item in form["body"] if item.get("id") == "policy"]
    return [str(option) for option in policy["attributes"]["options"]]


def test_the_form_offers_every_registered_policy_in_the_registry_order() -> None:
    options = form_options()
    missing, unknown = sorted(set(REGISTERED) - set(options)), sorted(set(options) - set(REGISTERED))
    assert not missing and not unknown, f"{FORM.name}: policy options lack {missing}, name unregistered {unknown}"
    assert options == list(REGISTERED)
    assert options[0] == "heuristic"  # the form's default (default: 0) is the default policy


def test_every_option_the_form_offers_is_a_request_the_bot_accepts() -> None:
    assert list(ACCEPTED) == list(REGISTERED)
    for policy in form_options():
        body = (
            f"### Recipe path\n\nrecipes/llama3_8b/h100x8.yaml\n\n### Budget (device-hours)\n\n8\n\n### Policy\n\n{policy}\n\n"
            "### Runner labels\n\ngpu\n\n### Bench steps\n\n_No response_"
        )
        request = validate_request(body)
        assert isinstance(request, CampaignRequest) and request.policy == policy, request
