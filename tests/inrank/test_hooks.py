"""bot/inrank/hooks.py: a hook acts on what the run trains from, whatever torchtitan does between ``__init__`` and
the first step."""

from __future__ import annotations

import pytest
import torch

from bot.inrank import hooks


class _Checkpointer:
    """torchtitan's ``checkpointer.load`` as a seeded run sees it: the seed's weights replace the drawn ones."""

    def __init__(self, model: torch.nn.Module, seed_weights: dict[str, torch.Tensor] | None) -> None:
        self.model, self.seed_weights = model, seed_weights

    def load(self, step: int = -1) -> bool:
        if self.seed_weights is None:
            return False
        self.model.load_state_dict(self.seed_weights)
        return True


class _Trainer:
    seed_weights: dict[str, torch.Tensor] | None = None

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model_parts = [torch.nn.Linear(8, 8)]
        self.checkpointer = _Checkpointer(self.model_parts[0], self.seed_weights)

    def train(self) -> dict[str, torch.Tensor]:  # as torchtitan's Trainer.train: load, then the steps
        self.checkpointer.load(step=0)
        return {k: v.clone() for k, v in self.model_parts[0].state_dict().items()}


@pytest.fixture
def trainer_cls(monkeypatch: pytest.MonkeyPatch) -> type[_Trainer]:
    cls = type("Trainer", (_Trainer,), {})
    monkeypatch.setattr(hooks, "_trainer_cls", lambda: cls)
    return cls


@pytest.mark.parametrize("seeded", [True, False], ids=["seed-checkpoint", "drawn-weights"])
def test_the_init_perturbation_reaches_the_weights_training_starts_from(
    trainer_cls: type[_Trainer], seeded: bool
) -> None:
    """The calibration's init perturbation was applied in ``__init__``, before ``train()`` loaded the seed checkpoint,
    which put the unperturbed weights back: the witness did nothing on every seeded run."""
    seed = {k: torch.randn_like(v) for k, v in torch.nn.Linear(8, 8).state_dict().items()}
    trainer_cls.seed_weights = seed if seeded else None
    plain = trainer_cls().train()
    hooks.init_perturb("1")
    perturbed = trainer_cls().train()
    for name, start in plain.items():
        if seeded:
            assert torch.equal(start, seed[name])
        ratio = perturbed[name] / start
        assert not torch.equal(perturbed[name], start), f"{name} not perturbed"
        assert float((ratio - 1).abs().max()) < 1e-5, f"{name}: more than a 1e-6-scale perturbation"
