"""The zoo keeps published configs for the simulator's calibration; where torchtitan builds the same model here, the
hand-typed entry must agree with the facts derived from the built model (parameters within 1 %, same structure)."""

import pytest

from bot.facts import model_facts
from bot.facts.flops import total_params
from bot.sim.zoo import ZOO

# zoo id -> the torchtitan config that builds the same model
BUILDS = {
    "llama3.1-8b": ("torchtitan.models.llama3", "llama3_8b"),
    "llama3.1-70b": ("torchtitan.models.llama3", "llama3_70b"),
    "llama3.1-405b": ("torchtitan.models.llama3", "llama3_405b"),
    "qwen3-30b-a3b": ("torchtitan.models.qwen3", "qwen3_30b_a3b"),
    "deepseek-v3": ("torchtitan.models.deepseek_v3", "deepseek_v3_671b"),
    "llama3-tiny": ("bot.inrank.workloads.llama3_tiny", "llama3_tiny_cpu"),
    "moe-tiny": ("bot.inrank.workloads.moe_tiny", "moe_tiny_cpu"),
}
STRUCTURE = (
    "n_layers",
    "n_dense_layers",
    "hidden",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "vocab",
    "ffn_dense",
    "n_experts",
    "top_k",
    "ffn_expert",
    "attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


@pytest.mark.parametrize("model_id", sorted(BUILDS))
def test_zoo_entry_agrees_with_the_built_model(model_id):
    module, config = BUILDS[model_id]
    built = model_facts(module, config).spec
    typed = ZOO[model_id]
    assert total_params(typed) == pytest.approx(built.n_params, rel=0.01)
    assert {k: getattr(typed, k) for k in STRUCTURE} == {k: getattr(built, k) for k in STRUCTURE}


def test_every_zoo_entry_torchtitan_builds_is_checked():
    native = {m.id for m in ZOO.values() if m.torchtitan.startswith("native")}
    assert native <= set(BUILDS)
