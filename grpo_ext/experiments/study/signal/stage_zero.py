"""Stage 0 of a study (``scripts/run_methods.py``): the learning signal at the base, measured before the search
spends any budget, written to ``<out>/signal.json``.

Resumable: a ``signal.json`` recorded with the same settings (:func:`~.settings.signal_settings`) is reused without
loading the model; one recorded with other settings is measured again.
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_ext.evaluation.backends import load_model_and_tokenizer
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.signal.cli import table
from grpo_ext.experiments.study.signal.measure import measure_grid
from grpo_ext.experiments.study.signal.report_section import SIGNAL_FILE, read_signal
from grpo_ext.experiments.study.signal.settings import signal_settings
from grpo_ext.io import atomic_write_json

__all__ = ["changed_settings", "measure_settings", "run_signal_stage"]


def changed_settings(recorded: dict, current: dict) -> list[str]:
    """What differs between a recorded file's settings and the current ones, one ``key: old -> new`` each."""
    keys = sorted(set(recorded) | set(current))
    return [f"{k}: {recorded.get(k)!r} -> {current.get(k)!r}" for k in keys if recorded.get(k) != current.get(k)]


def measure_settings(settings: dict, progress: bool = True) -> dict:
    """``signal.json``'s content: :func:`measure_signal` of every objective x samples a step of `settings`, on the
    base (its device: cuda when available), in that order."""
    from grpo_ext.tasks import get_task

    model, tokenizer = load_model_and_tokenizer(settings["model"])
    task = get_task(settings["task"], **settings["task_kwargs"])
    rows = measure_grid(
        model,
        tokenizer,
        task,
        settings["objectives"],
        settings["samples"],
        settings["minibatches"],
        (settings["lora_rank"],),
        group_size=settings["num_generations"],
        train_offset=settings["train_offset"],
        max_completion_length=settings["max_completion_length"],
        loss_type=settings["loss_type"],
        temperature=settings["temperature"],
        seed=settings["seed"],
        progress=progress,
    )
    return {"settings": settings, "device": str(next(model.parameters()).device), "rows": rows}


def run_signal_stage(study, out: str | Path, options: StudyOptions) -> dict:
    """Measure ``study.signal`` into ``<out>/signal.json`` (or reuse it; see the module's doc) and return it.
    `options`: the driver's (its ``configs``, ``quick`` and the quick flags, ``progress`` are read)."""
    from grpo_ext.experiments.study.runs import quick_flags

    method = study.arm(study.signal.arm).method
    flags = quick_flags(method, options) if options.quick else None
    # a JSON round trip, so a tuple or a number read back from the file compares equal
    settings = json.loads(json.dumps(signal_settings(study, options.configs, flags)))
    path = Path(out) / SIGNAL_FILE
    recorded = read_signal(out)
    if recorded is not None and recorded.get("settings") == settings:
        print(f"=== signal: {path} holds these settings; reused", flush=True)
        return recorded
    if recorded is not None:
        changed = "; ".join(changed_settings(recorded.get("settings") or {}, settings))
        print(f"=== signal: {path} was measured with other settings ({changed}); measuring again", flush=True)
    print(f"=== signal: {settings['objectives']} x samples {settings['samples']} at the base", flush=True)
    result = measure_settings(settings, progress=options.progress)
    print(table(result["rows"], mark=settings["arm_samples"]), flush=True)
    atomic_write_json(path, result)
    return result
