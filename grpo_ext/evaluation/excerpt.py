"""The samples excerpt: a small, deterministic sample of the texts behind a report, meant to be committed with it.

``samples_excerpt.jsonl`` in a report's folder holds samples 0 to :data:`EXCERPT_SAMPLES` - 1 of every problem of
every model, one JSON object a line, models in the report's order, then problems in their order, then samples:

    {"model", "problem_id", "sample_index", "attributes", "answer", "extracted", "strict", "correct", "kind",
     "hit_budget", "question", "completion", "completion_chars"}

``extracted``: the task's lenient answer (:meth:`Task.extract_answer`); ``strict``: the answer in the strict form or
null (:meth:`Task.extract_strict_answer`); ``kind``: the anatomy's kind (null for a task without a step verifier);
``hit_budget``: whether it used all ``max_new_tokens`` (null: unknown). To stay small, ``completion`` keeps the first
:data:`COMPLETION_CHARS` characters (``completion_chars`` is the full length: larger means cut) and ``question`` the
last :data:`QUESTION_CHARS` characters of the prompt's text (where a few-shot prompt puts the question).

Samples are indexed and each index is drawn from its own seeded stream, so the excerpt is the same file whether the
samples were drawn now or read from the cache (``tests/test_report_slices.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from grpo_ext.evaluation.anatomy_adapter import sample_kind
from grpo_ext.io import atomic_write_text

__all__ = [
    "COMPLETION_CHARS",
    "EXCERPT_NAME",
    "EXCERPT_SAMPLES",
    "QUESTION_CHARS",
    "excerpt_rows",
    "first_samples",
    "write_excerpt",
]

EXCERPT_NAME = "samples_excerpt.jsonl"
#: Samples kept per problem and model: two, so a reader sees whether a problem's answers agree.
EXCERPT_SAMPLES = 2
#: A completion's characters kept (a real-model answer at 64 tokens is ~250 characters).
COMPLETION_CHARS = 600
#: The prompt's last characters kept (the question, without a few-shot prompt's examples).
QUESTION_CHARS = 300


def _text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return str(prompt[-1].get("content", "")) if prompt else ""


def excerpt_rows(task, problem: Mapping, completions: Sequence[str], hit_budget: Sequence[bool] | None) -> list[dict]:
    """The excerpt's rows of one problem (without ``model``, which the report adds)."""
    rows = []
    for index, completion in enumerate(completions[:EXCERPT_SAMPLES]):
        hit = None if hit_budget is None else bool(hit_budget[index])
        rows.append(
            {
                "problem_id": problem["problem_id"],
                "sample_index": index,
                "attributes": dict(problem.get("attributes") or {}),
                "answer": problem["answer"],
                "extracted": task.extract_answer(completion),
                "strict": task.extract_strict_answer(completion),
                "correct": bool(task.is_correct(completion, problem["answer"])),
                "kind": sample_kind(task, problem, completion, hit),
                "hit_budget": hit,
                "question": _text(problem["prompt"])[-QUESTION_CHARS:],
                "completion": completion[:COMPLETION_CHARS],
                "completion_chars": len(completion),
            }
        )
    return rows


def write_excerpt(results: Sequence[dict], out_dir) -> Path | None:
    """Write the excerpt of every result that carries one (``result["excerpt"]``, from ``evaluate_model``) into
    ``out_dir``; None, and an earlier run's excerpt removed, when none does (results read back from a report)."""
    path = Path(out_dir) / EXCERPT_NAME
    rows = [{"model": r["model"], **row} for r in results for row in r.get("excerpt") or []]
    if not rows:
        path.unlink(missing_ok=True)
        return None
    return atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def first_samples(result: Mapping) -> dict[str, str]:
    """Sample 0's completion (as the excerpt keeps it) of each problem id of a result; {} without an excerpt."""
    return {
        str(row["problem_id"]): row["completion"] for row in result.get("excerpt") or [] if row["sample_index"] == 0
    }
