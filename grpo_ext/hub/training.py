"""A training run's record and what a checkpoint's model card says about it.

The record, written by every runner (scripts/train.py, the method runners, the iterative loop) through
`training_run`: `grpo_ext_run.json` (`running`, then `complete` or `failed`; see `grpo_ext.checkpoints`) and the
resolved config `grpo_ext_config.yaml` (`save_resolved_config`). `grpo_ext_run.json` also keeps the trainer's
`log_history` (`compact_log_history`: every logged step's loss, reward, reward_std, frac_reward_zero_std, completion
lengths, kl, beta...), so the learning curve can be plotted from a committed record after the checkpoints are gone.
The config's reader: a summary dict built from it next to the checkpoint (`trained_with`) or from a live trainer
(`trainer_summary`).

How the gradient coefficient was computed is the registry record's own text (`GradientCoefficient.description`),
and the KL controller's line and tag are its registry entry's (`KLControllerSpec.card`, `.tag`), so a mode or a
controller added to its registry is described on the card without editing this file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from grpo_ext.advantages import GradientCoefficient, get_gradient_coefficient
from grpo_ext.checkpoints import write_run_status
from grpo_ext.cli import one_line
from grpo_ext.errors import UserError
from grpo_ext.io import atomic_write_text, portable_path
from grpo_ext.kl_control import KLControllerSpec, get_kl_controller

__all__ = [
    "CONFIG_FILE",
    "LOG_DIGITS",
    "TRAINER_STATE_FILE",
    "compact_log_history",
    "hardware_summary",
    "is_embedded",
    "is_hub_id",
    "resolved_config",
    "save_resolved_config",
    "summarize_training",
    "task_dataset",
    "trained_with",
    "trainer_summary",
    "training_run",
]

#: The resolved config every training run writes into its output folder (`{task, training, model}` sections).
CONFIG_FILE = "grpo_ext_config.yaml"
TRAINER_STATE_FILE = "trainer_state.json"
#: Significant digits a logged float keeps in the run record: a learning curve reads the same, the record stays small.
LOG_DIGITS = 4
# Path-valued fields of the resolved config, recorded relative to the output folder or the repository.
_PATH_FIELDS = {"training": ("output_dir", "logging_dir", "resume_from_checkpoint"), "model": ("model_name_or_path",)}

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
    """`org/name` (or `name`) that is not an existing local path."""
    if not name or os.path.exists(os.path.expanduser(name)) or name.startswith((".", "/", "~")):
        return False
    return name.count("/") <= 1 and " " not in name


def is_embedded(name: str | None) -> bool:
    """Whether `name` is the shipped embedded base model (its name or its folder)."""
    if not name:
        return False
    from grpo_ext.models import EMBEDDED_MODEL_DIR, EMBEDDED_NAME

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


def summarize_training(resolved: dict, steps: int | None = None, hardware: str | None = None) -> dict:
    """The card's view of a run from its resolved config (`{task, training, model}` sections, any may be missing)."""
    task = resolved.get("task") or {}
    training = resolved.get("training") or {}
    model = resolved.get("model") or {}
    use_peft = bool(model.get("use_peft"))

    mode = training.get("advantage_mode") or "outcome"
    record = _registry_record(mode)
    extensions = []
    zero_std = training.get("zero_std_groups") or "keep"
    if zero_std != "keep":
        extra = f", up to {training.get('max_refill_rounds')} refill rounds" if zero_std == "refill" else ""
        extensions.append(f"zero-std groups: {zero_std}{extra}")
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
    """Summary of how `checkpoint_dir` was trained, from its `grpo_ext_config.yaml` (or its parent's); None if absent.

    The step count comes from `trainer_state.json` when there is one, else from `max_steps`.
    """
    resolved = resolved_config(checkpoint_dir)
    if resolved is None:
        return None
    return summarize_training(resolved, steps=_global_step(Path(checkpoint_dir)), hardware=resolved.get("hardware"))


def resolved_config(checkpoint_dir: str | os.PathLike) -> dict | None:
    """The resolved config a run wrote next to `checkpoint_dir` (`grpo_ext_config.yaml`, or its parent's for a
    `checkpoint-N` folder); None if there is none."""
    folder = Path(checkpoint_dir)
    for candidate in (folder / CONFIG_FILE, folder.parent / CONFIG_FILE):
        if candidate.is_file():
            try:
                resolved = yaml.safe_load(candidate.read_text()) or {}
            except yaml.YAMLError as err:
                raise UserError(f"{candidate}: not valid YAML ({err})") from err
            if not isinstance(resolved, dict):
                raise UserError(f"{candidate}: expected a mapping with task/training/model sections")
            return resolved
    return None


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


# ---- writing the record ---------------------------------------------------------------------------------------------


