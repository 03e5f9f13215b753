"""What a checkpoint's model card says of how it was trained, read from the run's record (`grpo_ext.run_record`:
the resolved config next to the checkpoint, `trained_with`) or from a live trainer (`trainer_summary`).

How the gradient coefficient was computed is the registry record's own text (`GradientCoefficient.description`),
the KL controller's line and tag are its registry entry's (`KLControllerSpec.card`, `.tag`) and the zero-std
strategy's line its entry's (`ZeroStdStrategy.card`), so a mode, a controller or a strategy added to its registry is
described on the card without editing this file.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from grpo_ext.advantages import GradientCoefficient, get_gradient_coefficient
from grpo_ext.batching import ZERO_STD_STRATEGIES, get_zero_std_strategy
from grpo_ext.errors import UserError, user_file
from grpo_ext.kl_control import KLControllerSpec, get_kl_controller
from grpo_ext.run_record import resolved_config

__all__ = [
    "METHOD_RECORD",
    "TRAINER_STATE_FILE",
    "hardware_summary",
    "is_embedded",
    "is_grpo_ext_model",
    "is_hub_id",
    "method_of",
    "summarize_training",
    "task_dataset",
    "trained_with",
    "trainer_summary",
]

TRAINER_STATE_FILE = "trainer_state.json"
#: What a method runner of the unified paradigm (every run of a study) records of the method that trained the run
#: (`grpo_ext.methods.cost.RUN_FILE`: the method's `Method.description()` under "method"), beside the resolved config.
METHOD_RECORD = "method_run.json"

# Training fields shown in the card when set (label, key); the grpo-ext ones are listed only when not at TRL's default.
_GRPO_FIELDS = (
    ("learning rate", "learning_rate"),
    ("LR schedule", "lr_scheduler_type"),
    ("warm-up steps", "warmup_steps"),
    ("completions per prompt (group size)", "num_generations"),
    ("per-device batch (completions)", "per_device_train_batch_size"),
    ("gradient accumulation", "gradient_accumulation_steps"),
    ("policy updates per generation batch", "num_iterations"),
    ("max completion length", "max_completion_length"),
    ("temperature", "temperature"),
    ("loss type", "loss_type"),
    ("reward scaling", "scale_rewards"),
    ("clip epsilon", "epsilon"),
    ("KL coefficient beta", "beta"),
    ("seed", "seed"),
)


def is_hub_id(name: str | None) -> bool:
    """`org/name` (or `name`) that is not an existing local path, nor a model grpo-ext names itself (`embedded`,
    `smollm2-135m-instruct`: `is_grpo_ext_model`), which no Hub repository is."""
    if not name or os.path.exists(os.path.expanduser(name)) or name.startswith((".", "/", "~")):
        return False
    return name.count("/") <= 1 and " " not in name and not is_grpo_ext_model(name)


def is_grpo_ext_model(name: str | None) -> bool:
    """Whether `name` is a model grpo-ext resolves by its own name (`grpo_ext.model_paths.resolve_model_path`): the
    embedded base or a real model it builds offline (`grpo_ext.real_model_fetch.REAL_MODELS`)."""
    from grpo_ext.model_paths import EMBEDDED_NAME
    from grpo_ext.real_model_fetch import REAL_MODELS

    return name == EMBEDDED_NAME or name in REAL_MODELS


def is_embedded(name: str | None) -> bool:
    """Whether `name` is the shipped embedded base model (its name or its folder)."""
    if not name:
        return False
    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR, EMBEDDED_NAME

    return name == EMBEDDED_NAME or Path(name).resolve() == EMBEDDED_MODEL_DIR.resolve()


def task_dataset(task: str | None, task_kwargs: dict | None = None) -> str | None:
    """The Hub dataset a task reads (e.g. `openai/gsm8k`), or None for a generated task such as `arithmetic`."""
    if not task:
        return None
    try:
        from grpo_ext.tasks import get_task

        name = getattr(get_task(task, **(task_kwargs or {})), "dataset_name", None)
    except Exception:  # an unknown or unbuildable task: the card just names no dataset
        return None
    return name if is_hub_id(name) else None


def hardware_summary(num_processes: int | None = None) -> str:
    """`2 x NVIDIA A100-SXM4-80GB` or `1 x CPU (x86_64, 2 cores)`: what this process trains on."""
    import torch

    n = num_processes or 1
    if torch.cuda.is_available():
        return f"{n} x {torch.cuda.get_device_name(0)}"
    return f"{n} x CPU ({platform.machine()}, {os.cpu_count()} cores)"


def _registry_record(mode: str) -> GradientCoefficient | None:
    try:
        return get_gradient_coefficient(mode)
    except ValueError:  # registered by code this process has not imported: the card names the mode only
        return None


def _kl_record(name: str) -> KLControllerSpec | None:
    try:
        return get_kl_controller(name)
    except ValueError:  # registered by code this process has not imported: the card says nothing of it
        return None


def _zero_std_card(training: dict) -> str | None:
    """The zero-std strategy's card line (its registry entry's; none for the default, TRL's)."""
    name = training.get("zero_std_groups") or next(iter(ZERO_STD_STRATEGIES))
    try:
        return get_zero_std_strategy(name).card(training)
    except ValueError:  # registered by code this process has not imported: the card names it only
        return f"zero-std groups: {name}"


