"""Model cards for grpo-ext checkpoints: Hub metadata, a `model-index` with pass@k / maj@k results, and a body
saying how the model was trained and how to load it.

- `trained_with(checkpoint_dir)` reads the resolved config scripts/train.py saves (`grpo_ext_config.yaml`, in the
  folder or its parent for a `checkpoint-N`) into a summary; `trainer_summary(trainer)` builds the same summary
  from a live trainer (TRL's `create_model_card` hook, so `push_to_hub: true` carries this card).
- the evaluation section comes from the harness's `report.json`, read by `grpo_ext.evaluation.report.read_report`.
- `build_model_card(...)` / `trainer_model_card(trainer, ...)` return a `huggingface_hub.ModelCard`.
"""

from __future__ import annotations

import json
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from grpo_ext.evaluation.report import metric_table, read_report

CONFIG_FILE = "grpo_ext_config.yaml"
TRAINER_STATE_FILE = "trainer_state.json"

__all__ = [
    "build_model_card",
    "eval_results",
    "hardware_summary",
    "summarize_training",
    "trained_with",
    "trainer_model_card",
    "trainer_summary",
]

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


# ---- what was trained ---------------------------------------------------------------------------------------


def _is_hub_id(name: str | None) -> bool:
    """`org/name` (or `name`) that is not an existing local path."""
    if not name or os.path.exists(os.path.expanduser(name)) or name.startswith((".", "/", "~")):
        return False
    return name.count("/") <= 1 and " " not in name


def _is_embedded(name: str | None) -> bool:
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
    return name if _is_hub_id(name) else None


def hardware_summary(num_processes: int | None = None) -> str:
    """`2 x NVIDIA A100-SXM4-80GB` or `1 x CPU (x86_64, 2 cores)`: what this process trains on."""
    import torch

    n = num_processes or 1
    if torch.cuda.is_available():
        return f"{n} x {torch.cuda.get_device_name(0)}"
    return f"{n} x CPU ({platform.machine()}, {os.cpu_count()} cores)"


