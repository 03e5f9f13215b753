"""The per-method training configs a study's arms name (`configs/methods/<method>.yaml`): where one is, which task it
trains on, and the batch an arm trains with (:func:`arm_values`: its samples a step and group size, which the study's
`signal` section is checked against when the study is read). Kept apart from the study's runs so that the config and
signal modules can read them without importing the runs (which import the study's config)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from grpo_ext.errors import UserError, read_yaml

__all__ = ["FIELDS", "arm_values", "method_config_path", "task_of"]


def method_config_path(method: str, configs: str | Path) -> Path:
    path = Path(configs) / f"{method}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"method {method!r}: no config {path}")
    return path


def task_of(config: Path) -> tuple[str, dict]:
    """The task name and task_kwargs a method config trains on."""
    from grpo_ext.script_args import parse_task_kwargs

    data = read_yaml(config, "method config") or {}
    return str(data.get("task", "arithmetic")), parse_task_kwargs(data.get("task_kwargs"))


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise UserError(f"expected true or false, got {value!r}")


#: The config fields stage 0's measurement reads (the :mod:`.signal` package), and how a value converts
#: (a command-line flag's value is a string).
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
