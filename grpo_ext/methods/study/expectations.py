"""Expectations written before a study runs, and whether each held on test.

An expectation names an arm, what it is measured against (another arm or ``base``), a test metric and the least
difference it expects; the report's first section judges each with the study's own engine
(:func:`grpo_ext.methods.study.stats.paired_difference` and its :func:`~grpo_ext.methods.study.stats.verdict`), so an
expectation holds on the same evidence a finding agrees on, never on a point estimate alone::

    expectations:
      outcome_above_base: {arm: grpo_outcome, against: base, metric: pass@1, min_difference: 0.03, text: "..."}
      majk_over_passk: {arm: grpo_outcome, against: base, metric: maj@64, minus: pass@64, text: "..."}

``minus`` (optional) measures the arm's gain in ``metric`` minus its gain in ``minus`` (DeepSeekMath's "Maj@K rises
more than Pass@K"). *Held*: the difference is at least ``min_difference`` (default 0) and the study's rule says the
arm beats ``against`` (95% interval above 0 and every seed's difference positive).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from grpo_ext.errors import UserError
from grpo_ext.methods.study.stats import format_difference, paired_difference, verdict, why_not_comparable
from grpo_ext.validation import check_number

__all__ = ["BASE", "Expectation", "judge_expectations", "parse_expectations", "render_expectations"]

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

    @property
    def measured(self) -> str:
        """What the difference is, in words for the report's table."""
        if self.minus is None:
            return f"{self.metric}: {self.arm} - {self.against}"
        return f"({self.metric} gain) - ({self.minus} gain) of {self.arm} over {self.against}"


def _k_of(metric) -> int | None:
    """K of ``pass@K`` / ``maj@K``; None for anything else."""
    name, _, k = str(metric).partition("@")
    return int(k) if name in ("pass", "maj") and k.isdigit() else None


def parse_expectations(value, arms: Sequence[str], ks: Sequence[int], where: str) -> dict[str, Expectation]:
    """The ``expectations`` mapping of a study YAML, checked before any run trains: each names arms of the study (or
    ``base`` as ``against``) and metrics the test evaluation reports (K one of ``ks``); a `UserError` names the
    field."""
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
        if spec["arm"] not in arms:
            raise UserError(f"{at}.arm: unknown arm {spec['arm']!r}; the study has {', '.join(arms)}")
        if spec["against"] not in (*arms, BASE):
            raise UserError(
                f"{at}.against: unknown arm {spec['against']!r}; expected {BASE} or one of {', '.join(arms)}"
            )
        if spec["against"] == spec["arm"]:
            raise UserError(f"{at}.against: an arm against itself ({spec['arm']}) measures nothing")
        for key in ("metric", "minus"):
            if key in spec and _k_of(spec[key]) not in ks:
                raise UserError(f"{at}.{key}: expected pass@K or maj@K with K one of {list(ks)}, got {spec[key]!r}")
        check_number(f"{at}.min_difference", spec.get("min_difference", 0.0))
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
    return why


def judge_expectations(
    expectations: dict[str, Expectation], arms: dict[str, Sequence[dict]], base: dict | None
) -> list[dict]:
    """Each expectation on the test results (``arms``: name -> its seeds' results; ``base``: the base's result), as a
    row: the expectation's fields, the paired ``difference`` (:func:`paired_difference`), its ``verdict`` and
    ``held`` (True / False), or ``held`` None with ``why`` it was not measured (an arm left out, too few samples)."""
    rows = []
    for exp in expectations.values():
        row = {**dataclasses.asdict(exp), "measured": exp.measured}
        a = arms.get(exp.arm)
        b = ([base] if base else None) if exp.against == BASE else arms.get(exp.against)
        why = _why_not_measured(exp, a, b)
        if why:
            rows.append({**row, "held": None, "why": why})
            continue
        diff = paired_difference(a, b, exp.metric, minus=exp.minus)
        rule = verdict(diff)
        rows.append(
            {
                **row,
                "difference": diff,
                "verdict": rule,
                "held": diff["difference"] >= exp.min_difference and rule == "agrees",
            }
        )
    return rows


def render_expectations(rows: list[dict]) -> list[str]:
    """The report's first section: each expectation's words, its measured difference with interval, whether held."""
    lines = [
        "## Expectations (written in the study config before the run)",
        "",
        "*Held* when the measured difference is at least the expected minimum **and** the study's rule says the arm "
        "beats what it is measured against (95% paired interval above 0 and every seed's difference positive).",
        "",
    ]
    if not rows:
        return [*lines, "The study states no expectations.", ""]
    lines += [
        "| expectation | measured | minimum | difference [95% interval] (seeds) | held |",
        "|---|---|---:|---|---|",
    ]
    for row in rows:
        if row["held"] is None:
            numbers, held = "-", f"not measured: {row['why']}"
        else:
            numbers = format_difference(row["difference"])
            held = f"**{'held' if row['held'] else 'did not hold'}** ({row['verdict']})"
        lines.append(f"| {row['text']} | {row['measured']} | {row['min_difference']:+.3f} | {numbers} | {held} |")
    return [*lines, ""]
