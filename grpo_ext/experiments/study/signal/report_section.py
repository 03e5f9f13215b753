"""The study report's section on stage 0: ``<out>/signal.json`` (written by :mod:`.stage_zero`) as Markdown."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_ext.experiments.study.signal.cli import table

__all__ = ["SIGNAL_FILE", "TITLE", "read_signal", "render_signal"]

SIGNAL_FILE = "signal.json"
TITLE = "## The learning signal at the base (before any training)"


def read_signal(out: str | Path) -> dict | None:
    """The study's ``signal.json``; None when it has none."""
    path = Path(out) / SIGNAL_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _cosine(row: dict) -> str:
    interval = "no interval" if row["low"] is None else f"[{row['low']:+.4f}, {row['high']:+.4f}]"
    return f"{row['mean_cosine']:+.4f} {interval} ({row['objective']})"


def render_signal(signal: dict) -> list[str]:
    """The section's lines: what was measured, the table with the arms' row marked, and the arms' cosine."""
    s = signal["settings"]
    rank = f"LoRA rank {s['lora_rank']}" if s["lora_rank"] else "every parameter"
    at_arms = "; ".join(_cosine(r) for r in signal["rows"] if r["samples"] == s["arm_samples"]) or "not measured"
    interval = f"; intervals: {signal['rows'][0]['interval']}" if signal["rows"] else ""
    return [
        TITLE,
        "",
        f"Before any budget is spent: the mean pairwise cosine between the gradients of {s['minibatches']} "
        f"independent minibatches (disjoint `train` prompts) at the base `{s['model']}`, at each number of samples "
        f"a step, with {s['arm']}'s config ({s['num_generations']} samples a prompt, {s['max_completion_length']} "
        f"completion tokens, loss_type {s['loss_type']}, T = {s['temperature']:g}, {rank}){interval}. Near 0 an "
        "update is mostly noise; it rises with the batch size. The arms' batch size is chosen on it: more samples a "
        "step and fewer steps is the expected direction.",
        "",
        table(signal["rows"], mark=s["arm_samples"]),
        "",
        f"The arms train at {s['arm_samples']} samples a step ({s['arm']}'s per_device_train_batch_size x "
        f"gradient_accumulation_steps), where the cosine is {at_arms}.",
        "",
    ]
