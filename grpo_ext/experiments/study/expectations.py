"""Expectations written before a study runs, and whether each held on test.

An expectation names an arm, what it is measured against (another arm or ``base``), a test metric and the least
difference it expects; the report's first section judges each with the study's own engine
(:func:`grpo_ext.experiments.study.stats.paired_difference` and its :func:`~grpo_ext.experiments.study.stats.verdict`),
so an expectation holds on the same evidence a finding agrees on, never on a point estimate alone::

    expectations:
      outcome_above_base: {arm: grpo_outcome, against: base, metric: pass@1, min_difference: 0.03, text: "..."}
      majk_over_passk: {arm: grpo_outcome, against: base, metric: maj@64, minus: pass@64, text: "..."}

``minus`` (optional) measures the arm's gain in ``metric`` minus its gain in ``minus`` (DeepSeekMath's "Maj@K rises
more than Pass@K"). *Held*: the difference is at least ``min_difference`` (default 0) and the study's rule says the
arm beats ``against`` (95% interval above 0 and every seed's difference positive).

A slice of the test problems (the attributes the harness writes into each per-problem record, ``attributes``:
``operation``, ``operands``, ``carry_borrow`` for the arithmetic tasks): ``slice: {operation: "-"}`` judges the
expectation on the problems with that value only, paired by problem as before; ``slices: operation`` judges it on
every value of the attribute, and it holds when it holds on each (a gain made of one operation alone, the "add the two
numbers" shortcut, does not)::

      every_operation: {arm: grpo_outcome, against: base, metric: pass@1, min_difference: 0.10, slices: operation,
                        text: "..."}

``against`` may also name a baseline of the study (the base at another prompt, one run like the base).

``question: true`` marks one the study asks rather than expects ("is GRPO above more SFT?"): judged by the same
statistics, it is answered instead of held (``answer``: "yes" when it would hold, "no" when the reverse holds by the
same rule, "cannot tell" otherwise) and stays out of the count of expectations held (:func:`held_count`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grpo_ext.errors import UserError
from grpo_ext.evaluation.registry import headline_at, headline_forms
from grpo_ext.experiments.study.stats import paired_difference, verdict, why_not_comparable
from grpo_ext.report_format import md_header, md_row, signed_with_seeds
from grpo_ext.validation import check_number

__all__ = [
    "BASE",
    "Expectation",
    "held_count",
    "judge_expectations",
    "parse_expectations",
    "render_expectations",
    "slice_results",
    "slice_values",
]

#: The name ``against`` gives the base model (an arm may not be called so).
BASE = "base"


@dataclass(frozen=True)
class Expectation:
    name: str
    arm: str
    against: str  # an arm, or BASE
    metric: str  # pass@K or maj@K on the test split
    text: str
    min_difference: float = 0.0
    minus: str | None = None  # the difference is then (gain in metric) - (gain in minus)
    slice: dict | None = None  # {attribute: value}: judged on those test problems only
    slices: str | None = None  # an attribute: judged on each of its values, held when held on every one
    question: bool = False  # asked, not expected: answered yes / no / cannot tell, not counted as held or not

    @property
    def measured(self) -> str:
        """What the difference is, in words for the report's table."""
        if self.minus is None:
            text = f"{self.metric}: {self.arm} - {self.against}"
        else:
            text = f"({self.metric} gain) - ({self.minus} gain) of {self.arm} over {self.against}"
        if self.slice:
            text += " on the problems with " + ", ".join(f"{k} = {v}" for k, v in self.slice.items())
        if self.slices:
            text += f" on each {self.slices}"
        return text


def _k_of(metric) -> int | None:
    """K of a headline metric (the registry's: ``pass@K`` / ``maj@K``); None for anything else."""
    picked = headline_at(str(metric))
    return None if picked is None else picked[1]


