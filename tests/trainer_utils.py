"""Tiny, fast trainers on the embedded model for tests (CPU, a few prompts, short completions)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from trl import GRPOConfig, GRPOTrainer

from grpo_ext.config import GRPOExtConfig
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.tasks import get_task
from grpo_ext.trainer import GRPOExtTrainer

TASK = get_task("arithmetic", max_operands=3)
#: scripts/train.py's flags for a tiny, fast run on the embedded default (add --max_steps and --output_dir).
TRAIN_ARGV = [
    "--config",
    "configs/default.yaml",
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "16",
    "--train_size",
    "16",
    "--logging_steps",
    "1",
    "--disable_tqdm",
    "true",
]


def tiny_args(cls=GRPOExtConfig, tmp_path=None, **overrides):
    """A tiny run's config; its output folder `tmp_path` (a test that saves passes its own), else one of this process
    (never written by the tests that leave it out; per process, so two pytest-xdist workers never share one)."""
    kwargs = dict(
        output_dir=str(tmp_path or Path(tempfile.gettempdir()) / f"grpo_ext_test_{os.getpid()}"),
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=2,
        learning_rate=1e-3,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=24,
        temperature=1.0,
        top_k=0,
        beta=0.0,
        activation_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    if cls is GRPOExtConfig and "step_separator" not in kwargs:  # None: the task's, filled in by the assembly
        kwargs["step_separator"] = TASK.step_separator
    return cls(**kwargs)


def tiny_trainer(
    trainer_cls=GRPOExtTrainer, args=None, reward_funcs=None, n_prompts=64, model=None, train_dataset=None, **kwargs
):
    """A trainer ready for `_generate_and_score_completions` / `_compute_loss` calls outside `train()` (the embedded
    model and `n_prompts` training prompts unless `model` / `train_dataset` are given)."""
    args = args if args is not None else tiny_args()
    trainer = trainer_cls(
        model=model or str(EMBEDDED_MODEL_DIR),
        reward_funcs=reward_funcs if reward_funcs is not None else [TASK.outcome_reward],
        args=args,
        train_dataset=train_dataset if train_dataset is not None else TASK.load("train", n_prompts),
        **kwargs,
    )
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by train() otherwise
    return trainer


__all__ = ["GRPOConfig", "GRPOTrainer", "GRPOExtTrainer", "TASK", "tiny_args", "tiny_trainer"]