def summarize_training(resolved: dict, steps: int | None = None, hardware: str | None = None) -> dict:
    """The card's view of a run from its resolved config (`{task, training, model}` sections, any may be missing)."""
    task = resolved.get("task") or {}
    training = resolved.get("training") or {}
    model = resolved.get("model") or {}
    use_peft = bool(model.get("use_peft"))
    load_in_4bit = bool(model.get("load_in_4bit"))
    quant = None
    if load_in_4bit:
        quant = (
            f"4-bit {model.get('bnb_4bit_quant_type') or 'nf4'}"
            + (" with double quantisation" if model.get("use_bnb_nested_quant") else "")
            + " (bitsandbytes)"
        )
    elif model.get("load_in_8bit"):
        quant = "8-bit (bitsandbytes)"
    lora = None
    if use_peft:
        targets = model.get("lora_target_modules") or "all-linear"
        lora = {
            "r": model.get("lora_r"),
            "alpha": model.get("lora_alpha"),
            "dropout": model.get("lora_dropout"),
            "target_modules": targets if isinstance(targets, str) else list(targets),
        }

    advantage_mode = training.get("advantage_mode") or "outcome"
    extensions = []
    if advantage_mode == "process":
        source = training.get("process_reward_model") or ", ".join(training.get("process_reward_funcs") or []) or "?"
        extensions.append(f"process-supervision advantages (DeepSeekMath 4.1.3), step rewards from {source}")
    elif advantage_mode == "online_rft":
        extensions.append("online RFT gradient coefficient (1 for a correct sample, 0 otherwise)")
    zero_std = training.get("zero_std_groups") or "keep"
    if zero_std != "keep":
        extra = f", up to {training.get('max_refill_rounds')} refill rounds" if zero_std == "refill" else ""
        extensions.append(f"zero-std groups: {zero_std}{extra}")
    if (training.get("kl_controller") or "fixed") == "adaptive":
        extensions.append(
            f"adaptive KL coefficient (Ziegler et al. 2019): target_kl {training.get('target_kl')}, "
            f"horizon {training.get('kl_horizon')}, initial beta {training.get('beta')}"
        )

    tags = ["trl", "grpo", "grpo-ext"]
    if use_peft:
        tags.append("lora")
    if use_peft and load_in_4bit:
        tags.append("qlora")
    if advantage_mode == "process":
        tags.append("process-supervision")
    if advantage_mode == "online_rft":
        tags.append("online-rft")
    if (training.get("kl_controller") or "fixed") == "adaptive":
        tags.append("adaptive-kl")

    if hardware is None:
        hardware = "CPU" if training.get("use_cpu") else "GPU"
    if steps is None and isinstance(training.get("max_steps"), int) and training["max_steps"] > 0:
        steps = training["max_steps"]
    return {
        "method": "GRPO" if advantage_mode != "online_rft" else "online RFT",
        "base_model": model.get("model_name_or_path"),
        "task": task.get("task"),
        "task_kwargs": task.get("task_kwargs") or {},
        "dataset": task_dataset(task.get("task"), task.get("task_kwargs")),
        "reward_funcs": task.get("reward_funcs"),
        "quantization": quant,
        "lora": lora,
        "dtype": model.get("dtype"),
        "precision": "bf16" if training.get("bf16") else "fp16" if training.get("fp16") else "fp32",
        "extensions": extensions,
        "hyperparameters": {label: training[key] for label, key in _GRPO_FIELDS if training.get(key) is not None},
        "steps": steps,
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
    folder = Path(checkpoint_dir)
    for candidate in (folder / CONFIG_FILE, folder.parent / CONFIG_FILE):
        if candidate.is_file():
            try:
                resolved = yaml.safe_load(candidate.read_text()) or {}
            except yaml.YAMLError as err:
                raise ValueError(f"{candidate}: not valid YAML ({err})") from err
            if not isinstance(resolved, dict):
                raise ValueError(f"{candidate}: expected a mapping with task/training/model sections")
            return summarize_training(resolved, steps=_global_step(folder), hardware=resolved.get("hardware"))
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
    return summarize_training(resolved, steps=trainer.state.global_step or None, hardware=hardware)


# ---- evaluation results -------------------------------------------------------------------------------------


def eval_results(report: dict, dataset: str | None = None) -> list[EvalResult]:
    """The `model-index` entries of a harness result (see `read_report`): one per metric and k, pass@k first."""
    task = str(report["task"])
    params = _sampling(report)
    args = {"n": report.get("n"), **params}
    results = []
    for metric in ("pass@k", "maj@k"):
        for k, value in metric_table(report, metric).items():
            name = metric.replace("@k", f"@{k}")
            results.append(
                EvalResult(
                    task_type="text-generation",
                    task_name=f"{task} (pass@k / maj@k, grpo-ext harness)",
                    dataset_type=dataset or task,
                    dataset_name=str(report.get("task_id") or task),
                    dataset_split=report.get("split"),
                    metric_type=name,
                    metric_name=f"{name} (n={report.get('n')})",
                    metric_value=value,
                    metric_args={key: v for key, v in {**args, "k": k}.items() if v is not None},
                )
            )
    return results


# ---- the card -----------------------------------------------------------------------------------------------


def _versions() -> str:
    lines = []
    for package in ("grpo-ext", "trl", "transformers", "peft", "bitsandbytes", "torch"):
        try:
            lines.append(f"- {package}: {version(package)}")
        except PackageNotFoundError:
            continue
    return "\n".join(lines)


def _describe_base(base: str | None) -> str:
    if base is None:
        return "an unrecorded base model"
    if _is_embedded(base):
        return "the grpo-ext embedded base model (a 1 M-parameter Llama with a character tokenizer)"
    if _is_hub_id(base):
        return f"[{base}](https://huggingface.co/{base})"
    return f"the local model `{base}`"


def _load_section(repo_id: str, kind: str, base: str | None, quantized: bool) -> str:
    if kind == "adapter":
        base_ref = base if _is_hub_id(base) else "PATH/TO/BASE_MODEL"
        text = (
            "A LoRA adapter: load it on its base model with PEFT.\n\n```python\n"
            "from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'base = AutoModelForCausalLM.from_pretrained("{base_ref}")\n'
            f'model = PeftModel.from_pretrained(base, "{repo_id}")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")\n```\n'
        )
        if quantized:
            text += (
                "\nIt was trained on the base loaded in 4 bit; to run it that way, load the base with "
                '`quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", '
                "bnb_4bit_use_double_quant=True)`. To serve it without PEFT, merge it into the full-precision base "
                "(`model.merge_and_unload()`, or `scripts/publish.py --merge` in grpo-ext).\n"
            )
        if not _is_hub_id(base):
            text += f"\nThe base is {_describe_base(base)}, not a Hub model: point `from_pretrained` at its folder.\n"
        return text
    merged = (
        "The LoRA adapter is merged into the base weights loaded in full precision (not into 4-bit weights), so "
        "this is a plain transformers model: no PEFT and no bitsandbytes needed.\n\n"
        if kind == "merged"
        else ""
    )
    return (
        f"{merged}```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")\n```\n'
    )


def _training_section(summary: dict | None, kind: str) -> str:
    if summary is None:
        return "No training record (`grpo_ext_config.yaml`) was found next to this checkpoint.\n"
    lines = [
        f"- method: {summary['method']} with [TRL](https://github.com/huggingface/trl)'s `GRPOTrainer` extended by "
        "grpo-ext (`GRPOExtTrainer`)",
    ]
    if summary.get("task"):
        task = f"`{summary['task']}`"
        if summary.get("task_kwargs"):
            task += f" ({', '.join(f'{k}={v}' for k, v in summary['task_kwargs'].items())})"
        if summary.get("dataset"):
            task += f", data: [{summary['dataset']}](https://huggingface.co/datasets/{summary['dataset']})"
        lines.append(f"- task: {task}")
    if summary.get("reward_funcs"):
        lines.append(f"- rewards: {', '.join(map(str, summary['reward_funcs']))}")
    if summary.get("quantization"):
        lines.append(f"- base weights: {summary['quantization']} (QLoRA); other weights in {summary.get('dtype')}")
    if summary.get("lora"):
        lora = summary["lora"]
        targets = lora["target_modules"]
        targets = targets if isinstance(targets, str) else ", ".join(targets)
        lines.append(
            f"- LoRA: r={lora['r']}, alpha={lora['alpha']}, dropout={lora['dropout']}, target modules: {targets}"
        )
    lines.append(
        "- grpo-ext extensions: " + ("; ".join(summary["extensions"]) if summary["extensions"] else "none (plain GRPO)")
    )
    lines += [f"- {label}: {value}" for label, value in summary["hyperparameters"].items()]
    lines.append(f"- training steps: {summary['steps'] if summary.get('steps') is not None else 'unknown'}")
    lines.append(f"- precision: {summary['precision']}; hardware: {summary['hardware']}")
    if kind == "merged" and summary.get("quantization"):
        lines.append(
            "- note: the adapter was trained against the 4-bit base and is merged here into the full-precision "
            "base, so outputs can differ slightly from the policy as trained"
        )
    return "\n".join(lines) + "\n"


def _sampling(report: dict) -> dict:
    """The sampling settings a card names (temperature, top_p, max_new_tokens), those the result records."""
    params = report.get("params") if isinstance(report.get("params"), dict) else {}
    return {k: params[k] for k in ("temperature", "top_p", "max_new_tokens") if k in params}


def _eval_section(report: dict | None) -> str:
    if report is None:
        return ""
    passes, majs = metric_table(report, "pass@k"), metric_table(report, "maj@k")
    rows = [
        f"| {k} | {passes[k]:.3f} | {majs[k]:.3f} |"
        if k in passes and k in majs
        else f"| {k} | {passes.get(k, '–')} | {majs.get(k, '–')} |"
        for k in sorted(set(passes) | set(majs))
    ]
    sampling = ", ".join(f"{k} {v}" for k, v in _sampling(report).items())
    problems = f" ({report['n_problems']} problems)" if report.get("n_problems") else ""
    sampling = f", {sampling}" if sampling else ""
    return (
        "## Evaluation\n\n"
        f"Pass@k (unbiased estimator) and maj@k (exact expectation of the majority vote) on `{report['task_id']}`"
        f"{problems}, n = {report['n']} samples per problem{sampling}, from the grpo-ext evaluation harness.\n\n"
        "| k | pass@k | maj@k |\n|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
    )


def build_model_card(
    checkpoint_dir: str | os.PathLike | None,
    repo_id: str,
    eval_report: dict | str | os.PathLike | None = None,
    *,
    kind: str = "adapter",
    base_model: str | None = None,
    license: str | None = None,
    summary: dict | None = None,
    eval_model: str | None = None,
    extra_tags: list[str] | None = None,
) -> ModelCard:
    """The Hub card of a checkpoint uploaded as `kind`: `adapter` (LoRA weights), `merged` or `model` (full weights).

    `summary` defaults to `trained_with(checkpoint_dir)`; `eval_report` is a report path or a result already read
    (see `grpo_ext.evaluation.report.read_report`; `eval_model` picks the model of a report with several);
    `base_model` overrides the recorded base (a Hub id goes into the metadata, a local folder only into the text);
    `license` defaults to apache-2.0 for the embedded base, else `other`.
    """
    if kind not in ("adapter", "merged", "model"):
        raise ValueError(f"kind: expected adapter, merged or model, got {kind!r}")
    if summary is None and checkpoint_dir is not None:
        summary = trained_with(checkpoint_dir)
    report = read_report(eval_report, eval_model) if isinstance(eval_report, (str, os.PathLike)) else eval_report
    base = base_model or (summary or {}).get("base_model")
    dataset = (summary or {}).get("dataset")
    report_dataset = task_dataset(report["task"]) if report else None
    datasets = sorted({d for d in (dataset, report_dataset) if d})
    tags = list((summary or {}).get("tags") or ["trl", "grpo", "grpo-ext"])
    tags += [t for t in (extra_tags or []) if t not in tags]
    if license is None:
        license = "apache-2.0" if _is_embedded(base) else "other"
    name = repo_id.split("/")[-1]

    card_data = ModelCardData(
        base_model=base if _is_hub_id(base) else None,
        library_name="peft" if kind == "adapter" else "transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=tags,
        datasets=datasets or None,
        model_name=name,
        eval_results=eval_results(report, report_dataset) if report else None,
    )
    quantized = bool((summary or {}).get("quantization"))
    what = {"adapter": "a LoRA adapter", "merged": "merged weights", "model": "full weights"}[kind]
    body = (
        f"# {name}\n\n"
        f"{what[0].upper()}{what[1:]} for {_describe_base(base)}, fine-tuned with reinforcement learning "
        f"({(summary or {}).get('method', 'GRPO')}, as in DeepSeekMath) using "
        "grpo-ext, an extension of TRL's GRPO trainer"
        f"{' with a 4-bit QLoRA base' if quantized else ''}.\n\n"
        f"## How to load\n\n{_load_section(repo_id, kind, base, quantized)}\n"
        f"## Training\n\n{_training_section(summary, kind)}\n"
        f"{_eval_section(report)}"
        f"## Framework versions\n\n{_versions()}\n"
    )
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n{body}")


def trainer_model_card(
    trainer, model_name: str | None = None, dataset_name: str | None = None, tags: str | list[str] | None = None
) -> ModelCard:
    """The grpo-ext card for a trainer's output (what `GRPOExtTrainer.create_model_card` writes to README.md)."""
    repo_id = (
        getattr(trainer, "hub_model_id", None)
        or trainer.args.hub_model_id
        or model_name
        or Path(trainer.args.output_dir).name
    )
    from accelerate.utils import is_peft_model

    extra = [tags] if isinstance(tags, str) else list(tags or [])
    return build_model_card(
        None,
        repo_id,
        kind="adapter" if is_peft_model(trainer.model) else "model",
        summary=trainer_summary(trainer, dataset_name),
        extra_tags=extra,
    )
