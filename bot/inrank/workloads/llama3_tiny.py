"""The CPU workload: a small llama3 from torchtitan's own model code, on project-made text.

Use as ``--module bot.inrank.workloads.llama3_tiny --config llama3_tiny_cpu``. The model is torchtitan's
``Llama3Model`` (its own layers, RoPE, RMSNorm, GQA attention); only the sizes are small. The
tokenizer and text come from :mod:`bot.inrank.workloads.text` (deterministic, nothing downloaded).

What the config function fixes (part of the objective or needed on the CPU):
- ``training.mixed_precision_param = float32``: bf16 matmuls are ~54× slower on AVX2-only CPUs
  (docs/reference/cpu-torchtitan.md TL;DR 1); it also keeps the gate's noise floor low.
- ``training.disable_cuda_graphs = True`` (no CUDA), ``parallelism.spmd_backend = partial_dtensor``
  (torch 2.13's FSDP2 cannot convert spmd_types params for dp>1; docs/reference/cpu-torchtitan.md §5 item 2).
- ``debug.enable_structured_logging`` stays on: the runner reads its JSONL spans.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.components.tokenizer import BaseTokenizer
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import (
    _EMBEDDING_INIT,
    _NORM_INIT,
    Llama3Model,
    _build_llama3_layers,
    _output_linear_init,
    model_registry,
)
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer

from bot.inrank.workloads.text import CharTokenizerCore, build_sample, sample_indices

DIM, N_HEADS, N_KV_HEADS, N_LAYERS = 128, 4, 2, 4


class CharTokenizer(BaseTokenizer):
    """torchtitan tokenizer wrapper around :class:`CharTokenizerCore` (``hf_assets_path`` unused)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        pass

    def __init__(self, config: Config | None = None, tokenizer_path: str | None = None, **_: object) -> None:
        super().__init__()
        self.core = CharTokenizerCore()
        self.bos_id, self.eos_id, self.pad_id = self.core.bos_id, self.core.eos_id, self.core.pad_id

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True, **_: object) -> list[int]:
        return self.core.encode_text(text, add_bos=add_bos, add_eos=add_eos)

    def decode(self, ids: list[int], **_: object) -> str:
        return self.core.decode_ids(list(ids))

    def get_vocab_size(self) -> int:
        return self.core.vocab_size


class SyntheticQADataset(IterableDataset, Stateful):
    """Packed, prompt-masked samples in data-parallel-invariant order (see :mod:`bot.inrank.workloads.text`)."""

    def __init__(self, *, seq_len: int, dp_rank: int, dp_world_size: int, local_batch_size: int, seed: int) -> None:
        self.seq_len, self.dp_rank, self.dp_world = seq_len, dp_rank, dp_world_size
        self.local_batch, self.seed = local_batch_size, seed
        self.tok = CharTokenizerCore()
        self.chunk = 0

    def __iter__(self):
        while True:
            for idx in sample_indices(self.chunk, self.dp_rank, self.dp_world, self.local_batch):
                inputs, labels, positions = build_sample(idx, self.seq_len, self.tok, self.seed)
                yield (
                    {"input": torch.tensor(inputs), "positions": torch.tensor(positions)},
                    torch.tensor(labels),
                )
            self.chunk += 1

    def state_dict(self) -> dict[str, int]:
        return {"chunk": self.chunk}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.chunk = int(state_dict["chunk"])


class SyntheticQADataLoader(ParallelAwareDataloader):
    """torchtitan dataloader over :class:`SyntheticQADataset`."""

    @dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        dataset: str = "attune_synthetic_qa"
        data_seed: int = 1234
        """Seed of the text generator (part of the objective: the data)."""

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: BaseTokenizer,
        seq_len: int,
        local_batch_size: int,
        snapshot_every_n_steps: int | None = 1,
        **_: object,
    ) -> None:
        ds = SyntheticQADataset(
            seq_len=seq_len,
            dp_rank=dp_rank,
            dp_world_size=dp_world_size,
            local_batch_size=local_batch_size,
            seed=config.data_seed,
        )
        super().__init__(
            ds,
            dp_rank=dp_rank,
            dp_world_size=dp_world_size,
            batch_size=local_batch_size,
            num_workers=config.num_workers,
            snapshot_every_n_steps=snapshot_every_n_steps,
        )


def tiny_model_spec() -> ModelSpec:
    """torchtitan's llama3 model spec with tiny dimensions (~0.8M parameters)."""
    vocab = CharTokenizerCore().vocab_size
    config = Llama3Model.Config(
        dim=DIM,
        vocab_size=vocab,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=DIM, param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=vocab, param_init=_output_linear_init(DIM)),
        layers=_build_llama3_layers(
            fuse_qkv=True,
            n_layers=N_LAYERS,
            dim=DIM,
            n_heads=N_HEADS,
            n_kv_heads=N_KV_HEADS,
            hidden_dim=compute_ffn_hidden_dim(DIM, multiple_of=64),
            rope=ComplexRoPE.Config(dim=DIM // N_HEADS, max_seq_len=4096, theta=10000, scaling="none"),
            attn_backend="flex",
        ),
    )
    base = model_registry("debugmodel")
    return ModelSpec(
        name="llama3",
        flavor="attune_tiny",
        model=config,
        parallelize_fn=base.parallelize_fn,
        pipelining_fn=base.pipelining_fn,
        post_optimizer_build_fn=None,
        state_dict_adapter=base.state_dict_adapter,
    )


def cpu_trainer_config(spec: ModelSpec, *, local_batch_size: int, steps: int) -> Trainer.Config:
    """The base config both CPU workloads share: project text and tokenizer, AdamW, linear warm-up, fp32 params
    (bf16 matmuls are ~54x slower on AVX2-only CPUs), CUDA graphs off, ``partial_dtensor``, full recomputation."""
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec))),
        hf_assets_path="./unused-tokenizer-path",
        model_spec=spec,
        tokenizer=CharTokenizer.Config(),
        optimizer=default_adamw(lr=3e-3),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=5, decay_ratio=None, decay_type="linear", min_lr_factor=0.1
        ),
        training=TrainingConfig(
            local_batch_size=local_batch_size,
            seq_len=256,
            steps=steps,
            mixed_precision_param="float32",
            disable_cuda_graphs=True,
        ),
        dataloader=SyntheticQADataLoader.Config(),
        metrics=MetricsProcessor.Config(log_freq=1, disable_color_printing=True),
        parallelism=ParallelismConfig(spmd_backend="partial_dtensor"),
        checkpoint=CheckpointManager.Config(interval=100000),
        activation_checkpoint=FullAC.Config(),
    )


def llama3_tiny_cpu() -> Trainer.Config:
    """The shipped CPU recipe's base config (levers and pins come from the recipe on the CLI)."""
    return cpu_trainer_config(tiny_model_spec(), local_batch_size=1, steps=20)
