"""Offline stand-ins for the assets torchtitan's debug configs name: a tokenizer folder and a ``c4_test`` dataset.

torchtitan 0.3.0's debug configs (``llama3_debugmodel``, ``qwen3_moe_debug``, ``deepseek_v3_debugmodel``…) read a
HuggingFace tokenizer folder at ``hf_assets_path`` (``./tests/assets/tokenizer``) and the ``c4_test`` dataset, a
folder of JSON lines with a ``text`` field (``tests/assets/c4_test``), both relative to the working directory; the
files live in torchtitan's source repository, not in its wheel. :func:`ensure_debug_assets` makes what is missing,
with no network: a byte-level BPE tokenizer (the ``tokenizers`` package) trained on project-made text, and a few
hundred documents of that text. The text comes from a small seeded grammar, so it is the same on every machine and
a model learns it fast (the loss falls within a few steps). Existing files are never touched. See docs/debug-assets.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"  # the Llama 3 names torchtitan's own test tokenizer uses
C4_TEST = "c4_test"
C4_TEST_DEFAULT_PATH = "tests/assets/c4_test"  # torchtitan/hf_datasets/text_datasets.py, DATASETS["c4_test"].path
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "merges.txt")  # the loader's
MAX_VOCAB = 2048  # torchtitan's debug models embed 2,048 ids; a larger model gets no larger toy tokenizer
MIN_VOCAB = 256 + 2  # the byte alphabet and BOS/EOS
DOCUMENTS = 600
SEED = 20240611


class DebugAssetError(ValueError):
    """A debug asset cannot be made (one line: the path or field, and what was expected)."""


@dataclass(frozen=True)
class AssetPlan:
    """Where a config reads its assets: the tokenizer folder, the ``c4_test`` folders (none when the config reads
    another dataset) and the model's vocabulary size."""

    tokenizer_path: str
    dataset_paths: tuple[str, ...]
    vocab_size: int


def plan_from_config(config: Mapping[str, Any] | Any) -> AssetPlan:
    """The assets a resolved torchtitan config reads. ``config``: the flat dict of :func:`bot.runner.resolve
    .resolve_args` / ``resolve_recipe``, or torchtitan's ``Trainer.Config`` itself."""
    if not isinstance(config, Mapping):
        if not hasattr(config, "to_dict"):
            raise DebugAssetError(
                f"config: expected a resolved torchtitan config or its flat dict, got {type(config).__name__}"
            )
        from bot.runner.resolve import flatten

        config = flatten(config.to_dict())
    tokenizer = _field(config, "hf_assets_path")
    vocab = _field(config, "model_spec.model.vocab_size")
    if not isinstance(tokenizer, str) or not tokenizer:
        raise DebugAssetError(f"config: hf_assets_path: expected a folder path, got {tokenizer!r}")
    if isinstance(vocab, bool) or not isinstance(vocab, int):
        raise DebugAssetError(f"config: model_spec.model.vocab_size: expected an integer, got {vocab!r}")
    datasets: list[str] = []
    sections = ["dataloader"] + (["validator.dataloader"] if config.get("validator.enable") else [])
    for section in sections:
        name = str(config.get(f"{section}.dataset") or "").lower()  # torchtitan lower-cases the name too
        if name == C4_TEST:
            path = config.get(f"{section}.dataset_path") or C4_TEST_DEFAULT_PATH
            if path not in datasets:
                datasets.append(str(path))
    return AssetPlan(tokenizer_path=tokenizer, dataset_paths=tuple(datasets), vocab_size=vocab)


def ensure_debug_assets(root: str | Path, config: Mapping[str, Any] | Any) -> list[Path]:
    """Make, under repository ``root``, the tokenizer and ``c4_test`` data a resolved torchtitan ``config`` names and
    that are missing (see :func:`plan_from_config` for what ``config`` may be). Returns the files written, absolute;
    ``[]`` when everything was in place. Raises :class:`DebugAssetError`."""
    plan = plan_from_config(config)
    return make_debug_assets(
        root, tokenizer_path=plan.tokenizer_path, dataset_paths=plan.dataset_paths, vocab_size=plan.vocab_size
    )


