"""What a study's stage 0 measures (issue 28): the values its ``signal.arm`` trains with, read as its trainer reads
them, and the settings ``signal.json`` records (a recorded file is reused only when they are equal).

The arm's config defines the measurement, so the learning signal is the one of the steps the arms take: the task,
``num_generations`` (the group), ``max_completion_length``, ``loss_type``, ``temperature``, the LoRA rank (``lora_r``
when ``use_peft``), and its samples a step (``per_device_train_batch_size x gradient_accumulation_steps``: TRL's
GRPO counts completions, not prompts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from grpo_ext.errors import UserError, read_yaml

__all__ = ["FIELDS", "QUICK_MINIBATCHES", "arm_values", "signal_settings"]

#: ``--quick``'s measurement: the arm's quick samples a step only, and the fewest minibatches with an interval.
QUICK_MINIBATCHES = 3


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise UserError(f"expected true or false, got {value!r}")


#: The config fields the measurement reads, and how a value converts (a command-line flag's value is a string).
FIELDS = {
    "per_device_train_batch_size": int,
    "gradient_accumulation_steps": int,
    "num_generations": int,
    "max_completion_length": int,
    "loss_type": str,
    "temperature": float,
    "use_peft": _bool,
    "lora_r": int,
}


def _flag_values(argv: Sequence[str]) -> dict[str, str]:
    """``--key value`` pairs of a command line (``--quick``'s flags) as a mapping; a later flag wins, as in argparse."""
    return {argv[i][2:]: argv[i + 1] for i in range(0, len(argv) - 1) if argv[i].startswith("--")}


def arm_values(arm, configs: str | Path, flags: Sequence[str] = ()) -> dict:
    """The :data:`FIELDS` `arm` trains with, layered as its trainer's parser layers them: the defaults of its
    method's config classes, its method config (``<configs>/<method>.yaml``), its overrides, then `flags`; plus
    ``samples`` (a step) and ``lora_rank`` (0: every parameter trains)."""
    from trl import ModelConfig

    from grpo_ext.methods.config import config_class
    from grpo_ext.methods.paradigm import get_method
    from grpo_ext.methods.study.method_configs import method_config_path

    if not get_method(arm.method).online:
        raise UserError(
            f"signal.arm: {arm.name}'s method {arm.method} samples no groups during training; name an arm of an "
            "online method (its samples a step and group size define the measurement)"
        )
    values = {
        f.name: f.default
        for cls in (config_class(arm.method), ModelConfig)
        for f in dataclasses.fields(cls)
        if f.name in FIELDS
    }
    config = read_yaml(method_config_path(arm.method, configs), "method config") or {}
    values.update({k: v for k, v in config.items() if k in FIELDS})
    values.update({k: v for k, v in arm.overrides.items() if k in FIELDS})
    values.update({k: v for k, v in _flag_values(list(flags)).items() if k in FIELDS})
    try:
        values = {key: FIELDS[key](value) for key, value in values.items()}
    except (TypeError, ValueError, UserError) as err:
        raise UserError(f"signal.arm: {arm.name}'s config: {err}") from None
    samples = values["per_device_train_batch_size"] * values["gradient_accumulation_steps"]
    return {**values, "samples": samples, "lora_rank": values["lora_r"] if values["use_peft"] else 0}


def signal_settings(study, configs: str | Path, quick_flags: Sequence[str] | None = None) -> dict:
    """Everything the measurement of ``study.signal`` depends on, JSON-ready (``signal.json`` records it).
    ``quick_flags``: ``--quick``'s flags for the arm's runner; then only the arm's quick samples a step is measured,
    with :data:`QUICK_MINIBATCHES` minibatches (minutes are the quick run's whole budget)."""
    from grpo_ext.evaluation.cache import model_fingerprint
    from grpo_ext.methods.study.method_configs import method_config_path, task_of
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