def _gradient_coefficient(mode: str, record: GradientCoefficient | None, training: dict) -> str:
    """The card's sentence on how each token's gradient coefficient was computed."""
    if record is None:
        return f"{mode!r} is not registered in this grpo-ext installation: no description"
    text = record.description
    if record.needs_step_rewards:
        source = training.get("process_reward_model") or ", ".join(training.get("process_reward_funcs") or []) or "?"
        text += f"; step rewards from {source}"
    return text


def _mode_tag(mode: str, record: GradientCoefficient | None) -> str | None:
    """A Hub tag for a gradient coefficient other than TRL's own (`process-supervision`, `online-rft`)."""
    if record is None or record.keeps_trl_advantages:
        return None
    return "process-supervision" if record.needs_step_rewards else mode.replace("_", "-")


def _quantization(model: dict) -> str | None:
    if model.get("load_in_4bit"):
        return (
            f"4-bit {model.get('bnb_4bit_quant_type') or 'nf4'}"
            + (" with double quantisation" if model.get("use_bnb_nested_quant") else "")
            + " (bitsandbytes)"
        )
    return "8-bit (bitsandbytes)" if model.get("load_in_8bit") else None


def _lora(model: dict) -> dict | None:
    if not model.get("use_peft"):
        return None
    targets = model.get("lora_target_modules") or "all-linear"
    return {
        "r": model.get("lora_r"),
        "alpha": model.get("lora_alpha"),
        "dropout": model.get("lora_dropout"),
        "target_modules": targets if isinstance(targets, str) else list(targets),
    }


# The training fields a card lists for an offline method of the paradigm (SFT, RFT, DPO: no group, no sampling).
_OFFLINE_FIELDS = (
    ("learning rate", "learning_rate"),
    ("LR schedule", "lr_scheduler_type"),
    ("warm-up steps", "warmup_steps"),
    ("per-device batch", "per_device_train_batch_size"),
    ("gradient accumulation", "gradient_accumulation_steps"),
    ("loss type", "loss_type"),
    ("beta", "beta"),
    ("seed", "seed"),
)
#: The fields of a method record a card reads (`grpo_ext.methods.paradigm.Method.description`).
_METHOD_FIELDS = ("name", "title", "data_source", "reward_function", "gradient_coefficient", "online", "trainer")


def method_of(checkpoint_dir: str | os.PathLike) -> dict | None:
    """The method that trained `checkpoint_dir`, from the method runner's record beside it (`METHOD_RECORD`, or its
    parent's for a `checkpoint-N` folder): its paradigm fields (`name`, `title`, `data_source`, `reward_function`,
    `gradient_coefficient`, `online`, `trainer`); None for a run without one (scripts/train.py's). A record that is
    not a method runner's, or a link out of its folder, is a `UserError` naming it: it is read into a public card."""
    from grpo_ext.run_folder import inside

    folder = Path(checkpoint_dir)
    for where in (folder, folder.parent):
        path = where / METHOD_RECORD
        if not path.exists() and not path.is_symlink():
            continue
        inside(where, METHOD_RECORD, field_name="CHECKPOINT")
        with user_file(path, "CHECKPOINT"):
            record = json.loads(path.read_text())
        method = record.get("method") if isinstance(record, dict) else None
        if not isinstance(method, dict) or not all(isinstance(method.get(k), str) for k in _METHOD_FIELDS[:-2]):
            raise UserError(
                f"CHECKPOINT: {path} is not a method runner's record (expected a 'method' object with the fields "
                f"{', '.join(_METHOD_FIELDS)})"
            )
        if not isinstance(method.get("online"), bool):
            raise UserError(f"CHECKPOINT: {path}: method.online is {method.get('online')!r}, expected true or false")
        return {k: method.get(k) for k in _METHOD_FIELDS}
    return None


