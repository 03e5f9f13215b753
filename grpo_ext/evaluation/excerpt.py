"""The samples excerpt: a small, deterministic sample of the texts behind a report, meant to be committed with it.

``samples_excerpt.jsonl`` in a report's folder holds samples 0 to :data:`EXCERPT_SAMPLES` - 1 of every problem of
every model, one JSON object a line, models in the report's order, then problems in their order, then samples:

    {"model", "problem_id", "sample_index", "attributes", "answer", "extracted", "strict", "correct", "kind",
     "hit_budget", "question", "completion", "completion_chars"}

``extracted``: the task's lenient answer (:meth:`Task.extract_answer`); ``strict``: the answer in the strict form or
null (:meth:`Task.extract_strict_answer`); ``kind``: the anatomy's kind (null for a task without a step verifier);
``hit_budget``: whether it used all ``max_new_tokens`` (null: unknown). To stay small, ``completion`` keeps the first
:data:`COMPLETION_CHARS` characters (``completion_chars`` is the full length: larger means cut) and ``question`` is
:func:`question_text` of the prompt (its last ``Question: ...``, without a few-shot prompt's examples).

Samples are indexed and each index is drawn from its own seeded stream, so the excerpt is the same file whether the
samples were drawn now or read from the cache (``tests/evaluation/test_report_slices.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from grpo_ext.evaluation.failures import failure_kind
from grpo_ext.io import atomic_write_text

__all__ = [
    "COMPLETION_CHARS",
    "EXCERPT_NAME",
    "EXCERPT_SAMPLES",
    "QUESTION_CHARS",
    "excerpt_rows",
    "first_samples",
    "question_text",
    "write_excerpt",
]

EXCERPT_NAME = "samples_excerpt.jsonl"
#: Samples kept per problem and model: two, so a reader sees whether a problem's answers agree.
EXCERPT_SAMPLES = 2
#: A completion's characters kept (a real-model answer at 64 tokens is ~250 characters).
COMPLETION_CHARS = 600
#: A question's characters kept (:func:`question_text`).
QUESTION_CHARS = 300
#: Where a GSM8K-format prompt puts the question to answer (after its worked examples, each with their own).
QUESTION_MARK, ANSWER_CUE = "Question:", "Answer:"


def question_text(prompt, chars: int = QUESTION_CHARS) -> str:
    """The question of a prompt (text or chat messages: the last message's), to show beside its samples: from the
    last ``Question:`` on, without the ``Answer:`` cue that ends it (its first ``chars`` characters, ``…`` where
    cut), or, without one, the prompt's last ``chars`` characters (where a few-shot prompt puts the question)."""
    text = prompt if isinstance(prompt, str) else str(prompt[-1].get("content", "")) if prompt else ""
    start = text.rfind(QUESTION_MARK)
    if start >= 0:
        question = text[start:].strip().removesuffix(ANSWER_CUE).strip()
        return question if len(question) <= chars else question[: chars - 1] + "…"
    return text if len(text) <= chars else "…" + text[-(chars - 1) :]


def excerpt_rows(task, problem: Mapping, completions: Sequence[str], hit_budget: Sequence[bool] | None) -> list[dict]:
    """The excerpt's rows of one problem (without ``model``, which the report adds)."""
    rows = []
    for index, completion in enumerate(completions[:EXCERPT_SAMPLES]):
        hit = None if hit_budget is None else bool(hit_budget[index])
        # cut off at the length cap: no answer, as score_problem counts it
        correct = not hit and bool(task.is_correct(completion, problem["answer"]))
        extracted = None if hit else task.extract_answer(completion)
        kind = (
            failure_kind(
                task, problem["prompt"], completion, problem["answer"], hit, correct=correct, extracted=extracted
            )
            if task.has_step_verifier
            else None
        )
        rows.append(
            {
                "problem_id": problem["problem_id"],
                "sample_index": index,
                "attributes": dict(problem.get("attributes") or {}),
                "answer": problem["answer"],
                "extracted": extracted,
                "strict": None if hit else task.extract_strict_answer(completion),
                "correct": correct,
                "kind": kind,
                "hit_budget": hit,
                "question": question_text(problem["prompt"]),
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
