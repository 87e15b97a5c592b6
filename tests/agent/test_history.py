"""bot/agent/history.py: reading what a campaign's steps have shown (here: the enabler chains' reasons)."""

from __future__ import annotations

from campaign_fakes import new_state, recipe_text

from bot import campaign as cm
from bot.agent.history import ENABLER, chain_root, enabled_why, link_reason
from bot.core.records import Change

ROOT_REASON = "the analytic cost model predicts the layout TP 4 -> 2, CP 2 -> 4, PP 1 -> 8 16% faster"
LINKS = [
    ("training.disable_cuda_graphs", False, True),
    ("parallelism.tensor_parallel_degree", 4, 2),
    ("parallelism.context_parallel_degree", 2, 4),
    ("parallelism.pipeline_parallel_degree", 1, 8),
]


def _chain() -> tuple[cm.Campaign, list[str]]:
    """A campaign whose steps are the links of one enabler chain, each link's why written as the policy writes it."""
    state = new_state(recipe_text())
    steps: list[cm.Step] = []
    whys = []
    for n, (lever, before, after) in enumerate(LINKS, start=1):
        rest = ", then ".join(f"{lv}={a}" for lv, _, a in LINKS[n:]) or "training.local_batch_size=64"
        reason = ROOT_REASON if n == 1 else enabled_why(state.model_copy(update={"steps": steps}), steps[-1])
        why = f"enabler of {rest}: {reason}"
        assert ENABLER.match(why)
        steps.append(
            cm.Step(
                n=n,
                change=Change(lever=lever, before=before, after=after, why=why, enabler=True, stacked_on=n - 1 or None),
                stacked_on=n - 1 or None,
                state="closed",
            )
        )
        whys.append(why)
    return state.model_copy(update={"steps": steps}), whys


def test_a_chain_link_names_the_step_before_it_and_the_reason_the_chain_began_once() -> None:
    state, whys = _chain()
    last = state.steps[-1]
    assert chain_root(state, last).n == 1 and chain_root(state, state.steps[0]).n == 1
    why = enabled_why(state, last)
    assert why.startswith(
        "the change step 4 enabled (parallelism.pipeline_parallel_degree: 1 -> 8), a link of the chain step 1 began"
    )
    assert why.count(ROOT_REASON) == 1
    # the first link quotes the root's reason itself; every later link the same way, so their length does not grow
    assert (
        enabled_why(state, state.steps[0])
        == f"the change step 1 enabled (training.disable_cuda_graphs: False -> True: {ROOT_REASON})"
    )
    lengths = [len(link_reason(s)) for s in state.steps[2:]]
    assert max(lengths) - min(lengths) < 40, whys  # only the link's own lever and values differ


def test_a_link_whose_step_is_gone_is_its_own_root() -> None:
    state, _ = _chain()
    orphan = state.model_copy(update={"steps": state.steps[2:]})  # steps 1 and 2 are not in this campaign
    assert chain_root(orphan, orphan.steps[0]).n == 3
