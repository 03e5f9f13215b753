"""Publishing to the Hugging Face Hub: what a checkpoint's training was (`training`), its model card (`card`),
and the folder that is uploaded (`export`, behind scripts/publish.py)."""

from grpo_ext.hub.card import CHECKPOINT_TYPES, build_model_card, eval_results, trainer_model_card
from grpo_ext.hub.training import (
    CONFIG_FILE,
    hardware_summary,
    summarize_training,
    task_dataset,
    trained_with,
    trainer_summary,
)

__all__ = [
    "CHECKPOINT_TYPES",
    "CONFIG_FILE",
    "build_model_card",
    "eval_results",
    "hardware_summary",
    "summarize_training",
    "task_dataset",
    "trained_with",
    "trainer_model_card",
    "trainer_summary",
]
