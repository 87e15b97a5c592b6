"""Deterministic synthetic text for the CPU workload, and its character tokenizer.

Nothing is downloaded: every sample is generated from its index. The text has learnable
structure (a small question/answer grammar with arithmetic and rule-based answers), and each
document's prompt is *masked* (its labels are ignored), so the number of valid tokens differs
between samples — the gate's loss-normalisation faults are then effective, not no-ops.

Sample order is data-parallel invariant: global sample ``i`` is the same whatever the DP degree,
local batch or gradient-accumulation split, so those levers change only reduction order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

IGNORE_INDEX = -100
SPECIALS = ["<pad>", "<bos>", "<eos>"]
ALPHABET = list("abcdefghijklmnopqrstuvwxyz0123456789 +=?:.,;'")
VOCAB = SPECIALS + ALPHABET
PAD, BOS, EOS = 0, 1, 2

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a small bird", "the robot", "our teacher", "the baker"]
VERBS = ["likes", "sees", "finds", "paints", "keeps", "wants"]
OBJECTS = ["red apples", "the river", "a blue box", "warm bread", "the moon", "old books", "green tea"]
COLOURS = {"red apples": "red", "a blue box": "blue", "green tea": "green"}


class CharTokenizerCore:
    """Character-level tokenizer over :data:`VOCAB` (ids 0-2 are pad/bos/eos)."""

    def __init__(self) -> None:
        self.stoi = {ch: i for i, ch in enumerate(VOCAB) if i >= len(SPECIALS)}
        self.bos_id, self.eos_id, self.pad_id = BOS, EOS, PAD

    @property
    def vocab_size(self) -> int:
        return len(VOCAB)

    def encode_text(self, text: str, *, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        ids = [self.stoi[c] for c in text.lower() if c in self.stoi]
        return ([BOS] if add_bos else []) + ids + ([EOS] if add_eos else [])

    def decode_ids(self, ids: list[int]) -> str:
        return "".join(VOCAB[i] for i in ids if i >= len(SPECIALS))


@dataclass(frozen=True)
class Document:
    prompt: str
    answer: str


def make_document(rng: random.Random) -> Document:
    """One question/answer document; the answer is a deterministic function of the prompt."""
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(50), rng.randrange(50)
        return Document(f"q: {a}+{b}=?", f" a: {a + b}.")
    subj, verb, obj = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)
    if kind == 1:
        return Document(f"q: does {subj} {verb} {obj}?", f" a: yes, {subj} {verb} {obj}.")
    colour = COLOURS.get(obj, "no colour")
    return Document(f"q: what colour is {obj}?", f" a: {colour}; {obj} is {colour}.")


def build_sample(
    index: int, seq_len: int, tok: CharTokenizerCore, seed: int = 1234
) -> tuple[list[int], list[int], list[int]]:
    """Global sample ``index``: (inputs, labels, positions), each exactly ``seq_len`` long.

    Documents are packed; positions restart at 0 for each document (torchtitan's block-causal
    convention); the prompt's labels and the padding tail are :data:`IGNORE_INDEX`.
    """
    rng = random.Random(seed * 1_000_003 + index)
    inputs: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    while len(inputs) < seq_len:
        room = seq_len - len(inputs)
        if room < 12:  # pad the tail: its own "document" of ignored labels
            inputs += [PAD] * room
            labels += [IGNORE_INDEX] * room
            positions += list(range(room))
            break
        doc = make_document(rng)
        prompt_ids = tok.encode_text(doc.prompt, add_eos=False)
        ids = prompt_ids + tok.encode_text(doc.answer, add_bos=False)
        doc_in, doc_lab = ids[:-1], ids[1:]
        # mask the labels that predict prompt tokens (target index < len(prompt_ids))
        doc_lab = [IGNORE_INDEX if j + 1 < len(prompt_ids) else t for j, t in enumerate(doc_lab)]
        take = min(len(doc_in), room)
        inputs += doc_in[:take]
        labels += doc_lab[:take]
        positions += list(range(take))
    return inputs, labels, positions


def sample_indices(step_chunk: int, dp_rank: int, dp_world: int, local_batch: int) -> list[int]:
    """Global sample ids of a rank's ``step_chunk``-th local batch (DP-invariant order)."""
    base = step_chunk * dp_world * local_batch + dp_rank * local_batch
    return list(range(base, base + local_batch))
