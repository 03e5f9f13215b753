"""A report by slice: every registry metric on the problems that share an attribute's value (the operation, the
number of operands, MATH's level...), with its bootstrap interval, and for two models the paired difference per slice.

A problem's attributes are :meth:`Task.problem_attributes` of its row, kept in its record (``attributes``). A slice is
a sub-result (the records of its problems), so everything is what the whole-set report computes: means by
:func:`~grpo_ext.evaluation.scoring.summarize`, intervals by :func:`~grpo_ext.evaluation.analysis.model_intervals`,
differences by :func:`~grpo_ext.evaluation.analysis.compare_models`, one bootstrap for all. A slice of fewer than
:data:`MIN_SLICE_PROBLEMS` problems gets its means and differences without an interval (``"intervals": null``, a
difference's ``low``/``high`` null) and the report says so: a percentile bootstrap over a handful of problems
understates the noise. A problem without the attribute falls in the slice :data:`MISSING`.

``report.json``: each model gets ``"slices": {attribute: [{"value", "n_problems", "interval": bool, <every metric as
the model's own keys>, "intervals": {...} | null}]}`` and each comparison ``"slices": {attribute: [{"value",
"n_problems", "interval": bool, "a": {metric means}, "b": {...}, "difference": {metric: ...}, "solved_overlap":
{...} | null}]}``; the top level says ``"slices": {"by": [...], "min_problems": 10}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from grpo_ext.errors import UserError
from grpo_ext.evaluation.analysis import DEFAULT_BOOTSTRAP, BootstrapSettings, compare_models, model_intervals
from grpo_ext.evaluation.registry import COVER_AT_TAU, MAJ_AT_K, METRICS, PASS_AT_K, get_metric, headline_trio
from grpo_ext.evaluation.scoring import summarize
from grpo_ext.report_format import fmt, md_header, md_row, signed, with_ci

__all__ = [
    "MIN_SLICE_PROBLEMS",
    "MISSING",
    "check_by",
    "comparison_slices",
    "known_attributes",
    "model_slices",
    "restrict",
    "slice_ids",
    "slices_markdown",
    "with_attributes",
]

#: A slice needs at least this many problems for an interval (fewer: the mean alone, and the report says so).
MIN_SLICE_PROBLEMS = 10
#: The value of a problem that lacks the attribute.
MISSING = "(none)"


def check_by(by: Sequence[str], known: Sequence[str], flag: str = "--by") -> tuple[str, ...]:
    """``by`` as a tuple, each attribute one of ``known``; a one-line ``UserError`` naming the flag otherwise."""
    unknown = [a for a in by if a not in known]
    if unknown:
        have = ", ".join(known) or "none: this task declares no slice attributes"
        raise UserError(f"{flag} {unknown[0]}: not an attribute of this task's problems (known: {have})")
    return tuple(dict.fromkeys(by))


def known_attributes(results: Sequence[dict]) -> list[str]:
    """The attributes the results' problems carry, in first-seen order ([] for results written before slices)."""
    seen: dict[str, None] = {}
    for result in results:
        for record in result.get("per_problem") or []:
            seen.update(dict.fromkeys(record.get("attributes") or {}))
    return list(seen)


def with_attributes(result: dict, task) -> dict:
    """``result`` with each record's ``attributes`` read from its prompt by ``task`` where the record has none (a
    report written before slices): a committed report can be sliced without sampling again, for a task that reads
    its attributes from the prompt (arithmetic, word_arithmetic; MATH's come from dataset columns the record lacks)."""
    records = [
        r if "attributes" in r else {**r, "attributes": task.problem_attributes({"prompt": r["prompt"], **r})}
        for r in result.get("per_problem") or []
    ]
    return {**result, "per_problem": records}


def _order(value: str):
    try:
        return (0, float(value), value)  # 2 before 10
    except ValueError:
        return (1, 0.0, value)


def slice_ids(result: dict, attribute: str) -> dict[str, list[str]]:
    """The problem ids of each value of ``attribute`` (values in natural order, ids in the result's order)."""
    groups: dict[str, list[str]] = {}
    for record in result.get("per_problem") or []:
        value = (record.get("attributes") or {}).get(attribute, MISSING)
        groups.setdefault(str(value), []).append(str(record["problem_id"]))
    return {value: groups[value] for value in sorted(groups, key=_order)}


def restrict(result: dict, ids: Sequence[str]) -> dict:
    """``result`` on the problems ``ids`` only: its per-problem records, their count and the means over them."""
    wanted = set(ids)
    records = [r for r in result["per_problem"] if str(r["problem_id"]) in wanted]
    taus = result.get("taus") or [float(t) for t in result.get(COVER_AT_TAU.name, {})]
    means = summarize(records, int(result["n"]), result["ks"], taus)
    return {**result, **means, "n_problems": len(records), "per_problem": records}


def _means(result: dict) -> dict:
    """The metric values of a (sub-)result: the registry's keys, as the result holds them, and its anatomy."""
    return {name: result[name] for name in METRICS if name in result} | (
        {"anatomy": result["anatomy"]} if "anatomy" in result else {}
    )


def model_slices(
    result: dict,
    by: Sequence[str],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    min_problems: int = MIN_SLICE_PROBLEMS,
) -> dict[str, list[dict]]:
    """Every metric of ``result`` per slice of each attribute in ``by`` (see the module docstring); a slice of fewer
    than ``min_problems`` problems gets no interval."""
    out: dict[str, list[dict]] = {}
    for attribute in by:
        out[attribute] = []
        for value, ids in slice_ids(result, attribute).items():
            sub = restrict(result, ids)
            interval = len(ids) >= min_problems
            entry = {"value": value, "n_problems": len(ids), "interval": interval, **_means(sub)}
            entry["intervals"] = model_intervals(sub, settings) if interval else None
            out[attribute].append(entry)
    return out