def _check_slices(spec: dict, at: str) -> None:
    """`slice`: a one-entry mapping attribute -> value; `slices`: an attribute name; not both."""
    if "slice" in spec and "slices" in spec:
        raise UserError(f"{at}: `slice` (one value) or `slices` (every value of an attribute), not both")
    if "slice" in spec:
        value = spec["slice"]
        if not isinstance(value, dict) or len(value) != 1:
            raise UserError(f"{at}.slice: expected one attribute and its value, e.g. {{operation: '-'}}; got {value!r}")
        spec["slice"] = {str(k): str(v) for k, v in value.items()}  # attributes are strings in the records
    if "slices" in spec and (not isinstance(spec["slices"], str) or not spec["slices"]):
        raise UserError(f"{at}.slices: expected the name of an attribute (e.g. operation), got {spec['slices']!r}")


def parse_expectations(
    value,
    arms: Sequence[str],
    ks: Sequence[int],
    where: str,
    baselines: Sequence[str] = (),
    n_for: Callable[[str], int] | None = None,
) -> dict[str, Expectation]:
    """The ``expectations`` mapping of a study YAML, checked before any run trains: each names arms of the study (or
    ``base`` or a baseline as ``against``) and metrics the test evaluation reports (K one of ``ks``, and, with
    ``n_for`` (name -> samples a problem), at most the samples both runs draw); a `UserError` names the field."""
    if not value:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a mapping of name -> expectation, got {value!r}")
    known = [f.name for f in dataclasses.fields(Expectation) if f.name != "name"]
    out = {}
    for name, spec in value.items():
        at = f"{where}.{name}"
        if not isinstance(spec, dict):
            raise UserError(f"{at}: expected a mapping with {', '.join(known)}")
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise UserError(f"{at}: unknown field(s) {unknown}; expected {', '.join(known)}")
        for key in ("arm", "against", "metric", "text"):
            if not spec.get(key) or not isinstance(spec[key], str):
                raise UserError(f"{at}.{key}: required, a non-empty string; got {spec.get(key)!r}")
        if spec["arm"] not in (*arms, *baselines):  # a baseline may be measured too (8 worked examples - base)
            raise UserError(f"{at}.arm: unknown arm {spec['arm']!r}; the study has {', '.join([*baselines, *arms])}")
        if spec["against"] not in (*arms, BASE, *baselines):
            raise UserError(
                f"{at}.against: unknown arm {spec['against']!r}; expected {BASE} or one of "
                f"{', '.join([*baselines, *arms])}"
            )
        if spec["against"] == spec["arm"]:
            raise UserError(f"{at}.against: an arm against itself ({spec['arm']}) measures nothing")
        spec = dict(spec)
        _check_slices(spec, at)
        for key in ("metric", "minus"):
            if key in spec and _k_of(spec[key]) not in ks:
                raise UserError(
                    f"{at}.{key}: expected {headline_forms('K')} with K one of {list(ks)}, got {spec[key]!r}"
                )
            drawn = min(n_for(spec["arm"]), n_for(spec["against"])) if n_for else None
            if key in spec and drawn is not None and _k_of(spec[key]) > drawn:
                raise UserError(
                    f"{at}.{key}: {spec[key]} needs K = {_k_of(spec[key])} samples a problem; the test draws {drawn} "
                    f"for {spec['arm'] if n_for(spec['arm']) == drawn else spec['against']} (test.n / test.n_by)"
                )
        check_number(f"{at}.min_difference", spec.get("min_difference", 0.0))
        if not isinstance(spec.get("question", False), bool):
            raise UserError(f"{at}.question: expected true or false, got {spec['question']!r}")
        out[name] = Expectation(name=str(name), **{**spec, "min_difference": float(spec.get("min_difference", 0.0))})
    return out


