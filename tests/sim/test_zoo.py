"""Model zoo: required ids, cited sources, parameter counts against published totals."""

import pytest

from bot.sim.flops import active_params, total_params
from bot.sim.zoo import ZOO, ModelSpec, get_model

REQUIRED = [
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "mixtral-8x22b",
    "glm-4.5",
    "minimax-m2",
    "deepseek-v3",
    "qwen3-30b-a3b",
]


@pytest.mark.parametrize("model_id", REQUIRED)
def test_required_models_are_cited_pydantic_records(model_id):
    m = get_model(model_id)
    assert isinstance(m, ModelSpec)
    assert m.id == model_id
    assert m.source.startswith("https://")


def test_unknown_model_error_lists_known_ids():
    with pytest.raises(KeyError, match="llama3.1-8b"):
        get_model("gpt-5")


def test_llama_8b_parameter_count_by_hand():
    # h=4096, 32 layers, 32 heads x 128, 8 KV heads, FFN 14336, vocab 128256, untied embeddings.
    attn = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096  # q, k, v, o
    ffn = 3 * 4096 * 14336
    norms = 2 * 4096
    expected = 32 * (attn + ffn + norms) + 2 * 128256 * 4096 + 4096
    assert total_params(get_model("llama3.1-8b")) == expected
    assert expected == pytest.approx(8.03e9, rel=0.002)


# Published totals / actives (docs/reference/performance-model.md §2.3, model cards): (total, active) in billions.
PUBLISHED = {
    "llama3.1-70b": (70.6, 70.6),
    "llama3.1-405b": (405.9, 405.9),
    "mixtral-8x22b": (140.6, 39.2),
    "glm-4.5": (352.8, 33.6),  # without the MTP layer
    "minimax-m2": (228.7, 11.0),  # without MTP modules
    "deepseek-v3": (671.0, 37.5),  # without MTP
    "qwen3-30b-a3b": (30.5, 3.35),
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_parameter_counts_match_published(model_id):
    total, active = PUBLISHED[model_id]
    m = ZOO[model_id]
    assert total_params(m) / 1e9 == pytest.approx(total, rel=0.01)
    assert active_params(m) / 1e9 == pytest.approx(active, rel=0.01)
