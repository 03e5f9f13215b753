"""What a study's stage 0 measures (issue 28): the values its ``signal.arm`` trains with, read as its trainer reads
them (:func:`~grpo_ext.experiments.study.method_configs.arm_values`, which the study's loader checks the section against
too), and the settings ``signal.json`` records (a recorded file is reused only when they are equal).

The arm's config defines the measurement, so the learning signal is the one of the steps the arms take: the task,
``num_generations`` (the group), ``max_completion_length``, ``loss_type``, ``temperature``, the LoRA rank (``lora_r``
when ``use_peft``), and its samples a step (``per_device_train_batch_size x gradient_accumulation_steps``: TRL's
GRPO counts completions, not prompts).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grpo_ext.experiments.study.method_configs import arm_values, method_config_path, task_of

__all__ = ["QUICK_MINIBATCHES", "signal_settings"]

#: ``--quick``'s measurement: the arm's quick samples a step only, and the fewest minibatches with an interval.
QUICK_MINIBATCHES = 3


def signal_settings(study, configs: str | Path, quick_flags: Sequence[str] | None = None) -> dict:
    """Everything the measurement of ``study.signal`` depends on, JSON-ready (``signal.json`` records it).
    ``quick_flags``: ``--quick``'s flags for the arm's runner; then only the arm's quick samples a step is measured,
    with :data:`QUICK_MINIBATCHES` minibatches (minutes are the quick run's whole budget)."""
    from grpo_ext.evaluation.cache import model_fingerprint
    from grpo_ext.model_paths import resolve_model_path

    spec = study.signal
    arm = study.arm(spec.arm)
    values = arm_values(arm, configs, quick_flags or ())
    task, task_kwargs = task_of(method_config_path(arm.method, configs))
    quick = quick_flags is not None
    return {
        "model": study.base,
        # its weights: a file measured on an earlier base of the same name is not reused (None: a hub id, by name)
        "model_fingerprint": model_fingerprint(resolve_model_path(study.base)),
        "task": task,
        "task_kwargs": task_kwargs,
        "arm": arm.name,
        "arm_samples": values["samples"],  # the batch size the arms train at: the report marks its row
        "objectives": list(spec.objectives),
        "samples": [values["samples"]] if quick else list(spec.samples),
        "minibatches": QUICK_MINIBATCHES if quick else spec.minibatches,
        "num_generations": values["num_generations"],
        "lora_rank": values["lora_rank"],
        "max_completion_length": values["max_completion_length"],
        "loss_type": values["loss_type"],
        "temperature": values["temperature"],
        "train_offset": 0,  # the base is fine-tuned on the task's sft split, disjoint from train
        "seed": 0,
        "quick": quick,
    }
