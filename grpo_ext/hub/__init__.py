"""Publishing to the Hugging Face Hub: what a checkpoint's training was (`training`: the card's reading of the run's
record, which `grpo_ext.run_record` writes), its model card (`card`), the folder that is uploaded (`upload_folder`),
and its publication as a dry run's folder or on the Hub (`export`, behind scripts/publish.py).

The names below are loaded on first use: reading how a checkpoint was trained does not load the model card's report
stack.
"""

import importlib

_EXPORTS = {
    "CHECKPOINT_TYPES": "card",
    "build_model_card": "card",
    "eval_results": "card",
    "trainer_model_card": "card",
    "hardware_summary": "training",
    "summarize_training": "training",
    "task_dataset": "training",
    "trained_with": "training",
    "trainer_summary": "training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'grpo_ext.hub' has no attribute {name!r}")
    return getattr(importlib.import_module(f"grpo_ext.hub.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return __all__
