"""Harness-shaped results made by hand, for the report tests: what ``evaluate_model`` returns, scored from given
completions (:func:`grpo_ext.evaluation.harness.score_samples`), with no backend and no sampling."""

from __future__ import annotations

from collections.abc import Sequence

from grpo_ext.evaluation.harness import score_samples, validate_problems


def harness_result(
    name: str,
    task,
    problems: Sequence[dict],
    completions: Sequence[Sequence[str]],
    ks: Sequence[int],
    *,
    taus: Sequence[float] = (0.1, 0.5, 0.9),
    **extra,
) -> dict:
    """The result of model ``name`` on ``problems`` (rows with ``prompt`` and ``answer``, validated here), problem i
    answered by ``completions[i]`` (the same number each: n); ``extra`` keys are added (e.g. ``strict_form``)."""
    problems = validate_problems(list(problems), task)
    summary, per_problem = score_samples(task, problems, completions, list(ks), taus)
    n = len(completions[0])
    return {
        "model": name,
        "backend": "fake",
        "task": task.name,
        "task_id": f"{task.name}/test",
        "n_problems": len(problems),
        "n": n,
        "ks": list(ks),
        "taus": list(taus),
        "warnings": [],
        "params": {"n": n, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "seed": 0, "batch_size": 1},
        **summary,
        "samples": {"total": n * len(problems), "from_cache": 0, "generated": 0, "seconds": 0.0},
        "per_problem": per_problem,
        **extra,
    }
