"""Each arm against the base per slice of the problems (the operation, the number of operands...): what a method
comparison and a study report show below their whole-set tables, so a gain on additions only is on the page.

A slice is the problems that share an attribute's value (:mod:`grpo_ext.evaluation.slices`, where the harness report
slices one model). Here an arm is several runs (seeds): its value on a slice and its difference to the base are the
study's (:func:`~grpo_ext.experiments.study.stats.arm_summary`,
:func:`~grpo_ext.experiments.study.stats.paired_difference`: the per-problem seed mean, intervals by bootstrap over the
slice's problems, paired by problem). A slice of fewer than :data:`~grpo_ext.evaluation.slices.MIN_SLICE_PROBLEMS`
problems gets its means and difference without an interval.

JSON: ``{attribute: [{"value", "n_problems", "interval", "base": mean, "arms": {arm: {"mean", "difference": {
"difference", "low", "high", "per_seed"}}}}]}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from grpo_ext.evaluation.registry import PASS_AT_1
from grpo_ext.evaluation.slices import MIN_SLICE_PROBLEMS, known_attributes, restrict, slice_ids
from grpo_ext.experiments.study.stats import arm_summary, paired_difference, per_problem, why_not_comparable
from grpo_ext.report_format import fmt, md_header, md_row, signed

__all__ = ["arm_slices", "arm_slices_markdown"]


def _slice_of(results: Sequence[dict], ids: Sequence[str]) -> list[dict]:
    return [restrict(r, ids) for r in results]


def arm_slices(
    arms: Mapping[str, Sequence[dict]],
    base: dict,
    by: Sequence[str] | None = None,
    metric: str = PASS_AT_1,
    min_problems: int = MIN_SLICE_PROBLEMS,
) -> dict[str, list[dict]]:
    """``metric`` of the base and of every arm (its runs' results) per slice, and each arm minus the base (see the
    module docstring). ``by``: the attributes (None: every attribute the base's problems carry); {} when the base's
    problems carry none (results written before slices). An arm that cannot be paired with the base by problem (no
    per-problem records, other problems) is left out, as the findings leave it out."""
    arms = {name: results for name, results in arms.items() if why_not_comparable(results, [base]) is None}
    known = known_attributes([base])
    by = [a for a in (known if by is None else by) if a in known]
    out: dict[str, list[dict]] = {}
    for attribute in by:
        out[attribute] = []
        for value, ids in slice_ids(base, attribute).items():
            sub_base = _slice_of([base], ids)
            entry = {"value": value, "n_problems": len(ids), "interval": len(ids) >= min_problems}
            entry["base"] = float(per_problem(sub_base[0], metric).mean())
            entry["arms"] = {}
            for name, results in arms.items():
                sub = _slice_of(results, ids)
                if entry["interval"]:
                    mean = arm_summary(sub, [metric])[metric]["mean"]
                    difference = paired_difference(sub, sub_base, metric)
                else:  # the point alone: a bootstrap over a handful of problems understates the noise
                    seeds = np.stack([per_problem(r, metric) for r in sub])
                    mean = float(seeds.mean())
                    per_seed = (seeds.mean(axis=1) - entry["base"]).tolist()
                    difference = {"metric": metric, "difference": mean - entry["base"], "low": None, "high": None}
                    difference["per_seed"] = per_seed
                entry["arms"][name] = {"mean": float(mean), "difference": difference}
            out[attribute].append(entry)
    return out


def arm_slices_markdown(
    slices: Mapping[str, list[dict]], metric: str = PASS_AT_1, reference_label: str = "base"
) -> list[str]:
    """One table per attribute: a row per value, the base's ``metric`` and each arm's with its difference to the base
    (bold: the 95% interval excludes 0); a slice too small for an interval says so. The base is shown as
    ``reference_label`` (a study's start, e.g. "SFT start"); the JSON keeps ``base``."""
    if not slices:
        return []
    lines = [
        f"## {metric} by slice: each arm against the {reference_label}",
        "",
        f"Per slice of the test problems: the {reference_label}'s value, then each arm's (mean over its seeds) and, "
        f"in brackets, its difference to the {reference_label} with the 95% bootstrap interval over the slice's "
        "problems, paired by problem (bold: the interval excludes 0). A slice of fewer than "
        f"{MIN_SLICE_PROBLEMS} problems shows the difference alone.",
        "",
    ]
    for attribute, entries in slices.items():
        if not entries:
            continue
        arms = list(entries[0]["arms"])
        lines += md_header([attribute, "problems", reference_label, *arms], "lrr" + "r" * len(arms))
        for e in entries:
            problems = str(e["n_problems"]) if e["interval"] else f"{e['n_problems']} (too few for an interval)"
            cells = [f"{a['mean']:.3f} ({signed(a['difference'])})" for a in e["arms"].values()]
            lines.append(md_row([e["value"], problems, fmt(e["base"]), *cells]))
        lines.append("")
    return lines
