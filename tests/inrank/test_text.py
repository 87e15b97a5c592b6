"""bot/inrank/workloads/text.py: deterministic packed samples with masked prompts, in DP-invariant order."""

from __future__ import annotations

import pytest

from bot.inrank.workloads.text import (
    BOS,
    EOS,
    IGNORE_INDEX,
    PAD,
    VOCAB,
    CharTokenizerCore,
    build_sample,
    sample_indices,
)

TOK = CharTokenizerCore()


def test_tokenizer_round_trip() -> None:
    ids = TOK.encode_text("Q: 3+4=?")
    assert ids[0] == BOS and ids[-1] == EOS
    assert TOK.decode_ids(ids) == "q: 3+4=?"
    assert TOK.vocab_size == len(VOCAB)
    assert all(0 <= i < TOK.vocab_size for i in ids)
    assert TOK.encode_text("a", add_bos=False, add_eos=False) == [VOCAB.index("a")]


@pytest.mark.parametrize("seq_len", [16, 64, 256, 300])
def test_samples_are_exactly_seq_len(seq_len: int) -> None:
    for index in range(20):
        inputs, labels, positions = build_sample(index, seq_len, TOK)
        assert len(inputs) == len(labels) == len(positions) == seq_len


def test_determinism() -> None:
    assert build_sample(12345, 256, TOK) == build_sample(12345, 256, CharTokenizerCore())
    assert build_sample(3, 256, TOK) != build_sample(4, 256, TOK)
    assert build_sample(3, 256, TOK, seed=1) != build_sample(3, 256, TOK, seed=2)


def test_labels_have_ignored_positions_and_valid_counts_vary() -> None:
    valid_counts = set()
    for index in range(50):
        _, labels, _ = build_sample(index, 256, TOK)
        ignored = sum(1 for t in labels if t == IGNORE_INDEX)
        assert 0 < ignored < len(labels)
        valid_counts.add(len(labels) - ignored)
    assert len(valid_counts) > 5, "the number of valid tokens must differ between samples"


def test_prompt_labels_are_masked_and_answers_are_next_tokens() -> None:
    inputs, labels, positions = build_sample(0, 256, TOK)
    starts = [i for i, p in enumerate(positions) if p == 0]
    first_doc_end = starts[1]
    doc_inputs, doc_labels = inputs[:first_doc_end], labels[:first_doc_end]
    text = TOK.decode_ids(doc_inputs)
    assert text.startswith("q: ") and " a: " in text
    # every unmasked label is the next input token of the same document
    for j, lab in enumerate(doc_labels[:-1]):
        if lab != IGNORE_INDEX:
            assert lab == doc_inputs[j + 1]
    assert doc_labels[-1] == EOS  # the last target of a complete document is <eos>
    # the prompt (up to "?") is masked: the first valid label predicts the answer's first character
    first_valid = next(j for j, lab in enumerate(doc_labels) if lab != IGNORE_INDEX)
    assert TOK.decode_ids(doc_inputs[: first_valid + 1]).endswith("?")


def test_positions_restart_at_zero_per_document() -> None:
    for index in range(30):
        inputs, labels, positions = build_sample(index, 256, TOK)
        assert positions[0] == 0
        assert sum(1 for p in positions if p == 0) >= 2, "samples pack several documents"
        for j in range(1, len(positions)):
            assert positions[j] in (0, positions[j - 1] + 1)
            if positions[j] == 0 and inputs[j] != PAD:
                assert inputs[j] == BOS, "a new document starts with <bos>"
        # the padding tail is its own ignored "document"
        if PAD in inputs:
            tail = inputs.index(PAD)
            assert set(inputs[tail:]) == {PAD}
            assert set(labels[tail:]) == {IGNORE_INDEX}
            assert positions[tail] == 0


def _step_ids(step: int, dp: int, local_batch: int, grad_accum: int) -> list[int]:
    """Global sample ids one training step reads over all DP ranks and accumulation micro-batches."""
    ids: list[int] = []
    for micro in range(grad_accum):
        chunk = step * grad_accum + micro
        for rank in range(dp):
            ids += sample_indices(chunk, rank, dp, local_batch)
    return sorted(ids)


@pytest.mark.parametrize(
    ("dp", "local_batch"), [(1, 8), (1, 4), (1, 2), (1, 1), (2, 4), (2, 2), (2, 1), (4, 2), (8, 1)]
)
def test_sample_order_is_dp_invariant(dp: int, local_batch: int) -> None:
    global_batch = 8
    grad_accum = global_batch // (dp * local_batch)
    for step in range(4):
        assert _step_ids(step, dp, local_batch, grad_accum) == list(
            range(step * global_batch, (step + 1) * global_batch)
        )


def test_union_of_a_chunk_over_ranks_is_the_same_global_ids() -> None:
    # chunk k over all ranks of dp 2 with local batch 2 == chunk k of dp 1 with local batch 4
    for k in range(5):
        union = sorted(sample_indices(k, 0, 2, 2) + sample_indices(k, 1, 2, 2))
        assert union == sample_indices(k, 0, 1, 4)
        assert not set(sample_indices(k, 0, 2, 2)) & set(sample_indices(k, 1, 2, 2))
