"""Publishing to the Hugging Face Hub: what a checkpoint's training was (`training`: the run's record and its
reader), its model card (`card`), and the folder that is uploaded (`export`, behind scripts/publish.py).

The names below are loaded on first use: a runner that writes a training record (`grpo_ext.hub.training`) does
not load the model card's report stack.
"""

import importlib

_EXPORTS = {
    "CHECKPOINT_TYPES": "card",
    "build_model_card": "card",
    "eval_results": "card",
    "trainer_model_card": "card",
    "CONFIG_FILE": "training",
    "hardware_summary": "training",
    "save_resolved_config": "training",
    "summarize_training": "training",
    "task_dataset": "training",
    "trained_with": "training",
    "trainer_summary": "training",
    "training_run": "training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'grpo_ext.hub' has no attribute {name!r}")
    return getattr(importlib.import_module(f"grpo_ext.hub.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return __all__
