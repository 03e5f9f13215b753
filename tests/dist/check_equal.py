"""One generation batch through GRPOExtTrainer with canned completions; dump what the extensions decided.

    python tests/dist/check_equal.py OUT                                   # one process
    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/dist/check_equal.py OUT   # two (gloo)

12 completions in 3 groups of 4, so with 2 processes group 1 is split across them. The completions are canned
(a function of the global row), so both runs see the same batch; tests/test_distributed.py compares the dumps.

The generation batch is two micro-batches (gradient accumulation 2) on each process, split unevenly between kept
rows and rows of the skipped group 2; for every loss type the dump holds the summed loss and gradient (as random
projections) of one optimizer step, and the one-process run also TRL's own loss on the 8 kept rows as one batch.
"""

import json
import os
import sys
from pathlib import Path

import torch

from grpo_ext.tasks.arithmetic import Problem
from tests.trainer_utils import TASK, GRPOTrainer, tiny_args, tiny_trainer

GLOBAL_BATCH, GROUP, ACCUMULATION = 12, 4, 2
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
# Local rows of each micro-batch, per world size and rank: uneven splits of kept rows (global rows 0-7) and skipped
# ones (8-11). One process: 5 kept + 1 skipped / 3 kept + 3 skipped. Two: rank 0 holds rows 0-5 (all kept), rank 1
# rows 6-11: 2 kept + 1 skipped / 3 skipped.
MICRO_BATCHES = {
    1: {0: ([0, 1, 2, 3, 4, 8], [5, 6, 7, 9, 10, 11])},
    2: {0: ([0, 1, 2], [3, 4, 5]), 1: ([0, 1, 2], [3, 4, 5])},
}


def canned_completion(prompt: str, row: int) -> str:
    solution = Problem.from_prompt(prompt).solution
    if row // GROUP == 2:  # every sample of group 2 is right: no signal, a skipped group
        return solution
    steps = solution.split(";")
    variant = row % GROUP
    if variant == 1:
        steps[0] = steps[0] + "1"  # wrong result in the first step
    elif variant == 2:
        steps = steps[:1]  # stops after one step
    elif variant == 3:
        return "12+"  # garbage
    return ";".join(steps)


def rows(batch: dict, index: list[int]) -> dict:
    return {k: (v[index] if isinstance(v, torch.Tensor) and v.ndim > 0 else v) for k, v in batch.items()}


def step(trainer, compute, micro_batches: list[dict], projections: torch.Tensor) -> dict:
    """One optimizer step's summed loss and gradient (projected on fixed random directions: linear, so the mean over
    processes of the projections is the projection of DDP's averaged gradient)."""
    trainer.model.zero_grad(set_to_none=True)
    total = 0.0
    for micro in micro_batches:
        loss = compute(trainer, trainer.model, micro)
        loss.backward()
        total += loss.item()
    grad = torch.cat(
        [p.grad.flatten() if p.grad is not None else torch.zeros(p.numel()) for p in trainer.model.parameters()]
    )
    return {"loss": total, "grad": (projections @ grad).tolist()}


def main(out: Path) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = tiny_args(
        tmp_path=out / "run",
        per_device_train_batch_size=GLOBAL_BATCH // world // ACCUMULATION,
        gradient_accumulation_steps=ACCUMULATION,
        num_generations=GROUP,
        advantage_mode="process",
        process_include_outcome=True,
        zero_std_groups="skip",
        beta=0.1,
        loss_type="dapo",
    )
    trainer = tiny_trainer(args=args, process_reward_funcs=[TASK.step_reward])
    rank, tok = trainer.accelerator.process_index, trainer.processing_class
    n_local = GLOBAL_BATCH // world

    def generate(prompt_ids, images, multimodal_fields, num_generations):
        texts = [
            canned_completion(tok.decode(p, skip_special_tokens=True), rank * n_local + i)
            for i, p in enumerate(prompt_ids)
        ]
        return [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts], None

    trainer._generate_single_turn = generate
    prompts = [trainer.train_dataset[i] for i in range(GLOBAL_BATCH // GROUP) for _ in range(GROUP)]
    trainer.model.train()
    batch = trainer._generate_and_score_completions(prompts[rank * n_local : (rank + 1) * n_local])
    lengths = batch["completion_ids"].ne(tok.pad_token_id).sum(dim=1).tolist()
    dump = {
        "advantages": [row[:n].tolist() for row, n in zip(batch["advantages"], lengths, strict=False)],
        "keep": batch["zero_std_keep"].tolist(),
        "num_items_in_batch": batch["num_items_in_batch"].item(),
        "losses": {},
        "reference": {},
    }
    projections = torch.randn(
        4, sum(p.numel() for p in trainer.model.parameters()), generator=torch.Generator().manual_seed(0)
    )
    for loss_type in LOSS_TYPES:
        trainer.loss_type = loss_type
        trainer.importance_sampling_level = "sequence" if loss_type == "luspo" else "token"
        micro = [rows(batch, index) for index in MICRO_BATCHES[world][rank]]
        dump["losses"][loss_type] = step(trainer, type(trainer)._compute_loss, micro, projections)
        if world == 1:  # TRL on the kept rows only, as one batch (no accumulation)
            kept = rows(batch, list(range(8)))
            kept = {k: v for k, v in kept.items() if not k.startswith("zero_std")}
            kept["num_items_in_batch"] = kept["completion_mask"].sum()
            trainer.current_gradient_accumulation_steps, trainer.args.steps_per_generation = 1, 1
            dump["reference"][loss_type] = step(trainer, GRPOTrainer._compute_loss, [kept], projections)
            trainer.current_gradient_accumulation_steps = trainer.args.steps_per_generation = ACCUMULATION
    (out / f"rank{rank}_of{world}.json").write_text(json.dumps(dump))
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