def _point_differences(a: dict, b: dict) -> dict:
    """B - A of every metric both hold, without intervals (a slice too small for one)."""
    out: dict = {}
    for name, value in _means(b).items():
        if name == "anatomy" or name not in a:
            continue
        if isinstance(value, dict):
            out[name] = {
                key: {"difference": v - a[name][key], "low": None, "high": None}
                for key, v in value.items()
                if key in a[name]
            }
        else:
            out[name] = {"difference": value - a[name], "low": None, "high": None}
    return out


def comparison_slices(
    a: dict,
    b: dict,
    by: Sequence[str],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    min_problems: int = MIN_SLICE_PROBLEMS,
) -> dict[str, list[dict]]:
    """Model B against model A per slice, paired by problem on the problems both hold; slices by A's attributes."""
    in_b = {str(r["problem_id"]) for r in b["per_problem"]}
    out: dict[str, list[dict]] = {}
    for attribute in by:
        out[attribute] = []
        for value, ids in slice_ids(a, attribute).items():
            ids = [i for i in ids if i in in_b]
            if not ids:
                continue
            sub_a, sub_b = restrict(a, ids), restrict(b, ids)
            interval = len(ids) >= min_problems
            entry = {"value": value, "n_problems": len(ids), "interval": interval}
            entry["a"], entry["b"] = _means(sub_a), _means(sub_b)
            if interval:
                compared = compare_models(sub_a, sub_b, settings) or {}
                entry["difference"] = compared.get("difference", {})
                entry["solved_overlap"] = compared.get("solved_overlap")
            else:
                entry["difference"], entry["solved_overlap"] = _point_differences(sub_a, sub_b), None
            out[attribute].append(entry)
    return out


# ---- Markdown ------------------------------------------------------------------------------------------------


def _columns(result: dict) -> list[tuple[str, str, str | None]]:
    """(label, metric, key) of the report.md columns: pass@1, maj@K and pass@K at the largest k, the strict form
    where the task has one (report.json holds every metric)."""
    k = str(result["ks"][-1])
    pass_at_1, maj_at_k, pass_at_k = headline_trio(k)
    columns = [(pass_at_1, "mean_accuracy", None), (maj_at_k, MAJ_AT_K.name, k), (pass_at_k, PASS_AT_K.name, k)]
    if result.get("strict_form"):  # a task whose only answer form is the strict one: the columns would repeat pass@1
        columns += [(get_metric(m).title, m, None) for m in ("strict_accuracy", "strict_share")]
    return [c for c in columns if c[1] in result]


def _value(entry: dict, metric: str, key: str | None):
    value = entry.get(metric)
    return value.get(key) if isinstance(value, dict) and key is not None else value


def _problems(entry: dict) -> str:
    return str(entry["n_problems"]) if entry["interval"] else f"{entry['n_problems']} (too few for an interval)"


def slices_markdown(
    results: Sequence[dict],
    comparisons: Sequence[dict | None],
    confidence: float,
    min_problems: int = MIN_SLICE_PROBLEMS,
) -> list[str]:
    """The report's slice sections: each attribute's table (rows: value, then model), then per comparison B - A per
    slice (bold: the interval excludes 0). ``results`` carry ``slices`` (:func:`model_slices`), ``comparisons``
    theirs (:func:`comparison_slices`)."""
    by = list(dict.fromkeys(attribute for r in results for attribute in r.get("slices") or {}))
    if not by:
        return []
    columns = _columns(results[0])
    lines = [
        "## Slices",
        "",
        f"Each slice's means over its problems with {confidence:.0%} bootstrap intervals; a slice of fewer than "
        f"{min_problems} problems shows the mean alone (too few problems for an interval). report.json holds "
        "every metric per slice.",
        "",
    ]
    for attribute in by:
        header = [attribute, "model", "problems", *(c[0] for c in columns)]
        lines += [f"### By {attribute}", "", *md_header(header, "llr" + "r" * len(columns))]
        rows = [(entry, r["model"]) for r in results for entry in (r.get("slices") or {}).get(attribute, [])]
        for entry, model in sorted(rows, key=lambda row: _order(row[0]["value"])):
            intervals = entry["intervals"] or {}
            cells = [with_ci(_value(entry, m, k), _value(intervals, m, k)) for _, m, k in columns]
            lines.append(md_row([entry["value"], model, _problems(entry), *cells]))
        lines.append("")
    for c in comparisons:
        if c is None or not c.get("slices"):
            continue
        for attribute, entries in c["slices"].items():
            lines += [
                f"### B against A by {attribute}: {c['b']} (B) vs {c['a']} (A)",
                "",
                *md_header(
                    [attribute, "problems", "A pass@1", "B pass@1", *(f"Δ {c_[0]}" for c_ in columns)],
                    "lrrr" + "r" * len(columns),
                ),
            ]
            for entry in entries:
                d = entry["difference"]
                cells = [signed(_value(d, m, k)) for _, m, k in columns]
                pass1 = [fmt(entry[side].get("mean_accuracy", 0.0)) for side in ("a", "b")]
                lines.append(md_row([entry["value"], _problems(entry), *pass1, *cells]))
            lines.append("")
    return lines
