"""Failure anatomy: what each sample says, read content first.

Every sample gets one kind (:func:`failure_kind`), by the first of these rules that applies:

1. ``right``: the task's checker accepts its answer (the lenient one, :meth:`Task.extract_answer`: e.g. GSM8K's
   last number when there is no ``####``), whatever its format and wherever it stopped;
2. nothing could be extracted (for GSM8K-format tasks: no number at all; for the embedded arithmetic: no ``#n``
   line): ``unfinished`` when the sample hit the token budget, ``no_number`` when it stopped on its own;
3. ``wrong_arithmetic``: a wrong answer and some step false by the task's step verifier (:meth:`Task.verify_steps`
   on every step as it splits them, whether or not the answer is marked: a false equation, or for
   ``word_arithmetic`` a number that is neither in the problem nor the result of a true equation), wherever it ended;
4. ``unfinished``: a wrong answer with no false step, cut by the budget before it stated an answer in the strict
   form: its last number is where the budget cut it off, not an answer it gave (``34 - 22 =`` at the budget is
   unfinished; stopped there, it is a wrong plan);
5. ``wrong_plan``: any other wrong answer, every step true (the shortcut: ``34 + 22 = 56`` for "Leo has 34 apples.
   Then Leo sells 22 apples"; a step left out; a bare wrong ``#### 56``).

A task *without* a step verifier (``has_step_verifier`` False) skips rule 3 and calls rule 5's samples ``wrong``:
nothing there tells a false step from a wrong plan, so wrong answers stay one kind (:func:`kinds_of` lists a task's
kinds).

A step that states an answer in the task's strict form (``#### 56``, ``\\boxed{56}``, the embedded ``#56``: the step
from which :meth:`Task.extract_strict_answer` reads an answer) is not a step on the way: its verdict is the answer's,
already judged; the steps before it decide between ``wrong_arithmetic`` and ``wrong_plan``. What "false" means is the
task's verifier's: the embedded arithmetic's also requires each step to be the problem's next operation, so there
``34+22=56`` for ``34-22=`` is a false step (``wrong_arithmetic``), while ``word_arithmetic`` judges each line on its
own truth and calls the same shortcut a wrong plan.

The strict format is not a kind but a column: each kind's count of samples in the task's strict form
(:attr:`Task.strict_form`; :meth:`Task.extract_strict_answer` is not None), so "right but unformatted" is ``right``
minus its strict count.

**The harness's contract** (``score_problem`` stores one record per problem as ``record["anatomy"]``)::

    anatomy_counts(task, prompt, completions, answer, hit_budget, correct=None, extracted=None) -> dict
    # {"right": 3, "wrong_arithmetic": 10, "wrong_plan": 50, "no_number": 1, "unfinished": 0,
    #  "strict": {"right": 2, "wrong_arithmetic": 0, ...}}: each kind of kinds_of(task), in order, zeros included;
    #  "strict": the same kinds, counting only the samples in the strict form

``prompt``: the problem's prompt as the harness stores it (text or chat messages); ``answer``: its reference answer;
``hit_budget[i]``: whether sample ``i`` ended because it used all ``max_new_tokens`` (not at an end-of-sequence
token or a stop string); None when unknown (then no sample is ``unfinished``: nothing extracted reads as
``no_number``). ``correct`` / ``extracted``: ``task.is_correct`` / ``task.extract_answer`` of each sample
when the caller has them already, so no sample is checked twice (math-verify costs ~27 ms a check). Cheap otherwise:
the step verifier runs only on wrong samples with an answer, the strict extraction once per sample (not at all where
the task's strict form is its only form). Records add up (:func:`add_counts`), so any slice of problems is the sum of
its problems' records; :func:`summarize_anatomy` turns a sum into shares and :func:`anatomy_markdown` into a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from grpo_ext.reasoning_steps import step_texts
from grpo_ext.report_format import fmt, md_header, md_row

if TYPE_CHECKING:  # imported where a task is at hand: counting and rendering serve reports read back without one
    from grpo_ext.tasks.base import Task

__all__ = [
    "KINDS",
    "add_counts",
    "anatomy_counts",
    "anatomy_legend",
    "anatomy_markdown",
    "failure_kind",
    "kinds_of",
    "summarize_anatomy",
]

#: Every kind, in the order of reports: right, then the content of wrong answers, then no answer at all.
KINDS = ("right", "wrong_arithmetic", "wrong_plan", "wrong", "no_number", "unfinished")
_LABELS = {
    "right": "right",
    "wrong_arithmetic": "wrong arithmetic",
    "wrong_plan": "wrong plan",
    "wrong": "wrong",
    "no_number": "no number",
    "unfinished": "unfinished",
}


def kinds_of(task: Task) -> tuple[str, ...]:
    """The kinds a task's samples can get: with a step verifier wrong answers split into ``wrong_arithmetic`` and
    ``wrong_plan``; without one they stay ``wrong``."""
    wrong = ("wrong_arithmetic", "wrong_plan") if task.has_step_verifier else ("wrong",)
    return ("right", *wrong, "no_number", "unfinished")


def _prompt_text(prompt) -> str:
    from grpo_ext.tasks.base import completion_text  # grpo_ext.tasks imports datasets: only with a task at hand

    return completion_text(prompt)


def _strict_is_lenient(task: Task) -> bool:
    from grpo_ext.tasks.base import Task

    # the base class's strict form is the lenient extraction itself: reuse it instead of extracting twice
    return type(task).extract_strict_answer is Task.extract_strict_answer


def _has_false_step(task: Task, prompt: str, completion: str) -> bool:
    """Whether a step on the way (not a strict-form answer line, see the module docstring) fails the verifier."""
    scores = task.verify_steps(prompt, completion)
    steps = step_texts(completion, task.step_separator) if task.step_separator else [completion]
    # a NaN score (a step with nothing to check) is not false: NaN < 1.0 is False
    return any(
        score < 1.0 and task.extract_strict_answer(step) is None for step, score in zip(steps, scores, strict=True)
    )


def _classify(
    task: Task, prompt: str, completion: str, correct: bool, extracted: str | None, hit_budget: bool
) -> tuple[str, bool]:
    """``(kind, in the strict form)`` of one sample, given the task's verdict and lenient answer."""
    # a strict answer implies a lenient one (the lenient extraction tries the strict form first)
    strict = extracted is not None and (_strict_is_lenient(task) or task.extract_strict_answer(completion) is not None)
    if correct:
        return "right", strict
    if extracted is None:
        return ("unfinished" if hit_budget else "no_number"), strict
    if task.has_step_verifier and _has_false_step(task, prompt, completion):
        return "wrong_arithmetic", strict  # content first: a false step is one, wherever the sample ended
    if hit_budget and not strict:  # no answer stated: its last number is where the budget cut it off
        return "unfinished", strict
    return ("wrong_plan" if task.has_step_verifier else "wrong"), strict