def _compact(value):
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None  # JSON has no NaN: a null, which a plot reads back as a gap (float("nan") in numpy)
        if value.is_integer():
            return value  # counts logged as floats (num_tokens, total_flos) stay exact
        return float(f"{value:.{LOG_DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): _compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_compact(v) for v in value]
    try:  # numpy / torch scalars
        return _compact(value.item())
    except (AttributeError, ValueError):
        return str(value)


def compact_log_history(log_history: list[dict]) -> list[dict]:
    """TRL's ``trainer.state.log_history`` as the run record keeps it: every entry and key, floats rounded to
    :data:`LOG_DIGITS` significant digits (integral ones, counts such as ``num_tokens``, kept exact), NaN and
    infinities as null (strict JSON)."""
    return [_compact(entry) for entry in log_history]


def save_resolved_config(output_dir: str | os.PathLike, task_args, training_args, model_args) -> Path:
    """All three argument groups as one YAML, next to the model (what was really run). Paths are recorded relative to
    the output folder or the repository (the shipped base model as `embedded`, a real model by its name), so the
    record names no folder of the machine that ran it. ``task_args``: any dataclass holding the task fields
    (`grpo_ext.script_args.TaskFields`)."""
    from grpo_ext.models import known_model_name

    task = dataclasses.asdict(task_args)
    task.pop("overwrite_output_dir", None)  # what happened to an earlier run's folder, not how this one trained
    resolved = {
        "task": task,
        "training": training_args.to_dict(),
        "model": {k: v for k, v in dataclasses.asdict(model_args).items()},
    }
    for section, fields in _PATH_FIELDS.items():
        for field in fields:
            value = resolved[section].get(field)
            if isinstance(value, str) and value:
                resolved[section][field] = known_model_name(value) or portable_path(value, base=output_dir)
    return atomic_write_text(
        Path(output_dir) / CONFIG_FILE, yaml.safe_dump(resolved, sort_keys=False, default_flow_style=False)
    )


class TrainingRun:
    """What `training_run` yields: ``save_config()`` writes the resolved config now (before a model card that reads
    it); otherwise it is written when the block ends without an error. ``write_status(status, **info)`` records the
    run's status with its log history so far (main process only)."""

    def __init__(self, trainer, task_args, model_args, main_process: bool):
        self.trainer, self.task_args, self.model_args, self.main_process = trainer, task_args, model_args, main_process
        self.config_saved = False

    def write_status(self, status: str, **info) -> None:
        if self.main_process:
            history = compact_log_history(self.trainer.state.log_history)
            write_run_status(self.output_dir, status, **info, log_history=history)

    @property
    def output_dir(self) -> str:
        return self.trainer.args.output_dir

    def save_config(self) -> None:
        if self.main_process:
            save_resolved_config(self.output_dir, self.task_args, self.trainer.args, self.model_args)
        self.config_saved = True


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (a scheduler's or `kill`'s stop) raises `SystemExit(143)` in the main thread, as Ctrl-C raises
    `KeyboardInterrupt`: the run's record then says `failed` instead of `running` forever, and the exit code stays
    a signal's (128 + 15). Elsewhere (not the main thread) the handler cannot be set and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stopped_by(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"stopped (exit {err.code}{', SIGTERM' if err.code == 128 + signal.SIGTERM else ''})"
    if isinstance(err, KeyboardInterrupt):
        return "stopped (KeyboardInterrupt)"
    return one_line(err)


@contextlib.contextmanager
def training_run(trainer, task_args, model_args) -> Iterator[TrainingRun]:
    """The lifecycle of one training run in ``trainer.args.output_dir``, the same whichever runner trains:

    on entry the run status `running` (with ``max_steps``); when the block (train, save) ends without an error, the
    resolved config (unless ``save_config()`` wrote it already) and the status `complete` (with the global step);
    when it raises, the status `failed` with the error in one line and the step reached, and the error goes on.
    Only the main process writes. The status is written last, so a run whose record is half-written is never
    `complete`. Every status carries the trainer's log history so far (`compact_log_history`), and the `running`
    record is rewritten with each checkpoint saved, so a run killed outright keeps its curve up to its last checkpoint.
    """
    run = TrainingRun(trainer, task_args, model_args, trainer.accelerator.is_main_process)
    callback = _StatusAtCheckpoints(run)
    with _sigterm_as_exit():  # set before `running` is written: no kill leaves the record saying `running`
        run.write_status("running", max_steps=trainer.args.max_steps)
        trainer.add_callback(callback)
        try:
            yield run
            if not run.config_saved:
                run.save_config()
        except (Exception, KeyboardInterrupt, SystemExit) as err:  # a kill (SIGTERM) or Ctrl-C ends the run too
            # best effort: with a full disk even this can fail, and the status stays `running`
            with contextlib.suppress(OSError):
                run.write_status("failed", error=_stopped_by(err), step=trainer.state.global_step)
            raise
        finally:
            trainer.remove_callback(callback)
    run.write_status("complete", global_step=trainer.state.global_step)


class _StatusAtCheckpoints(TrainerCallback):
    """Rewrites the `running` record with each checkpoint saved."""

    def __init__(self, run: TrainingRun):
        self.run = run

    def on_save(self, args, state, control, **kwargs):
        self.run.write_status("running", max_steps=args.max_steps, step=state.global_step)