def _why_not_measured(exp: Expectation, a: Sequence[dict] | None, b: Sequence[dict] | None) -> str | None:
    missing = [name for name, runs in ((exp.arm, a), (exp.against, b)) if not runs]
    if missing:  # a run of some arms only (--arms)
        return f"no run of {', '.join(missing)}"
    why = why_not_comparable(a, b)
    needed, drawn = max(_k_of(m) for m in (exp.metric, exp.minus or exp.metric)), min(r["n"] for r in [*a, *b])
    if why is None and drawn < needed:  # e.g. --quick draws 4 samples a problem
        why = f"the test drew {drawn} samples a problem, fewer than K = {needed}"
    attribute = exp.slices or next(iter(exp.slice or {}), None)
    if why is None and attribute is not None and not _have_attribute([*a, *b], attribute):
        why = f"the per-problem records have no attribute {attribute!r} (the harness writes `attributes`)"
    return why


def _have_attribute(results: Sequence[dict], attribute: str) -> bool:
    return all(attribute in (p.get("attributes") or {}) for r in results for p in r["per_problem"])


def slice_values(results: Sequence[dict], attribute: str) -> list[str]:
    """The values `attribute` takes over the problems of `results` (sorted; as strings)."""
    return sorted({str(p["attributes"][attribute]) for r in results for p in r["per_problem"]})


def slice_results(results: Sequence[dict], attribute: str, value: str) -> list[dict]:
    """Each result restricted to the problems whose `attribute` is `value` (shallow copies: the summary numbers of a
    copy still describe the whole split; only its per-problem records, which every paired number is computed from,
    are cut)."""
    return [
        {**r, "per_problem": [p for p in r["per_problem"] if str(p["attributes"][attribute]) == str(value)]}
        for r in results
    ]


def _judge(exp: Expectation, a: Sequence[dict], b: Sequence[dict]) -> dict:
    diff = paired_difference(a, b, exp.metric, minus=exp.minus)
    rule = verdict(diff)
    return {"difference": diff, "verdict": rule, "held": diff["difference"] >= exp.min_difference and rule == "agrees"}


def _judge_slices(exp: Expectation, a: Sequence[dict], b: Sequence[dict]) -> dict:
    """Every value of ``exp.slices`` judged apart (``by_slice``); held when held on each. The row's own difference
    and verdict are those of the slice that binds: the first that does not hold, else the smallest difference."""
    by_slice = []
    for value in slice_values([*a, *b], exp.slices):
        sa, sb = slice_results(a, exp.slices, value), slice_results(b, exp.slices, value)
        by_slice.append({"value": value, "n_problems": len(sa[0]["per_problem"]), **_judge(exp, sa, sb)})
    failing = [s for s in by_slice if not s["held"]]
    binding = failing[0] if failing else min(by_slice, key=lambda s: s["difference"]["difference"])
    return {
        "difference": binding["difference"],
        "verdict": binding["verdict"] if failing else "agrees",
        "held": not failing,
        "binding_slice": binding["value"],
        "by_slice": by_slice,
    }


def _answer(exp: Expectation, judged: dict) -> str:
    """A question's answer from its judged row: "yes" where it holds, "no" where the reverse holds by the same rule
    (every slice's interval below 0 with every seed negative, by at least the minimum), "cannot tell" otherwise."""
    if judged["held"]:
        return "yes"
    entries = judged.get("by_slice") or [judged]
    reverse = all(e["verdict"] == "disagrees" and -e["difference"]["difference"] >= exp.min_difference for e in entries)
    return "no" if reverse else "cannot tell"


def held_count(rows: Sequence[dict]) -> tuple[int, int]:
    """(held, expectations): the rows that held among those that are not questions (a question is answered, it
    neither holds nor fails; rows written before ``question`` existed count)."""
    expected = [r for r in rows if not r.get("question")]
    return sum(1 for r in expected if r["held"]), len(expected)