def failure_kind(
    task: Task,
    prompt,
    completion: str,
    answer: str,
    hit_budget: bool | None,
    *,
    correct: bool | None = None,
    extracted: str | None = None,
) -> str:
    """The kind of one sample (one of :func:`kinds_of`; see the module docstring). ``prompt``: text or chat
    messages; ``hit_budget``: whether the sample used the whole token budget (None: unknown, read as no);
    ``correct`` / ``extracted``: the caller's ``task.is_correct`` / ``task.extract_answer``, if it has them (then
    ``extracted`` None means no answer)."""
    if correct is None:
        correct, extracted = task.is_correct(completion, answer), task.extract_answer(completion)
    return _classify(task, _prompt_text(prompt), completion, bool(correct), extracted, bool(hit_budget))[0]


def anatomy_counts(
    task: Task,
    prompt,
    completions: Sequence[str],
    answer: str,
    hit_budget: Sequence[bool] | None,
    correct: Sequence[bool] | None = None,
    extracted: Sequence[str | None] | None = None,
) -> dict:
    """One problem's record: each kind's count over its samples (every kind of :func:`kinds_of`, zeros included, so
    records of one task add up key by key) and ``"strict"``: the same counts of the samples in the strict form.
    ``hit_budget``: per sample, or None when unknown; ``correct`` / ``extracted``: the caller's ``task.is_correct`` /
    ``task.extract_answer`` per sample, if it has them (see the module docstring)."""
    n = len(completions)
    hit_budget = [False] * n if hit_budget is None else hit_budget
    if correct is None:
        correct = [task.is_correct(c, answer) for c in completions]
    if extracted is None:
        extracted = [task.extract_answer(c) for c in completions]
    if not len(hit_budget) == len(correct) == len(extracted) == n:
        raise ValueError(f"hit_budget, correct and extracted need one entry per completion ({n})")
    text = _prompt_text(prompt)
    counts = dict.fromkeys(kinds_of(task), 0)
    strict_counts = dict.fromkeys(counts, 0)
    for completion, ok, answer_key, budget in zip(completions, correct, extracted, hit_budget, strict=True):
        kind, strict = _classify(task, text, completion, bool(ok), answer_key, bool(budget))
        counts[kind] += 1
        strict_counts[kind] += strict
    return {**counts, "strict": strict_counts}


