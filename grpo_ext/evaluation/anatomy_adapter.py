"""The harness's one link to the content-first failure anatomy (:mod:`grpo_ext.evaluation.failures`).

The anatomy (``anatomy_counts(task, prompt, completions, answer, hit_budget) -> dict`` of counts: right / wrong
arithmetic / wrong plan / no number / unfinished, plus strict-form counts) is another module's; the harness calls it
only here, so a change of its signature is one line below. It runs for every task with a step verifier
(``task.has_step_verifier``), problem by problem as samples arrive, on the ``n`` completions of one problem.

``hit_budget``: one bool per completion, whether it used all ``max_new_tokens`` (an unfinished sample). The backends
return text only, so it is counted by re-tokenising the text with the backend's tokenizer (as
``scripts/real_result.py`` does); samples read back from the cache are counted the same way, so a report is the
same whether its samples were drawn or cached. A backend without a tokenizer gives ``None``: unknown, and the
anatomy cannot tell an unfinished sample from one that stopped without a number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "ANATOMY_KINDS",
    "anatomy_applies",
    "backend_tokenizer",
    "budget_counter",
    "flat_counts",
    "problem_anatomy",
    "sample_kind",
    "sum_counts",
]

#: The content-first kinds, in the order reports list them.
ANATOMY_KINDS = ("right", "wrong_arithmetic", "wrong_plan", "no_number", "unfinished")

BudgetCounter = Callable[[Sequence[str]], "list[bool] | None"]


def _anatomy_counts():
    """The anatomy's entry point, or None where this checkout does not have it yet."""
    from grpo_ext.evaluation import failures

    return getattr(failures, "anatomy_counts", None)


def anatomy_applies(task) -> bool:
    """Whether problems of ``task`` get anatomy counts (it has a step verifier, and the anatomy is here)."""
    return task.has_step_verifier and _anatomy_counts() is not None


def problem_anatomy(task, problem: Mapping, completions: Sequence[str], hit_budget: list[bool] | None) -> dict | None:
    """The anatomy's counts over one problem's completions; None for a task without a step verifier."""
    if not anatomy_applies(task):
        return None
    return _anatomy_counts()(task, problem["prompt"], list(completions), problem["answer"], hit_budget)


def sample_kind(task, problem: Mapping, completion: str, hit_budget: bool | None) -> str | None:
    """The anatomy's kind of one sample (for the samples excerpt), or None without an anatomy."""
    counts = problem_anatomy(task, problem, [completion], None if hit_budget is None else [hit_budget])
    if counts is None:
        return None
    if not any(kind in counts for kind in ANATOMY_KINDS):  # the kinds one level down ({"kinds": {...}, ...})
        counts = next((v for v in counts.values() if isinstance(v, Mapping) and set(v) & set(ANATOMY_KINDS)), {})
    return next((kind for kind in ANATOMY_KINDS if counts.get(kind)), None)


def backend_tokenizer(backend):
    """The tokenizer a backend decodes with: the transformers backend's, vLLM's engine's; None when it has none."""
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None and hasattr(getattr(backend, "llm", None), "get_tokenizer"):
        tokenizer = backend.llm.get_tokenizer()
    return tokenizer


def budget_counter(tokenizer, max_new_tokens: int) -> BudgetCounter:
    """A function from completions to their ``hit_budget`` flags (``None``, unknown, without a tokenizer)."""
    if tokenizer is None:
        return lambda completions: None

    def hits(completions: Sequence[str]) -> list[bool]:
        # one batched call per problem: the sampler stored the text without its end-of-sequence token
        ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        return [len(row) >= max_new_tokens for row in ids]

    return hits


def sum_counts(counts: Iterable[Mapping]) -> dict:
    """Counts summed key by key (nested dicts summed the same way); an empty iterable sums to ``{}``."""
    out: dict = {}
    for entry in counts:
        for key, value in entry.items():
            if isinstance(value, Mapping):
                out[key] = sum_counts([out.get(key, {}), value])
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
    return out


def flat_counts(counts: Mapping, prefix: str = "") -> dict[str, float]:
    """Nested counts as one level, ``{"strict": {"right": 2}}`` -> ``{"strict right": 2}``, kinds in their order."""
    out: dict[str, float] = {}
    ordered = sorted(counts, key=lambda k: ANATOMY_KINDS.index(k) if k in ANATOMY_KINDS else len(ANATOMY_KINDS))
    for key in ordered:
        value = counts[key]
        if isinstance(value, Mapping):
            out.update(flat_counts(value, f"{prefix}{key} "))
        else:
            out[f"{prefix}{key}"] = value
    return out