def judge_expectations(
    expectations: dict[str, Expectation],
    arms: dict[str, Sequence[dict]],
    base: dict | None,
    baselines: dict[str, dict] | None = None,
) -> list[dict]:
    """Each expectation on the test results (``arms``: name -> its seeds' results; ``base``: the base's result;
    ``baselines``: name -> a baseline's result, one run like the base), as a row: the expectation's fields, the
    paired ``difference`` (:func:`paired_difference`), its ``verdict`` and ``held`` (True / False), or ``held`` None
    with ``why`` it was not measured (an arm left out, too few samples, no attribute to slice by). A ``slices``
    expectation adds ``by_slice`` (each value's problems, difference, verdict, held) and ``binding_slice``; a measured
    question adds its ``answer`` (:func:`_answer`)."""
    single = {BASE: base, **(baselines or {})}
    rows = []
    for exp in expectations.values():
        row = {**dataclasses.asdict(exp), "measured": exp.measured}
        a = ([single[exp.arm]] if single.get(exp.arm) else None) if exp.arm in single else arms.get(exp.arm)
        b = (
            ([single[exp.against]] if single.get(exp.against) else None)
            if exp.against in single
            else arms.get(exp.against)
        )
        why = _why_not_measured(exp, a, b)
        if why:
            rows.append({**row, "held": None, "why": why})
            continue
        if exp.slice:
            ((attribute, value),) = exp.slice.items()
            a, b = slice_results(a, attribute, value), slice_results(b, attribute, value)
            if not a[0]["per_problem"]:
                rows.append({**row, "held": None, "why": f"no test problem has {attribute} = {value}"})
                continue
        judged = _judge_slices(exp, a, b) if exp.slices else _judge(exp, a, b)
        rows.append({**row, **judged, **({"answer": _answer(exp, judged)} if exp.question else {})})
    return rows


def _answer_text(row: dict, reference_label: str) -> str:
    """A question's answer in words, the base by its display name."""
    arm, against = (reference_label if name == BASE else name for name in (row["arm"], row["against"]))
    return {"yes": f"yes: {arm} is above {against}", "no": f"no: {against} is above {arm}"}.get(
        row["answer"], "cannot tell"
    )


def render_expectations(rows: list[dict], reference_label: str = BASE) -> list[str]:
    """The report's first section: each expectation's words, its measured difference with interval, whether held;
    a ``slices`` expectation shows every slice's difference under its own row. ``reference_label``: the name the
    report shows for the run the records call ``base`` (the data keeps ``base``)."""
    lines = [
        "## Expectations (written in the study config before the run)",
        "",
        "*Held* when the measured difference is at least the expected minimum **and** the study's rule says the arm "
        "beats what it is measured against (95% paired interval above 0 and every seed's difference positive); one "
        "judged on each value of an attribute (`slices`) holds when it holds on every value.",
        "",
    ]
    if not rows:
        return [*lines, "The study states no expectations.", ""]
    held, expected = held_count(rows)
    summary = f"{held} of {expected} expectations held."
    questions = len(rows) - expected
    if questions:
        summary += (
            f" {questions} {'question is' if questions == 1 else 'questions are'} answered by the same rule, not "
            "counted: *yes* where it would hold, *no* where the reverse holds, *cannot tell* otherwise."
        )
    lines += [
        summary,
        "",
        *md_header(["expectation", "measured", "minimum", "difference [95% interval] (seeds)", "held"], "llrll"),
    ]
    for row in rows:
        if row["held"] is None:
            numbers, held = "-", f"not measured: {row['why']}"
        else:
            numbers = signed_with_seeds(row["difference"])
            held = f"**{'held' if row['held'] else 'did not hold'}** ({row['verdict']})"
            if row.get("question"):  # an answer, not a verdict on a prediction
                held = f"**{_answer_text(row, reference_label)}** ({row['verdict']})"
            if "by_slice" in row:
                numbers = "; ".join(
                    f"{row['slices']} {s['value']} ({s['n_problems']} problems): {signed_with_seeds(s['difference'])}"
                    f" {'held' if s['held'] else 'not held'}"
                    for s in row["by_slice"]
                )
        measured = row["measured"]
        if row["against"] == BASE and reference_label != BASE:  # the display name; the words of `text` are the study's
            measured = measured.replace(f"- {BASE}", f"- {reference_label}", 1).replace(
                f"over {BASE}", f"over {reference_label}", 1
            )
        lines.append(md_row([row["text"], measured, f"{row['min_difference']:+.3f}", numbers, held]))
    return [*lines, ""]
