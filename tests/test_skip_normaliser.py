"""zero_std_groups: skip, several micro-batches: the step's loss and gradient equal TRL's on the batch with the skipped
groups removed, for every loss type and every way TRL's shuffle can split kept and skipped rows over micro-batches.

The generation batch is the issue's: 8 rows, group 0 without signal, group 1 with advantages +-0.866,
per_device_train_batch_size 4, steps_per_generation = gradient_accumulation_steps = 2. The reference is TRL's own
`_compute_loss` on the 4 kept rows as one batch (gradient accumulation 1): what TRL trains on when those groups were
never generated. Two processes: tests/test_distributed.py.
"""

import pytest
import torch

from tests.trainer_utils import GRPOTrainer, tiny_args, tiny_trainer

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
# Rows 0-3: group 0 (skipped); rows 4-7: group 1 (kept). Each split is (micro-batch 1, micro-batch 2).
SPLITS = {
    "3 kept + 1 skipped / 1 kept + 3 skipped": ([4, 5, 6, 0], [7, 1, 2, 3]),
    "1 kept + 3 skipped / 3 kept + 1 skipped": ([4, 0, 1, 2], [5, 6, 7, 3]),
    "2 + 2 / 2 + 2": ([4, 0, 5, 1], [6, 2, 7, 3]),
    "4 kept / 4 skipped": ([4, 5, 6, 7], [0, 1, 2, 3]),
}


def half_right(prompts, completions, answer, **kwargs):
    """Group 0 (even answer) all 0.5: no signal. Group 1: 1, 1, 0, 0: advantages +-0.866."""
    return [0.5 if int(a) % 2 == 0 else float(i % 4 < 2) for i, a in enumerate(answer)]


def rows(batch: dict, index: list[int]) -> dict:
    return {k: (v[index] if isinstance(v, torch.Tensor) and v.ndim > 0 else v) for k, v in batch.items()}


def loss_and_grad(trainer, compute, batches) -> tuple[float, torch.Tensor]:
    """Summed loss and accumulated gradient over `batches` (one optimizer step's micro-batches)."""
    model = trainer.model
    model.zero_grad(set_to_none=True)
    total = 0.0
    for batch in batches:
        loss = compute(trainer, model, batch)
        loss.backward()
        total += loss.item()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return total, grad


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    args = tiny_args(
        tmp_path=tmp_path_factory.mktemp("skip"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        zero_std_groups="skip",
        beta=0.04,
    )
    trainer = tiny_trainer(args=args, reward_funcs=[half_right])
    trainer.model.train()
    torch.manual_seed(0)
    data = trainer.train_dataset
    even = next(r for r in data if int(r["answer"]) % 2 == 0)
    for odd in (r for r in data if int(r["answer"]) % 2 == 1):  # the first whose 4 samples differ in length
        batch = trainer._generate_and_score_completions([even] * 4 + [odd] * 4)
        if len(set(batch["completion_mask"][4:].sum(dim=1).tolist())) > 1:
            break
    assert batch["zero_std_keep"].tolist() == [0.0] * 4 + [1.0] * 4
    assert torch.allclose(batch["advantages"][4:].abs(), torch.tensor(0.866), atol=1e-3)
    lengths = batch["completion_mask"][4:].sum(dim=1)
    assert len(set(lengths.tolist())) > 1  # uneven token counts: bnpo's token normaliser is exercised
    return trainer, batch


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_split_equals_trl_on_the_kept_rows(scored, loss_type):
    trainer, batch = scored
    trainer.loss_type = loss_type
    trainer.importance_sampling_level = "sequence" if loss_type == "luspo" else "token"

    kept = rows(batch, [4, 5, 6, 7])
    for key in ("zero_std_keep", "zero_std_kept_rows"):
        del kept[key]
    kept["num_items_in_batch"] = kept["completion_mask"].sum()
    trainer.current_gradient_accumulation_steps, trainer.args.steps_per_generation = 1, 1
    try:  # TRL on the 4 kept rows, one batch
        reference_loss, reference_grad = loss_and_grad(trainer, GRPOTrainer._compute_loss, [kept])
    finally:
        trainer.current_gradient_accumulation_steps, trainer.args.steps_per_generation = 2, 2
    assert reference_grad.norm() > 0

    for name, (first, second) in SPLITS.items():
        loss, grad = loss_and_grad(trainer, type(trainer)._compute_loss, [rows(batch, first), rows(batch, second)])
        assert loss == pytest.approx(reference_loss, rel=1e-4, abs=1e-6), name
        error = ((grad - reference_grad).norm() / reference_grad.norm()).item()
        assert error < 1e-4, f"{name}: gradient {error:.1%} off"


def test_the_old_per_micro_batch_rescale_was_off(scored):
    """The issue's numbers, so the test above is known to catch the bug: a micro-batch rescaled by its own kept rows
    (B / kept, the code before the fix) gives grpo a loss of 0.2886 instead of 0 on the 3 + 1 split."""
    trainer, batch = scored
    trainer.loss_type, trainer.importance_sampling_level = "grpo", "token"
    first, second = SPLITS["3 kept + 1 skipped / 1 kept + 3 skipped"]
    total = 0.0
    for index in (first, second):
        micro = rows(batch, index)
        kept = micro["zero_std_keep"].sum()
        total += (GRPOTrainer._compute_loss(trainer, trainer.model, micro) * 4 / kept).item()
    assert abs(total) == pytest.approx(0.2887, abs=2e-3)  # -(A + A - A) / 3 / 2 + A / 1 / 2, A = 0.866
