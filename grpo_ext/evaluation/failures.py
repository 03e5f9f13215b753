"""Failure anatomy: why a sample is wrong. Format (it never finished, or gave no marked answer) against content
(a marked answer that is wrong, with or without a wrong step on the way).

Kinds, tried in this order (:func:`failure_kind`):

- ``right``: the task's verifier accepts the final answer;
- ``truncated``: the completion used the whole token budget (``max_new_tokens``) without a right answer: it never
  stopped (counted by re-tokenising the text, which the sampler stored without its end-of-sequence token);
- ``no_answer``: it stopped, but with no marked answer (no ``####`` number and no ``\\boxed{}``);
- ``wrong_arithmetic``: a marked, wrong answer, and some step before it fails the task's step verifier (a false
  equation, or a number that is not in the problem);
- ``wrong_other``: a marked, wrong answer with every step before it checking out (a wrong plan, a copied number).

``truncated`` and ``no_answer`` are the format failures.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from grpo_ext.steps import step_texts
from grpo_ext.tasks.answers import last_boxed
from grpo_ext.tasks.base import Task, completion_text

FAILURE_KINDS = ("right", "truncated", "no_answer", "wrong_arithmetic", "wrong_other")
FORMAT_KINDS = ("truncated", "no_answer")
_MARKED_RE = re.compile(r"####\s*-?\$?\d")


def has_marked_answer(completion: str) -> bool:
    """A ``#### <number>`` or a ``\\boxed{...}`` in the completion."""
    return _MARKED_RE.search(completion) is not None or last_boxed(completion) is not None


def failure_kind(task: Task, prompt, completion: str, answer: str, n_tokens: int, max_new_tokens: int) -> str:
    """One of :data:`FAILURE_KINDS` for one sample (see the module's docstring)."""
    if task.is_correct(completion, answer):
        return "right"
    if n_tokens >= max_new_tokens:
        return "truncated"
    if not has_marked_answer(completion):
        return "no_answer"
    if task.has_step_verifier and task.step_separator is not None:
        scores = task.verify_steps(completion_text(prompt), completion)
        steps = step_texts(completion, task.step_separator)
        answer_lines = ("####", "\\boxed")  # the answer's own line is what is wrong, not a step on the way
        if any(
            score == 0.0 and not any(m in step for m in answer_lines) for step, score in zip(steps, scores, strict=True)
        ):
            return "wrong_arithmetic"
    return "wrong_other"


def anatomy(kinds: Iterable[str]) -> dict:
    """Counts and shares of each kind, and the share of failures that are format failures."""
    counts = Counter(kinds)
    total = sum(counts.values())
    failures = total - counts["right"]
    out = {"samples": total, "counts": {k: counts[k] for k in FAILURE_KINDS}}
    out["shares"] = {k: counts[k] / total if total else 0.0 for k in FAILURE_KINDS}
    fmt = sum(counts[k] for k in FORMAT_KINDS)
    out["format_share_of_failures"] = fmt / failures if failures else 0.0
    return out


def anatomy_markdown(rows: dict[str, dict]) -> list[str]:
    """A table: one row per (label -> :func:`anatomy`)."""
    lines = [
        "| model | samples | right | truncated | no answer | wrong arithmetic | wrong, steps ok | format / failures |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, a in rows.items():
        s = a["shares"]
        cells = " | ".join(f"{s[k]:.3f}" for k in FAILURE_KINDS)
        lines.append(f"| {label} | {a['samples']} | {cells} | {a['format_share_of_failures']:.3f} |")
    return lines
