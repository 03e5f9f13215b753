"""One problem's samples -> the counts every metric needs; many problems' counts -> the means a report shows.

The harness scores a problem as soon as its ``n`` samples are in and keeps only what :func:`score_problem`
returns, never the completions: at n = 1024 the per-problem record is a few numbers (plus one ``[count,
n_correct]`` pair per distinct answer) whatever the length of the completions, so a report's memory and its
``report.json`` grow with the number of problems and distinct answers, not with the text sampled.

A problem record (``per_problem[i]`` of a harness result):

- ``n_correct``: samples the task's checker accepts; with ``n`` this gives pass@k, pass^k and Cover@tau exactly;
- ``n_extracted``: samples with an answer; ``top_answer``: the most frequent one (first seen on a tie);
  ``top_answers``: the :data:`TOP_ANSWERS` most frequent as ``[answer, count]`` (what "moved" lists show);
- ``n_strict``: samples that state their answer in the task's strict form (:meth:`Task.extract_strict_answer`);
  ``n_correct_strict``: those among them that are right (the registry's ``strict_share`` / ``strict_accuracy``);
- ``attributes``: the problem's slice attributes (:meth:`Task.problem_attributes`, kept by ``validate_problems``);
- ``anatomy``: the content-first failure anatomy's counts of its samples, for a task with a step verifier
  (:func:`grpo_ext.evaluation.failures.anatomy_counts`); absent otherwise;
- ``answer_classes``: ``[count, n_correct]`` of each distinct answer, largest first: the signature that maj@k is
  a function of (:func:`grpo_ext.evaluation.metrics.answer_signature`), so maj@k at any other k can be recomputed
  from the report alone;
- ``distinct_answers``, ``answer_entropy``: :func:`grpo_ext.evaluation.metrics.answer_diversity` of its answers;
- ``maj@k``: the exact maj@k for each k of the run (``{"k": value}``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from grpo_ext.evaluation.failures import add_counts, anatomy_counts
from grpo_ext.evaluation.majority import maj_from_signature
from grpo_ext.evaluation.metrics import answer_diversity, answer_signature
from grpo_ext.evaluation.registry import MAJ_AT_K, METRICS

if TYPE_CHECKING:  # grpo_ext.tasks imports datasets: not needed to score
    from grpo_ext.tasks.base import Task

__all__ = ["DEFAULT_TAUS", "TOP_ANSWERS", "check_taus", "score_problem", "summarize", "tau_key"]

#: Cover@tau thresholds reported by default: solved at least sometimes (0.1), usually (0.5), reliably (0.9).
DEFAULT_TAUS = (0.1, 0.5, 0.9)
#: Answers kept with their counts per problem: enough to show a shortcut ("56 in 62 of 64") beside the runner-up.
TOP_ANSWERS = 3


def check_taus(taus: Iterable[float]) -> list[float]:
    """The Cover@tau thresholds as sorted distinct floats; each must be a number in [0, 1]."""
    out = []
    for tau in taus:
        if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)):
            raise ValueError(f"every tau must be a number in [0, 1], got {tau!r}")
        if not 0.0 <= float(tau) <= 1.0:  # also rejects NaN
            raise ValueError(f"every tau must be in [0, 1] (a fraction of a problem's samples), got {tau!r}")
        out.append(float(tau))
    return sorted(set(out))


def tau_key(tau: float) -> str:
    """How reports name a threshold (the JSON key of ``cover@tau``): ``0.5`` -> ``"0.5"``."""
    return repr(float(tau))


def _attributes(task: Task, problem: dict) -> dict[str, str]:
    """A problem's slice attributes: those ``validate_problems`` kept, else read from the problem as the task reads a
    row (a problem dict made by hand)."""
    attributes = problem.get("attributes")
    if attributes is None:
        attributes = task.problem_attributes(problem)
    return {str(k): str(v) for k, v in attributes.items()}


def score_problem(
    task: Task,
    problem: dict,
    completions: Sequence[str],
    ks: Sequence[int],
    memo: dict | None = None,
    *,
    hit_budget: list[bool] | None = None,
) -> dict:
    """The record of one problem from its ``n`` completions (see the module docstring).

    ``ks``: sorted, each in ``[1, n]``. ``memo``: a dict shared across the problems of a run, so that problems with
    the same answer signature compute maj@k once. ``hit_budget``: per completion, whether it used all
    ``max_new_tokens`` (None: unknown), for the anatomy (:mod:`grpo_ext.evaluation.failures`); such a sample has no
    answer (not right, no vote, not in the strict form).
    """
    # A sample cut off at the length cap has no answer (grpo_ext.tasks.base.TRUNCATED): its last number is where
    # the cap cut it. Known only where hit_budget is.
    cut = hit_budget or [False] * len(completions)
    correct = [not h and task.is_correct(c, problem["answer"]) for c, h in zip(completions, cut, strict=True)]
    answers = [None if h else task.extract_answer(c) for c, h in zip(completions, cut, strict=True)]
    # the strict form apart from correctness: right-but-unformatted is n_correct - n_correct_strict
    strict = [not h and task.extract_strict_answer(c) is not None for c, h in zip(completions, cut, strict=True)]
    classes, n_none = answer_signature(answers, correct)
    signature = (classes, n_none, tuple(ks))
    memo = {} if memo is None else memo
    if signature not in memo:
        memo[signature] = maj_from_signature(classes, n_none, tuple(ks))
    maj = memo[signature]
    votes = Counter(a for a in answers if a is not None)
    distinct, entropy = answer_diversity(answers)
    record = {
        "problem_id": problem["problem_id"],
        "prompt": problem["prompt"],
        "answer": problem["answer"],
        "attributes": _attributes(task, problem),
        "n_correct": int(sum(correct)),
        "n_extracted": len(answers) - n_none,
        "n_strict": int(sum(strict)),
        "n_correct_strict": int(sum(s and c for s, c in zip(strict, correct, strict=True))),
        "top_answer": max(votes, key=votes.get) if votes else None,
        "top_answers": [[answer, count] for answer, count in votes.most_common(TOP_ANSWERS)],
        "answer_classes": [list(pair) for pair in sorted(classes, reverse=True)],
        "distinct_answers": distinct,
        "answer_entropy": entropy,
        # exact per-problem maj@k, so a report can put intervals over problems on maj@k as on pass@k
        MAJ_AT_K.name: {str(k): float(v) for k, v in zip(ks, maj, strict=True)},
    }
    if task.has_step_verifier:  # the anatomy's point: a false step told from a wrong plan
        prompt, answer = problem["prompt"], problem["answer"]
        record["anatomy"] = anatomy_counts(task, prompt, completions, answer, hit_budget, correct, answers)
    return record


def summarize(per_problem: Sequence[dict], n: int, ks: Sequence[int], taus: Sequence[float] = DEFAULT_TAUS) -> dict:
    """Means over problems of every metric, from the records of :func:`score_problem` (``n`` samples each).

    Keys: every metric of :data:`grpo_ext.evaluation.registry.METRICS` in its order (``pass@k``, ``maj@k``, ``pass^k``:
    ``{"k": mean}``; ``cover@tau``: ``{"tau": share of problems}``; ``mean_accuracy``: mean fraction of correct
    samples = mean pass@1; ``distinct_answers``, ``answer_entropy``), then ``answers_extracted`` (fraction of all
    samples with an answer) and, where every record has one, ``anatomy`` (the anatomy's counts summed over
    problems). A metric the records lack (a report written before it existed) is left out.
    """
    if not per_problem:
        raise ValueError("no problems to summarise")
    keys = {"k": [str(k) for k in ks], "tau": [tau_key(t) for t in taus]}
    out: dict = {}
    for metric in METRICS.values():  # every registered metric: the mean of its per-problem values
        if metric.keyed_by is None:
            values = metric.per_problem(n, per_problem, None)
            if values is not None:
                out[metric.name] = float(values.mean())
            continue
        columns = {key: metric.per_problem(n, per_problem, key) for key in keys[metric.keyed_by]}
        if all(v is not None for v in columns.values()):
            out[metric.name] = {key: float(v.mean()) for key, v in columns.items()}
    # not a per-problem mean: the share of all samples (problems weigh by their samples, all n here)
    out["answers_extracted"] = float(sum(p["n_extracted"] for p in per_problem) / (n * len(per_problem)))
    if all("anatomy" in p for p in per_problem):
        out["anatomy"] = add_counts(p["anatomy"] for p in per_problem)
    return out
