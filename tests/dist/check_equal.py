"""One generation batch through GRPOExtTrainer with canned completions; dump what the extensions decided.

    python tests/dist/check_equal.py OUT                                   # one process
    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/dist/check_equal.py OUT   # two (gloo)

12 completions in 3 groups of 4, so with 2 processes group 1 is split across them. The completions are canned
(a function of the global row), so both runs see the same batch; tests/test_distributed.py compares the dumps.
"""

import json
import os
import sys
from pathlib import Path

import torch

from grpo_ext.tasks.arithmetic import Problem
from tests.trainer_utils import TASK, tiny_args, tiny_trainer

GLOBAL_BATCH, GROUP = 12, 4


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


def main(out: Path) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = tiny_args(
        tmp_path=out / "run",
        per_device_train_batch_size=GLOBAL_BATCH // world,
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
    loss = trainer._compute_loss(trainer.model, batch)
    lengths = batch["completion_ids"].ne(tok.pad_token_id).sum(dim=1).tolist()
    dump = {
        "advantages": [row[:n].tolist() for row, n in zip(batch["advantages"], lengths, strict=False)],
        "keep": batch["zero_std_keep"].tolist(),
        "num_items_in_batch": batch["num_items_in_batch"].item(),
        "loss": loss.item(),
    }
    (out / f"rank{rank}_of{world}.json").write_text(json.dumps(dump))
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