def summarize_training(
    resolved: dict, steps: int | None = None, hardware: str | None = None, method: dict | None = None
) -> dict:
    """The card's view of a run from its resolved config (`{task, training, model}` sections, any may be missing) and,
    for a run of a method runner, its method (`method_of`): an offline method (SFT, RFT, DPO) is described as that
    method, never as GRPO."""
    task = resolved.get("task") or {}
    training = resolved.get("training") or {}
    model = resolved.get("model") or {}
    use_peft = bool(model.get("use_peft"))
    if method is not None and not method["online"]:
        return _offline_summary(method, task, training, model, steps, hardware)

    mode = training.get("advantage_mode") or "outcome"
    record = _registry_record(mode)
    extensions = []
    zero_std_text = _zero_std_card(training)
    if zero_std_text:
        extensions.append(zero_std_text)
    kl_controller = _kl_record(training.get("kl_controller") or "fixed")
    kl_text = kl_controller.card(training) if kl_controller else None
    if kl_text:
        extensions.append(kl_text)

    tags = ["trl", "grpo", "grpo-ext"]
    if use_peft:
        tags.append("lora")
    if use_peft and model.get("load_in_4bit"):
        tags.append("qlora")
    if _mode_tag(mode, record):
        tags.append(_mode_tag(mode, record))
    if kl_controller and kl_controller.tag:
        tags.append(kl_controller.tag)

    if hardware is None:
        hardware = "CPU" if training.get("use_cpu") else "GPU"
    planned = training.get("max_steps") if isinstance(training.get("max_steps"), int) else None
    planned = planned if planned is not None and planned > 0 else None
    if steps is None:
        steps = planned
    return {
        "advantage_mode": mode,
        "gradient_coefficient": _gradient_coefficient(mode, record, training),
        # TRL's own advantages and no extension: the card can call the run plain GRPO
        "keeps_trl_advantages": bool(record and record.keeps_trl_advantages),
        "base_model": model.get("model_name_or_path"),
        "task": task.get("task"),
        "task_kwargs": task.get("task_kwargs") or {},
        "dataset": task_dataset(task.get("task"), task.get("task_kwargs")),
        "reward_funcs": task.get("reward_funcs"),
        "quantization": _quantization(model),
        "lora": _lora(model),
        "dtype": model.get("dtype"),
        "precision": "bf16" if training.get("bf16") else "fp16" if training.get("fp16") else "fp32",
        "extensions": extensions,
        "hyperparameters": {label: training[key] for label, key in _GRPO_FIELDS if training.get(key) is not None},
        "steps": steps,
        "planned_steps": planned,
        "hardware": hardware,
        "tags": tags,
        "method": method,
    }


def _offline_summary(method: dict, task: dict, training: dict, model: dict, steps, hardware) -> dict:
    """`summarize_training` of an offline method's run: the method's own paradigm fields (data, reward, gradient
    coefficient) and the training fields it has; no GRPO extension, KL controller or group setting applies."""
    tags = ["trl", "grpo-ext", method["name"].replace("_", "-")]
    if model.get("use_peft"):
        tags.append("lora")
        if model.get("load_in_4bit"):
            tags.append("qlora")
    planned = training.get("max_steps") if isinstance(training.get("max_steps"), int) else None
    planned = planned if planned is not None and planned > 0 else None
    return {
        "advantage_mode": None,
        "gradient_coefficient": method["gradient_coefficient"],
        "keeps_trl_advantages": False,
        "base_model": model.get("model_name_or_path"),
        "task": task.get("task"),
        "task_kwargs": task.get("task_kwargs") or {},
        "dataset": task_dataset(task.get("task"), task.get("task_kwargs")),
        "reward_funcs": None,  # the task's reward field is the config's default: the method's own reward is below
        "quantization": _quantization(model),
        "lora": _lora(model),
        "dtype": model.get("dtype"),
        "precision": "bf16" if training.get("bf16") else "fp16" if training.get("fp16") else "fp32",
        "extensions": [],
        "hyperparameters": {label: training[key] for label, key in _OFFLINE_FIELDS if training.get(key) is not None},
        "steps": steps if steps is not None else planned,
        "planned_steps": planned,
        "hardware": hardware or ("CPU" if training.get("use_cpu") else "GPU"),
        "tags": tags,
        "method": method,
    }


