"""Ground truth for the reward model's data: the task's verifier labels each policy sample (and each step of it,
for a process RM), because the RM is meant to approximate the verifier."""

from __future__ import annotations

import math

from grpo_ext.errors import UserError
from grpo_ext.tasks.base import completion_text

__all__ = ["check_verifier", "label_samples"]


def check_verifier(task, reward_model_type: str, train_dataset) -> None:
    """The loop needs ground truth: reference answers (outcome) and, for a process RM, a step verifier."""
    if "answer" not in train_dataset.column_names:
        raise UserError(
            f"task {task.name!r} has no verifier: its data has no 'answer' column to check samples against "
            "(iterative RL labels the RM's data with the verifier)"
        )
    if reward_model_type == "process" and not task.has_step_verifier:
        raise UserError(
            f"reward_model_type: `process` needs a step verifier, and task {task.name!r} has none (verify_steps); "
            "use reward_model_type: outcome"
        )
    if reward_model_type == "process" and not task.step_separator:
        raise UserError(f"reward_model_type: `process` needs task {task.name!r} to define a step separator")


def label_samples(task, reward_model_type: str, prompts, answers, completions, tag: str, iteration: int) -> list[dict]:
    """Verifier-labelled records, one per completion (``completions[i]`` are the samples of ``prompts[i]``).

    Ids are ``<tag>/<prompt index>/<sample index>``: unique across iterations, which the replay relies on.
    """
    records = []
    for i, (prompt, answer, samples) in enumerate(zip(prompts, answers, completions, strict=True)):
        for j, completion in enumerate(samples):
            record = {
                "id": f"{tag}/{i}/{j}",
                "iteration": iteration,
                "prompt": prompt,
                "completion": completion,
                "label": int(task.is_correct(completion, answer)),
            }
            if reward_model_type == "process":
                # a step with nothing to check (NaN) gets no label (None): the RM is not trained there
                scores = task.verify_steps(completion_text(prompt), completion)  # a chat prompt: its text
                record["step_labels"] = [None if math.isnan(s) else float(s) for s in scores]
            records.append(record)
    return records