def make_debug_assets(
    root: str | Path,
    *,
    tokenizer_path: str | None = "./tests/assets/tokenizer",
    dataset_paths: tuple[str, ...] | list[str] = (C4_TEST_DEFAULT_PATH,),
    vocab_size: int = MAX_VOCAB,
) -> list[Path]:
    """The same with the paths given directly (relative paths are relative to ``root``; None: no tokenizer).
    A tokenizer folder that holds any file the loader reads, or a dataset folder that holds anything, is left alone.
    On an error nothing this call wrote is left behind."""
    base = Path(root).expanduser()
    if not base.is_dir():
        raise DebugAssetError(f"repository root {base}: not a directory")
    base = base.resolve()
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB:
        raise DebugAssetError(
            f"vocab_size: expected an integer >= {MIN_VOCAB} (256 bytes + BOS/EOS), got {vocab_size!r}"
        )
    jobs: list[tuple[Path, dict[str, str]]] = []  # (folder, {file name: content})
    if tokenizer_path is not None:
        folder = _inside(base, tokenizer_path, "hf_assets_path")
        if not _has_any(folder, TOKENIZER_FILES):
            jobs.append((folder, tokenizer_files(min(vocab_size, MAX_VOCAB))))
    for path in dict.fromkeys(dataset_paths):
        folder = _inside(base, path, "dataloader.dataset_path")
        if not (folder.is_dir() and any(folder.iterdir())):
            jobs.append((folder, {"data.json": dataset_text()}))
    written: list[Path] = []
    made_dirs: list[Path] = []
    try:
        for folder, files in jobs:
            made_dirs += _mkdirs(folder)
            for name, text in files.items():
                written.append(_write_new(folder / name, text))
    except OSError as exc:
        for done in reversed(written):
            done.unlink(missing_ok=True)
        for folder in reversed(made_dirs):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise DebugAssetError(f"{exc.filename or 'debug assets'}: cannot write: {exc.strerror or exc}") from None
    return written


# ---- the text -------------------------------------------------------------------------------------------------

_NAMES = ["Ada", "Bram", "Cleo", "Dev", "Esme", "Finn", "Gale", "Hana", "Ivo", "Juno", "Kai", "Lena"]
_PLACES = [
    "the harbour",
    "the old mill",
    "the market",
    "the library",
    "the north field",
    "the bakery",
    "the train station",
    "the garden",
    "the school",
    "the river bank",
]
_THINGS = [
    "bread",
    "apples",
    "a lantern",
    "old maps",
    "fresh fish",
    "warm soup",
    "a red kite",
    "clay pots",
    "wool hats",
    "green tea",
    "a small boat",
    "honey",
]
_VERBS = [
    ("carries", "carried"),
    ("sells", "sold"),
    ("paints", "painted"),
    ("finds", "found"),
    ("mends", "mended"),
    ("buys", "bought"),
    ("keeps", "kept"),
    ("shares", "shared"),
]
_TIMES = ["in the morning", "at noon", "in the evening", "on Sunday", "after the rain", "before dawn"]
_WEATHER = ["sunny", "windy", "cold", "grey", "warm", "quiet"]
_TOPICS = ["a day at {place}", "what {name} did", "notes from {place}", "the week in {place}"]


def _sentence(rng: random.Random, name: str, place: str) -> str:
    """One sentence of the grammar; facts repeat across a document, so later tokens are predictable."""
    verb, past = rng.choice(_VERBS)
    thing = rng.choice(_THINGS)
    kind = rng.randrange(6)
    if kind == 0:
        return f"{name} {verb} {thing} at {place} {rng.choice(_TIMES)}."
    if kind == 1:
        return f"Yesterday {name} {past} {thing}, and today {name} {verb} {thing} again."
    if kind == 2:
        return f"It was {rng.choice(_WEATHER)} at {place}, so {name} stayed inside."
    if kind == 3:
        a, b = rng.randrange(2, 20), rng.randrange(2, 20)
        return f"{name} counted {a} and {b} pieces of {thing.removeprefix('a ')}: {a + b} in all."
    if kind == 4:
        return f"Everyone at {place} knows that {name} {verb} {thing}."
    return f"{name} walked from {place} to {rng.choice(_PLACES)} {rng.choice(_TIMES)}."


