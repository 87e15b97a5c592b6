"""bot/runner/debug_assets.py: the offline tokenizer and ``c4_test`` data of torchtitan's debug configs.

In-process: the files are made where torchtitan's own config names them, torchtitan's own tokenizer and dataset
classes read them, every id fits the model's vocabulary, nothing existing is overwritten, bad paths are one-line
errors. One real ``torchrun … -m torchtitan.train`` of torchtitan's stock ``llama3_debugmodel`` trains on them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.runner.debug_assets import (
    BOS,
    EOS,
    DebugAssetError,
    dataset_text,
    ensure_debug_assets,
    make_debug_assets,
    plan_from_config,
    tokenizer_files,
)


@pytest.fixture(scope="module")
def llama3_debug_config():
    """torchtitan's own ``llama3_debugmodel`` config object, unmodified."""
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    return llama3_debugmodel()


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the datasets library's Arrow cache of a test inside its tmp folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def test_made_where_the_stock_config_names_them_and_torchtitan_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hf_cache: None, llama3_debug_config
) -> None:
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset

    plan = plan_from_config(llama3_debug_config)
    assert plan.tokenizer_path == "./tests/assets/tokenizer" and plan.dataset_paths == ("tests/assets/c4_test",)
    made = ensure_debug_assets(tmp_path, llama3_debug_config)
    assert made == [
        tmp_path / "tests/assets/tokenizer/tokenizer.json",
        tmp_path / "tests/assets/tokenizer/tokenizer_config.json",
        tmp_path / "tests/assets/c4_test/data.json",
    ]
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temporary file left behind

    monkeypatch.chdir(tmp_path)  # torchtitan reads both paths relative to the working directory
    tok = HuggingFaceTokenizer(tokenizer_path=llama3_debug_config.hf_assets_path)
    assert (tok.bos_token, tok.eos_token) == (BOS, EOS) and tok.bos_id is not None and tok.eos_id is not None
    ids = tok.encode("Ada sells bread at the market.", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and tok.decode(ids[1:-1]) == "Ada sells bread at the market."
    ds = HuggingFaceTextDataset(llama3_debug_config.dataloader.dataset, None, tok, seq_len=512)
    batch, labels = next(iter(ds))
    assert batch["input"].shape == labels.shape == (512,)
    assert int(batch["input"][0]) == tok.bos_id and int(batch["input"].max()) < plan.vocab_size
    # next-token labels within each document; a document's last label is EOS, then the next one starts with BOS
    shifted, ends = batch["input"][1:] == labels[:-1], labels[:-1] == tok.eos_id
    assert bool((shifted | ends).all()) and int(ends.sum()) >= 1


def test_every_id_is_inside_the_models_vocabulary(llama3_debug_config) -> None:
    from tokenizers import Tokenizer

    vocab = plan_from_config(llama3_debug_config).vocab_size
    assert vocab == 2048  # torchtitan's debug model
    docs = [json.loads(line)["text"] for line in dataset_text().splitlines()]
    assert 300 <= len(docs) <= 1000
    for limit in (vocab, 300):  # a model with a smaller vocabulary gets a smaller tokenizer
        tok = Tokenizer.from_str(tokenizer_files(limit)["tokenizer.json"])
        assert tok.get_vocab_size() <= limit
        assert max(max(e.ids) for e in tok.encode_batch(docs + ["Unseen: ünïcode, 🙂 and tabs\t!"])) < limit


def test_deterministic() -> None:
    assert tokenizer_files() == tokenizer_files()
    assert dataset_text() == dataset_text()


def test_existing_files_are_left_alone(tmp_path: Path) -> None:
    tok_dir = tmp_path / "tests/assets/tokenizer"
    tok_dir.mkdir(parents=True)
    (tok_dir / "tokenizer.json").write_text("the user's own")
    data_dir = tmp_path / "data/mine"
    data_dir.mkdir(parents=True)
    (data_dir / "part-0.json").write_text('{"text": "mine"}\n')
    assert make_debug_assets(tmp_path, dataset_paths=["data/mine"]) == []
    assert (tok_dir / "tokenizer.json").read_text() == "the user's own"
    assert not (tok_dir / "tokenizer_config.json").exists()  # no config grafted onto someone else's tokenizer
    assert sorted(p.name for p in data_dir.iterdir()) == ["part-0.json"]
    # only what is missing is made; a second call makes nothing
    made = make_debug_assets(tmp_path)
    assert made == [tmp_path / "tests/assets/c4_test/data.json"]
    assert make_debug_assets(tmp_path) == []


def test_flat_config_with_validator_and_other_datasets(tmp_path: Path) -> None:
    flat = {
        "hf_assets_path": "tok",
        "model_spec.model.vocab_size": 512,
        "dataloader.dataset": "C4_TEST",
        "dataloader.dataset_path": "d/train",
        "validator.enable": True,
        "validator.dataloader.dataset": "c4_test",
        "validator.dataloader.dataset_path": None,
    }
    plan = plan_from_config(flat)
    assert plan.dataset_paths == ("d/train", "tests/assets/c4_test") and plan.vocab_size == 512
    made = ensure_debug_assets(tmp_path, flat)
    assert {p.relative_to(tmp_path).as_posix() for p in made} == {
        "tok/tokenizer.json",
        "tok/tokenizer_config.json",
        "d/train/data.json",
        "tests/assets/c4_test/data.json",
    }
    assert json.loads((tmp_path / "tok/tokenizer.json").read_text())["model"]["type"] == "BPE"
    # a Hub dataset (c4) is not ours to make; a disabled validator's dataset is not read
    hub = {**flat, "dataloader.dataset": "c4", "validator.enable": False}
    assert plan_from_config(hub).dataset_paths == ()


@pytest.mark.parametrize(
    ("setup", "kwargs", "message"),
    [
        ("file:tok", {"tokenizer_path": "tok"}, "hf_assets_path 'tok': "),
        ("file:a", {"tokenizer_path": "a/b/tok"}, "is a file, expected a folder"),
        ("", {"tokenizer_path": "/elsewhere/tok"}, "outside the repository root"),
        ("", {"tokenizer_path": "../tok"}, "outside the repository root"),
        ("", {"dataset_paths": ["../../data"]}, "dataloader.dataset_path '../../data': outside the repository root"),
        ("", {"vocab_size": 100}, "vocab_size: expected an integer >= 258"),
    ],
)
def test_bad_paths_are_one_line_errors_and_write_nothing(
    tmp_path: Path, setup: str, kwargs: dict, message: str
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    if setup.startswith("file:"):
        (root / setup[5:]).write_text("x")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(DebugAssetError) as err:
        make_debug_assets(root, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_bad_root_and_config(tmp_path: Path) -> None:
    with pytest.raises(DebugAssetError, match="repository root .*missing: not a directory"):
        make_debug_assets(tmp_path / "missing")
    with pytest.raises(DebugAssetError, match="config: field model_spec.model.vocab_size missing"):
        plan_from_config({"hf_assets_path": "tok"})
    with pytest.raises(DebugAssetError, match="config: hf_assets_path: expected a folder path, got ''"):
        plan_from_config({"hf_assets_path": "", "model_spec.model.vocab_size": 2048})
    with pytest.raises(
        DebugAssetError, match="config: expected a resolved torchtitan config or its flat dict, got int"
    ):
        plan_from_config(3)
