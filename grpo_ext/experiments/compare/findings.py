"""The numbers of a comparison: per-method statistics over runs (seeds), and the paper's findings with a verdict.

The findings are the study's (:mod:`grpo_ext.experiments.study.stats`): one rule judges a claim in every report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grpo_ext.evaluation.registry import headline_entries
from grpo_ext.evaluation.results import EvalResult
from grpo_ext.experiments.compare.runs import Run
from grpo_ext.experiments.study.stats import finding_text, headline_metrics, largest_k, paper_findings
from grpo_ext.methods.paradigm import BASE_RUN, METHODS

__all__ = ["findings", "summarize"]


def _stat(values: list[float]) -> dict:
    values = [float(v) for v in values]
    return {
        "mean": float(np.mean(values)),
        "min": min(values),
        "max": max(values),
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "values": values,
        "count": len(values),
    }


def run_metrics(run: Run, k_max: int) -> dict:
    """A run's headline numbers, the study's (:func:`~grpo_ext.experiments.study.stats.headline_metrics`): pass@1,
    maj@k_max, pass@k_max."""
    result = EvalResult.of(run.result)
    return {name: result.value(name) for name in headline_metrics(k_max)}


def summarize(runs: Sequence[Run]) -> dict:
    """Per method (in METHODS order, base first): the metrics' mean / min / max / std over its runs, and cost."""
    k_max = largest_k([r.result for r in runs])  # the report's maj@K / pass@K column
    order = [BASE_RUN, *METHODS]
    out = {}
    for method in order:
        mine = [r for r in runs if r.method == method]
        if not mine:
            continue
        metrics = [run_metrics(r, k_max) for r in mine]
        entry = {
            "runs": [r.name for r in mine],
            "metrics": {m: _stat([x[m] for x in metrics]) for m in metrics[0]},
            **{metric.name: {} for metric in headline_entries()},  # the curves the report draws: pass@k, maj@k
        }
        results = [EvalResult.of(r.result) for r in mine]
        for k in sorted({k for result in results for k in result.ks}):
            have = [result for result in results if k in result.table(headline_entries()[0].name)]
            for metric in headline_entries():
                entry[metric.name][k] = _stat([result.table(metric.name)[k] for result in have])
        costs = [r.cost for r in mine if r.cost]
        if costs:
            entry["cost"] = {
                key: _stat([c[key] for c in costs])
                for key in ("samples_generated", "generated_tokens", "trained_sequences", "wall_seconds")
                if all(isinstance(c.get(key), int | float) for c in costs)
            }
        out[method] = entry
    return {"k_max": k_max, "methods": out}


def findings(runs: Sequence[Run]) -> list[dict]:
    """The paper's four findings, judged by the study's rule (:func:`grpo_ext.experiments.study.stats.paper_findings`:
    the 95% bootstrap interval over problems of the paired difference excludes 0 and every seed agrees in sign), so
    a claim gets one verdict whichever report judges it. A method's runs are paired with another's by label (seed):
    each method's runs are taken in label order. A finding also carries its numbers as ``text``."""
    arms: dict[str, list[dict]] = {}
    for run in sorted((r for r in runs if r.method != BASE_RUN), key=lambda r: r.label):
        arms.setdefault(run.method, []).append(run.result)
    base = next((r.result for r in runs if r.method == BASE_RUN), None)
    return [{**f, "text": finding_text(f)} for f in paper_findings(arms, base)]