def documents(count: int = DOCUMENTS, seed: int = SEED) -> Iterator[dict[str, str]]:
    """``count`` records in c4's shape (``text``, ``timestamp``, ``url``), the same for the same arguments."""
    rng = random.Random(seed)
    for i in range(count):
        name, place = rng.choice(_NAMES), rng.choice(_PLACES)
        title = rng.choice(_TOPICS).format(name=name, place=place).capitalize()
        body = " ".join(_sentence(rng, name, place) for _ in range(rng.randrange(3, 9)))
        yield {
            "text": f"{title}. {body}",
            "timestamp": f"2020-01-{1 + i % 28:02d}T00:00:00Z",
            "url": f"https://example.invalid/attune-debug/{i}",
        }


def dataset_text(count: int = DOCUMENTS, seed: int = SEED) -> str:
    """The ``data.json`` of a ``c4_test`` folder: one JSON record a line."""
    return "".join(json.dumps(doc) + "\n" for doc in documents(count, seed))


# ---- the tokenizer --------------------------------------------------------------------------------------------


def tokenizer_files(vocab_size: int = MAX_VOCAB) -> dict[str, str]:
    """``tokenizer.json`` (byte-level BPE, at most ``vocab_size`` ids, BOS/EOS first) and the
    ``tokenizer_config.json`` from which torchtitan's ``HuggingFaceTokenizer`` reads BOS/EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator((doc["text"] for doc in documents()), trainer=trainer)
    if tok.get_vocab_size() > vocab_size:  # the trainer's contract; checked, as an id >= the model's vocab crashes
        raise DebugAssetError(f"tokenizer: {tok.get_vocab_size()} ids, more than the model's vocab_size {vocab_size}")
    special = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    config = {
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(tok.token_to_id(t)): {"content": t, **special} for t in (BOS, EOS)},
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
    }
    return {"tokenizer.json": tok.to_str(pretty=True), "tokenizer_config.json": json.dumps(config, indent=2) + "\n"}


# ---- files ----------------------------------------------------------------------------------------------------


def _field(config: Mapping[str, Any], key: str) -> Any:
    if key not in config:
        raise DebugAssetError(f"config: field {key} missing (expected a resolved torchtitan config)")
    return config[key]


def _inside(base: Path, path: str, field: str) -> Path:
    """``path`` (relative to ``base``, or absolute) as an absolute path inside ``base``; a clear error otherwise."""
    if not isinstance(path, str) or not path.strip():
        raise DebugAssetError(f"{field}: expected a folder path, got {path!r}")
    target = (base / Path(path).expanduser()).resolve()
    if target != base and base not in target.parents:
        raise DebugAssetError(
            f"{field} '{path}': outside the repository root {base}; debug assets are made only inside it"
        )
    if target.exists() and not target.is_dir():
        raise DebugAssetError(f"{field} '{path}': {target} is a file, expected a folder")
    for parent in target.parents:
        if parent == base:
            break
        if parent.exists() and not parent.is_dir():
            raise DebugAssetError(f"{field} '{path}': {parent} is a file, expected a folder")
    return target


def _has_any(folder: Path, names: tuple[str, ...]) -> bool:
    return folder.is_dir() and any((folder / n).exists() for n in names)


def _mkdirs(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, outermost first."""
    missing = [p for p in [*reversed(folder.parents), folder] if not p.exists()]
    for path in missing:
        path.mkdir(exist_ok=True)
    return missing


def _write_new(path: Path, text: str) -> Path:
    """Write ``path`` whole or not at all, and never over a file that appeared meanwhile."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the assets are ordinary readable files
        os.link(tmp, path)  # fails if path exists: no overwrite, even in a race
    finally:
        os.unlink(tmp)
    return path