def _global_step(folder: Path) -> int | None:
    for candidate in (folder / TRAINER_STATE_FILE, folder.parent / TRAINER_STATE_FILE):
        if candidate.is_file():
            try:
                return int(json.loads(candidate.read_text())["global_step"])
            except (ValueError, KeyError, TypeError):
                return None
    return None


def trained_with(checkpoint_dir: str | os.PathLike) -> dict | None:
    """Summary of how `checkpoint_dir` was trained, from its `grpo_ext_config.yaml` (or its parent's) and, for a run of
    a method runner (a study's), its `method_run.json`; None without a resolved config.

    The step count comes from `trainer_state.json` when there is one, else from the run's record
    (`grpo_ext_run.json`: a study's run stopped by its sample budget before `max_steps`), else from `max_steps`;
    `finished` says whether that record says `complete`.
    """
    resolved = resolved_config(checkpoint_dir)
    if resolved is None:
        return None
    from grpo_ext.checkpoints import read_run_status

    steps = _global_step(Path(checkpoint_dir))
    status = read_run_status(checkpoint_dir)  # the run's own record (a checkpoint-N folder has its trainer state)
    if steps is None and status is not None and isinstance(status.get("global_step"), int):
        steps = status["global_step"]  # a method runner's folder keeps no trainer_state.json: its record counts
    method = method_of(checkpoint_dir)
    summary = summarize_training(resolved, steps=steps, hardware=resolved.get("hardware"), method=method)
    summary["finished"] = status is not None and status["status"] == "complete"
    return summary


def trainer_summary(trainer, dataset_name: str | None = None) -> dict:
    """The same summary as `trained_with`, from a live (GRPOExt)Trainer: its args, its model, its state."""
    from accelerate.utils import is_peft_model
    from trl.trainer.utils import get_config_model_id

    model = trainer.model
    model_info: dict[str, Any] = {"model_name_or_path": get_config_model_id(model.config)}
    quant = getattr(model.config, "quantization_config", None)
    quant = quant.to_dict() if hasattr(quant, "to_dict") else dict(quant or {})
    model_info["load_in_4bit"] = bool(getattr(model, "is_loaded_in_4bit", False))
    model_info["load_in_8bit"] = bool(getattr(model, "is_loaded_in_8bit", False))
    model_info["bnb_4bit_quant_type"] = quant.get("bnb_4bit_quant_type")
    model_info["use_bnb_nested_quant"] = quant.get("bnb_4bit_use_double_quant")
    model_info["dtype"] = str(getattr(model, "dtype", "")).replace("torch.", "") or None
    if is_peft_model(model):
        lora = model.peft_config.get("default")
        targets = getattr(lora, "target_modules", None)
        model_info.update(
            use_peft=True,
            lora_r=getattr(lora, "r", None),
            lora_alpha=getattr(lora, "lora_alpha", None),
            lora_dropout=getattr(lora, "lora_dropout", None),
            lora_target_modules=sorted(targets) if isinstance(targets, (set, list, tuple)) else targets,
        )
    resolved = {"task": {"task": dataset_name}, "training": trainer.args.to_dict(), "model": model_info}
    hardware = hardware_summary(getattr(trainer.accelerator, "num_processes", 1))
    summary = summarize_training(resolved, steps=trainer.state.global_step or None, hardware=hardware)
    if trainer.state.max_steps and trainer.state.max_steps > 0:  # epochs resolved to steps by the Trainer
        summary["planned_steps"] = trainer.state.max_steps
    return summary
