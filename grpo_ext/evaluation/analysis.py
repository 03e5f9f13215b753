"""Intervals over problems and model-against-model comparisons, computed from harness results' per-problem records.

Pure functions of :func:`~grpo_ext.evaluation.harness.evaluate_model` results (or what
:func:`~grpo_ext.evaluation.report.read_report` gives back); the resampling is :mod:`grpo_ext.evaluation.bootstrap`.

- **Intervals.** Every mean a report shows gets a percentile bootstrap interval over problems (problems resampled
  with replacement; the samples within a problem are already averaged exactly by the metrics). One
  :class:`BootstrapSettings` (seed, number of resamples, confidence) serves a whole report and is written into it,
  so every interval can be recomputed bit for bit.
- **Comparisons.** Model B against model A, paired by problem (``problem_id``): with two models A is the first and B
  the second; with more, each later model is a B against the first. A comparison holds the differences B - A with
  paired intervals, the solved-set overlap at each k (:data:`SOLVED_THRESHOLD`), and the crossover k of the
  pass@k curves with its interval, searched over every power of two up to n.

Results without per-problem records (older or hand-made files) get no intervals and no comparison; a metric whose
per-problem values are missing (e.g. ``distinct_answers`` in a report written before it existed) is left out.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from grpo_ext.evaluation.bootstrap import (
    bootstrap_mean_ci,
    bootstrap_paired_difference_ci,
    crossover_k,
    solved_overlap,
)
from grpo_ext.evaluation.registry import PASS_AT_K, default_ks, get_metric, keyed_metrics, scalar_metrics

__all__ = [
    "SOLVED_THRESHOLD",
    "DEFAULT_BOOTSTRAP",
    "BootstrapSettings",
    "analyze",
    "compare_models",
    "crossover_summary",
    "metric_keys",
    "model_intervals",
    "per_problem_values",
]

#: A model *solves* a problem at k when its pass@k there is at least this (see bootstrap.solved_overlap).
SOLVED_THRESHOLD = 0.5


@dataclass(frozen=True)
class BootstrapSettings:
    """How every interval of a report is drawn: percentile bootstrap over problems, ``n_resamples`` resamples from
    ``numpy.random.default_rng(seed)``, central ``confidence`` interval."""

    n_resamples: int = 10_000
    seed: int = 0
    confidence: float = 0.95

    def __post_init__(self):
        for name in ("n_resamples", "seed"):
            value = getattr(self, name)
            try:
                operator.index(value)
            except TypeError:
                raise ValueError(f"bootstrap {name} must be an integer, got {value!r}") from None
            if isinstance(value, bool):
                raise ValueError(f"bootstrap {name} must be an integer, got {value!r}")
        if self.n_resamples < 1:
            raise ValueError(f"bootstrap n_resamples must be >= 1, got {self.n_resamples}")
        if self.seed < 0:
            raise ValueError(f"bootstrap seed must be >= 0, got {self.seed}")
        if not 0.0 < float(self.confidence) < 1.0:
            raise ValueError(f"bootstrap confidence must be in (0, 1), e.g. 0.95; got {self.confidence!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def kwargs(self) -> dict:
        """The keyword arguments of the functions of :mod:`grpo_ext.evaluation.bootstrap`."""
        return {"n_resamples": int(self.n_resamples), "seed": int(self.seed), "confidence": float(self.confidence)}


#: 10,000 resamples, seed 0, 95%: the settings of every report unless asked otherwise.
DEFAULT_BOOTSTRAP = BootstrapSettings()


# --------------------------------------------------------------------------------------------------------------------
# per-problem values


def _rows(result: dict, ids: Sequence[str] | None) -> list[dict] | None:
    """The per-problem records in ``ids`` order (default: the result's order); None without records or counts."""
    rows = result.get("per_problem") or []
    if not rows or not all(isinstance(r, dict) and "n_correct" in r for r in rows) or not result.get("n"):
        return None
    if ids is None:
        return rows
    by_id = {str(r.get("problem_id")): r for r in rows}
    return [by_id[i] for i in ids]


def metric_keys(result: dict, metric: str) -> list[str]:
    """The keys a result reports ``metric`` at: its ks (as strings) for pass@k / maj@k / pass^k, its taus for
    Cover@tau, ``[]`` for a metric the result lacks."""
    table = result.get(metric)
    if not isinstance(table, dict):
        return []
    return get_metric(metric).sort_keys(table)


def per_problem_values(result: dict, metric: str, keys: Sequence[str] = (), ids: Sequence[str] | None = None):
    """Each problem's value of ``metric``: shape (problems, len(keys)) for a keyed metric (``keys``: ks or
    taus as strings), (problems,) for a one-number metric; rows in ``ids`` order (default: the result's order).
    None when the result lacks what the metric needs.

    pass@k, pass^k and Cover@tau come from ``n_correct`` and ``n`` (exact, any k <= n); maj@k, distinct answers and
    answer entropy are read from the records (the harness computed them from the answers).
    """
    entry = get_metric(metric)  # an unknown metric is a ValueError naming the registered ones
    rows = _rows(result, ids)
    if rows is None:
        return None
    n = int(result["n"])
    if entry.keyed_by is None:
        return entry.per_problem(n, rows, None)
    columns = []
    for key in keys:
        column = entry.per_problem(n, rows, key)
        if column is None:
            return None
        columns.append(column)
    return np.stack(columns, axis=1) if columns else np.zeros((len(rows), 0))


# --------------------------------------------------------------------------------------------------------------------
# one model


def model_intervals(result: dict, settings: BootstrapSettings = DEFAULT_BOOTSTRAP) -> dict:
    """Intervals of every mean of one result: ``{metric: {key: [low, high]}}`` for the keyed metrics and
    ``{metric: [low, high]}`` for the others; ``{}`` for a result without per-problem records. All metrics see the
    same resamples (same seed, same problems)."""
    out: dict = {}
    for metric in (m.name for m in keyed_metrics()):
        keys = metric_keys(result, metric)
        values = per_problem_values(result, metric, keys) if keys else None
        if values is None:
            continue
        ci = bootstrap_mean_ci(values, **settings.kwargs())
        out[metric] = {key: [float(ci.low[j]), float(ci.high[j])] for j, key in enumerate(keys)}
    for metric in (m.name for m in scalar_metrics()):
        values = per_problem_values(result, metric)
        if values is not None:
            ci = bootstrap_mean_ci(values, **settings.kwargs())
            out[metric] = [ci.low, ci.high]
    return out


# --------------------------------------------------------------------------------------------------------------------
# two models


def _difference(b_values, a_values, settings: BootstrapSettings, keys: Sequence[str] | None):
    ci = bootstrap_paired_difference_ci(b_values, a_values, **settings.kwargs())
    if keys is None:
        return {"difference": ci.estimate, "low": ci.low, "high": ci.high}
    return {
        key: {"difference": float(ci.estimate[j]), "low": float(ci.low[j]), "high": float(ci.high[j])}
        for j, key in enumerate(keys)
    }


def crossover_summary(pass_a: np.ndarray, pass_b: np.ndarray, ks: list[int], settings: BootstrapSettings) -> dict:
    """The crossover of two models' pass@k curves (see bootstrap.crossover_k), spelled out for a report:
    ``pass_a``/``pass_b`` per-problem pass@k at ``ks``, shape (problems, len(ks)), problems paired by row."""
    mean_a, mean_b = pass_a.mean(axis=0), pass_b.mean(axis=0)
    leader = None if mean_a[0] == mean_b[0] else ("a" if mean_a[0] > mean_b[0] else "b")
    out = {"ks": ks, "leader": leader, "k": None, "low": None, "high": None, "no_crossover_share": None}
    found = crossover_k(pass_a, pass_b, ks, **settings.kwargs())
    if found is not None:
        out.update(k=found.k, low=found.low, high=found.high, no_crossover_share=found.no_crossover_share)
    return out


def compare_models(
    a: dict,
    b: dict,
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    solved_threshold: float = SOLVED_THRESHOLD,
) -> dict | None:
    """Model B against model A, paired by problem, on the problems both were scored on; None when either lacks
    per-problem records or they share no problem.

    Returns ``{"a", "b", "n_problems", "n", "ks", "difference": {metric: ...}, "solved_overlap": {k: {"both",
    "only_a", "only_b", "neither"}}, "crossover": {...}}``. Differences are B - A (mean, interval paired by problem)
    at the ks both report. Overlap: "solved" = pass@k >= ``solved_threshold``. Crossover: the smallest k at which
    the model behind at k = 1 reaches the other's mean pass@k, over every power of two up to n and the reported ks
    (``k`` None: none within k <= n), with its interval (``high`` None: the interval reaches past n).
    """
    if _rows(a, None) is None or _rows(b, None) is None:
        return None
    in_b = {str(r["problem_id"]) for r in b["per_problem"]}
    ids = [str(r["problem_id"]) for r in a["per_problem"] if str(r["problem_id"]) in in_b]
    if not ids:
        return None
    n = min(int(a["n"]), int(b["n"]))
    out = {"a": a["model"], "b": b["model"], "n_problems": len(ids), "n": n, "solved_threshold": solved_threshold}
    difference: dict = {}
    for metric in (m.name for m in keyed_metrics()):
        keys = [key for key in metric_keys(a, metric) if key in set(metric_keys(b, metric))]
        if get_metric(metric).keyed_by == "k":
            keys = [key for key in keys if int(key) <= n]
        va = per_problem_values(a, metric, keys, ids) if keys else None
        vb = per_problem_values(b, metric, keys, ids) if keys else None
        if va is not None and vb is not None:
            difference[metric] = _difference(vb, va, settings, keys)
    for metric in (m.name for m in scalar_metrics()):
        va, vb = per_problem_values(a, metric, ids=ids), per_problem_values(b, metric, ids=ids)
        if va is not None and vb is not None:
            difference[metric] = _difference(vb, va, settings, None)
    out["difference"] = difference

    passes = PASS_AT_K.name  # solved sets and the crossover are read off pass@k
    ks = sorted({int(k) for k in metric_keys(a, passes)} & {int(k) for k in metric_keys(b, passes)})
    ks = [k for k in ks if k <= n] or [1]
    out["ks"] = ks
    keys = [str(k) for k in ks]
    overlap = solved_overlap(
        per_problem_values(a, passes, keys, ids), per_problem_values(b, passes, keys, ids), solved_threshold
    )
    out["solved_overlap"] = {
        key: {field: int(getattr(overlap, field)[j]) for field in overlap._fields} for j, key in enumerate(keys)
    }
    search = sorted(set(default_ks(n)) | set(ks))
    pass_a = per_problem_values(a, passes, [str(k) for k in search], ids)
    pass_b = per_problem_values(b, passes, [str(k) for k in search], ids)
    out["crossover"] = crossover_summary(pass_a, pass_b, search, settings)
    return out


def analyze(
    results: Sequence[dict],
    settings: BootstrapSettings = DEFAULT_BOOTSTRAP,
    solved_threshold: float = SOLVED_THRESHOLD,
) -> dict:
    """Everything a report adds to its results: ``{"bootstrap", "intervals" (one dict per result), "comparisons"
    (each later result against the first; None where a pair cannot be compared)}``."""
    return {
        "bootstrap": {**settings.to_dict(), "method": "percentile", "unit": "problem"},
        "intervals": [model_intervals(r, settings) for r in results],
        "comparisons": [compare_models(results[0], r, settings, solved_threshold) for r in results[1:]],
    }