def add_counts(records: Iterable[dict]) -> dict:
    """The sum of :func:`anatomy_counts` records (of many problems: a model's, or a slice's), kinds in
    :data:`KINDS`' order; a kind missing from a record counts 0 there."""
    counts: dict[str, int] = {}
    strict: dict[str, int] = {}
    for record in records:
        for kind, count in record.items():
            if kind != "strict":
                counts[kind] = counts.get(kind, 0) + int(count)
                strict[kind] = strict.get(kind, 0) + int(record.get("strict", {}).get(kind, 0))
    order = [k for k in KINDS if k in counts] + sorted(set(counts) - set(KINDS))
    return {**{k: counts[k] for k in order}, "strict": {k: strict[k] for k in order}}


def summarize_anatomy(records: Iterable[dict]) -> dict:
    """The anatomy of many problems (their :func:`anatomy_counts` records summed): ``samples``, ``counts`` and
    ``shares`` (of all samples) per kind, ``strict_counts`` per kind, ``strict_share`` (samples in the strict form)
    and ``right_strict_share`` (right and in the strict form: accuracy under the strict form)."""
    total = add_counts(records)
    strict = total.pop("strict")
    samples = sum(total.values())

    def share(c: int) -> float:
        return c / samples if samples else 0.0

    return {
        "samples": samples,
        "counts": total,
        "shares": {k: share(c) for k, c in total.items()},
        "strict_counts": strict,
        "strict_share": share(sum(strict.values())),
        "right_strict_share": share(strict.get("right", 0)),
    }


def anatomy_legend(strict_form: str | None, step_verifier: bool = True) -> list[str]:
    """What the kinds mean, as markdown lines for a report beside :func:`anatomy_markdown`'s table, for a task whose
    strict answer form is ``strict_form`` (:attr:`Task.strict_form`; None: its only form) and that has a step
    verifier or not (:attr:`Task.has_step_verifier`)."""
    strict = strict_form or "the task's only answer form"
    wrong = (
        [
            "- **wrong arithmetic**: a wrong answer with some step false by the task's step verifier (marked answer "
            "or not);",
            "- **wrong plan**: a wrong answer with every step true (e.g. the numbers added where one is taken away, "
            "a step left out);",
        ]
        if step_verifier
        else ["- **wrong**: a wrong answer (this task has no step verifier to tell a false step from a wrong plan);"]
    )
    return [
        "Each sample is judged on what it says, in this order:",
        "",
        "- **right**: the task's checker accepts its answer (the last number when none is marked);",
        *wrong,
        "- **no number**: no answer could be extracted and the sample stopped; **unfinished**: it hit the token "
        "budget with no answer stated (nothing extracted, or a last number where the budget cut it off).",
        "",
        f"The strict answer form ({strict}) is a column apart, not a kind: **strict form** is the share of samples "
        "stating their answer in it, **right, strict form** the share right and in it (accuracy under the strict "
        "form); right minus the latter is right but unformatted.",
    ]


def anatomy_markdown(rows: dict[str, dict], label: str = "model") -> list[str]:
    """A table of :func:`summarize_anatomy` results, one row per ``{row label: summary}``: each kind's share of the
    samples (only the kinds some row has), then the strict form as its own columns: the share of samples in it, and
    of samples right in it."""
    present = {k for summary in rows.values() for k in summary["counts"]}
    kinds = [k for k in KINDS if k in present]
    header = [label, "samples", *(_LABELS[k] for k in kinds), "strict form", "right, strict form"]
    lines = md_header(header, "lr" + "r" * (len(kinds) + 2))
    for name, s in rows.items():
        shares = [fmt(s["shares"].get(k, 0.0)) for k in kinds]
        lines.append(md_row([name, s["samples"], *shares, fmt(s["strict_share"]), fmt(s["right_strict_share"])]))
    return lines
