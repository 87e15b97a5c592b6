"""model_for: the built model first; the zoo only where torchtitan cannot build it, or for a flavour the recipe names."""

import json
import textwrap

import pytest

from bot.core.recipe import Workload
from bot.facts import FactsError, model_facts
from bot.facts.build import cache_dir
from bot.sim.models import UnknownModel, model_for


def test_a_torchtitan_config_the_zoo_does_not_know_is_built():
    spec = model_for(Workload(module="torchtitan.models.qwen3", config="qwen3_14b"))
    assert spec.id == "qwen3_14b"
    assert spec.n_layers == 40 and spec.n_kv_heads == 8 and not spec.is_moe
    assert spec.n_params == pytest.approx(14.8e9, rel=0.01)


def test_a_named_flavour_the_config_does_not_build_comes_from_the_zoo():
    spec = model_for(Workload(module="torchtitan.models.qwen3", config="qwen3_30b_a3b", model="qwen3-235b-a22b"))
    assert spec.id == "qwen3-235b-a22b" and spec.n_layers == 94


def test_a_named_model_that_matches_the_build_reads_the_build():
    spec = model_for(Workload(module="torchtitan.models.qwen3", config="qwen3_30b_a3b", model="qwen3-30b-a3b"))
    assert spec.id == "qwen3-30b-a3b" and spec.n_params > 0  # exact count: built, not typed


def test_unknown_everywhere_names_the_field():
    with pytest.raises(UnknownModel, match="workload.config"):
        model_for(Workload(module="torchtitan.models.qwen3", config="qwen3_nonexistent"))
    with pytest.raises(UnknownModel, match="workload.module"):
        model_for(Workload(module="nosuchpkg.models", config="x"))


def test_missing_package_blames_the_config_not_the_module(monkeypatch):
    from torchtitan.config import ConfigManager

    def fake(*_a, **_k):
        raise ImportError("torchao is not installed. Please install it to use float8 linear layers.")

    monkeypatch.setattr(ConfigManager, "parse_args", fake)
    with pytest.raises(FactsError, match="workload.config: needs a package"):
        model_facts("torchtitan.models.llama3", "llama3_405b")


def test_a_model_module_in_the_tuning_repository(tmp_path):
    # a package name of its own: a module once imported stays in sys.modules for the process, and
    # tests/runner/test_workdir.py imports a different mymods.tiny in the same worker
    (tmp_path / "factsmods").mkdir()
    (tmp_path / "factsmods" / "__init__.py").write_text("")
    (tmp_path / "factsmods" / "tiny.py").write_text(
        textwrap.dedent("""
        from bot.inrank.workloads.llama3_tiny import llama3_tiny_cpu as _base


        def tiny_wide():
            return _base()
    """)
    )
    spec = model_for(Workload(module="factsmods.tiny", config="tiny_wide"), root=tmp_path)
    assert spec.n_layers == 4 and spec.n_params == 799872


def test_facts_are_cached_on_disk_per_workload():
    first = model_facts("torchtitan.models.llama3", "llama3_debugmodel")
    files = list(cache_dir().glob("*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["spec"]["n_params"] == first.spec.n_params
    model_facts("torchtitan.models.llama3", "llama3_debugmodel", ["--training.seq-len", "512"])
    assert len(list(cache_dir().glob("*.json"))) == 2  # other overrides, other entry
    again = model_facts("torchtitan.models.llama3", "llama3_debugmodel")
    assert again == first


def test_facts_carry_flops_and_activation_memory_per_mode():
    f = model_facts("torchtitan.models.qwen3", "qwen3_moe_debug")
    assert f.spec.is_moe and f.spec.n_active_params < f.spec.n_params
    assert f.flops_bwd_per_token == pytest.approx(2 * f.flops_fwd_per_token)
    for kind in f.activation_bytes_per_token.values():
        assert kind["none"] > kind["selective"] > kind["full"] > 0


def test_a_registry_whose_imports_fail_names_the_missing_package(tmp_path):
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "__init__.py").write_text("")
    (tmp_path / "mymodels" / "config_registry.py").write_text(
        "import zz_not_installed_pkg  # noqa\n\n\ndef c():\n    pass\n"
    )
    with pytest.raises(
        UnknownModel, match="workload.config: needs a package that is not installed here: .*zz_not_installed_pkg"
    ):
        model_for(Workload(module="mymodels", config="c"), root=tmp_path)
