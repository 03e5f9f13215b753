"""The metric registry: every metric a harness result reports, in one table that every reader iterates.

A :class:`Metric` is a name (the result's JSON key, ``pass@k``), what its values are keyed by (``"k"``: one value
per k, ``"tau"``: per threshold, ``None``: one number) and a per-problem function. The result's mean is the mean of
the per-problem values over problems (:func:`grpo_ext.evaluation.scoring.summarize`), the report's interval is a
bootstrap of them (:mod:`grpo_ext.evaluation.analysis`), and the report, the model card and the method comparison
read the tables through the same entries. Adding a metric is its per-problem function (a file, or
:mod:`grpo_ext.evaluation.metrics`) plus one :func:`register_metric` call.

The registry also says which metrics lead (``headline``: the model card's, lm-eval's, the ones a study or a search
picks runs by; :func:`headline_at`, :func:`headline_forms`; the three numbers a report of one k leads with,
:func:`headline_trio`) and which k a result reports for n samples a problem (:func:`default_ks`). The built-in keyed
metrics are importable entries (:data:`PASS_AT_K`, :data:`MAJ_AT_K`, :data:`PASS_HAT_K`, :data:`COVER_AT_TAU`;
:data:`PASS_AT_1` is pass@k's name at 1): no reader spells a metric's name or its own k rule.

A per-problem function is ``f(n, records, key) -> array | None``: ``n`` samples per problem, the problems' records
(:func:`grpo_ext.evaluation.scoring.score_problem`), ``key`` the k or tau as the JSON key (a string; None for an
unkeyed metric); one float64 value per record, or None when the records lack what the metric needs (a report
written before the metric existed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from grpo_ext.evaluation.metrics import cover_at_many, pass_at_k_many, pass_hat_k_many

__all__ = [
    "COVER_AT_TAU",
    "MAJ_AT_K",
    "METRICS",
    "PASS_AT_1",
    "PASS_AT_K",
    "PASS_HAT_K",
    "Metric",
    "default_ks",
    "get_metric",
    "headline_at",
    "headline_entries",
    "headline_forms",
    "headline_trio",
    "keyed_metrics",
    "metric_at",
    "register_metric",
    "scalar_metrics",
]

PerProblem = Callable[[int, Sequence[dict], "str | None"], "np.ndarray | None"]


@dataclass(frozen=True)
class Metric:
    """A registry entry.

    Attributes:
        name: the result's key (``pass@k``), also the report's column and the card's metric (``@k`` -> ``@4``).
        keyed_by: ``"k"``, ``"tau"`` or None (one value for the whole result).
        per_problem: see the module docstring.
        title: how a sentence names it (``answer entropy (bits)``).
        legend: the report's legend line for it; None to leave it out (a line another entry's covers).
        headline: a metric reports lead with: the model card's ``model-index`` lists it (one entry per k), the lm-eval
            tasks report it, and a study or a search may pick runs by it (keyed by k only).
    """

    name: str
    keyed_by: str | None
    per_problem: PerProblem
    title: str
    legend: str | None = None
    headline: bool = False

    def sort_keys(self, keys) -> list[str]:
        """A result's keys of this metric in order: ks as integers, taus as numbers."""
        return sorted(keys, key=float if self.keyed_by == "tau" else int)

    def at(self, key) -> str:
        """The name of one value of a keyed metric, as logs and tables write it: ``pass@k`` at 4 is ``pass@4``."""
        if self.keyed_by is None:
            raise ValueError(f"metric {self.name!r} has one value, not one per key")
        return self.name[: -len(self.keyed_by)] + str(key)


def _counts(records: Sequence[dict]) -> np.ndarray:
    return np.array([r["n_correct"] for r in records])


def _pass_at_k(n: int, records: Sequence[dict], key: str) -> np.ndarray:
    return pass_at_k_many(n, _counts(records), int(key))


def _pass_hat_k(n: int, records: Sequence[dict], key: str) -> np.ndarray:
    return pass_hat_k_many(n, _counts(records), int(key))


def _cover_at(n: int, records: Sequence[dict], key: str) -> np.ndarray:
    return cover_at_many(n, _counts(records), float(key))


def _maj_at_k(n: int, records: Sequence[dict], key: str) -> np.ndarray | None:
    # exact maj@k needs the answers, which the harness scored per problem and kept in the record under the metric's
    # name (`grpo_ext.evaluation.scoring.score_problem`)
    name = MAJ_AT_K.name
    if not all(isinstance(r.get(name), dict) and key in r[name] for r in records):
        return None
    return np.array([r[name][key] for r in records], dtype=np.float64)


def _mean_accuracy(n: int, records: Sequence[dict], key: None) -> np.ndarray:
    return _counts(records) / n


def _recorded(field: str) -> PerProblem:
    """A per-problem value the harness computed from the answers and kept in each record under ``field``."""

    def read(n: int, records: Sequence[dict], key: None) -> np.ndarray | None:
        if not all(field in r for r in records):
            return None
        return np.array([r[field] for r in records], dtype=np.float64)

    return read


def _share(field: str) -> PerProblem:
    """A count of samples the harness kept in each record under ``field``, as a fraction of the problem's ``n``."""

    def read(n: int, records: Sequence[dict], key: None) -> np.ndarray | None:
        if not all(field in r for r in records):
            return None  # a report written before the field existed
        return np.array([r[field] for r in records], dtype=np.float64) / n

    return read


_LEGEND_PASS = (
    "- **pass@k**: P(at least one of k samples is right), unbiased (Chen et al.): what the model *can* solve."
)
_LEGEND_MAJ = (
    "- **maj@k**: P(the most frequent answer among k samples is right), exact (ties split, no answer does not vote): "
    "what self-consistency gets."
)
_LEGEND_HAT = "- **pass^k**: P(all k samples are right), unbiased: how *reliably* it solves."
_LEGEND_COVER = (
    "- **Cover@tau**: share of problems whose fraction of right samples is >= tau (breadth at low tau, depth at high "
    "tau)."
)
_LEGEND_STRICT = (
    "- **strict pass@1**: accuracy counting only samples that state their answer in the task's strict form (e.g. "
    "`#### n`), beside pass@1, which also accepts the lenient extraction (the last number); **strict share**: the "
    "share of samples in the strict form, right or wrong. A gap between pass@1 and strict pass@1 is right but "
    "unformatted."
)
_LEGEND_DIVERSITY = "- **answer diversity**: distinct answers per problem and the entropy (bits) of their distribution."

#: name -> entry, in the order reports list them (keyed metrics first, then the one-number ones).
METRICS: dict[str, Metric] = {}


def register_metric(metric: Metric) -> Metric:
    """Add ``metric`` to :data:`METRICS` (after the registered ones: a keyed metric belongs before the one-number ones
    for reports to list it in that order); a taken name is a ``ValueError``."""
    if metric.name in METRICS:
        raise ValueError(f"metric {metric.name!r} is already registered")
    METRICS[metric.name] = metric
    return metric


# The keyed metrics, each under its own name: readers use these entries (``PASS_AT_K.name``, ``MAJ_AT_K.at(16)``) and
# never spell a metric's name.
PASS_AT_K = register_metric(Metric("pass@k", "k", _pass_at_k, "pass@k", _LEGEND_PASS, headline=True))
MAJ_AT_K = register_metric(Metric("maj@k", "k", _maj_at_k, "maj@k", _LEGEND_MAJ, headline=True))
PASS_HAT_K = register_metric(Metric("pass^k", "k", _pass_hat_k, "pass^k", _LEGEND_HAT))
COVER_AT_TAU = register_metric(Metric("cover@tau", "tau", _cover_at, "Cover@tau", _LEGEND_COVER))
for _metric in (
    Metric("mean_accuracy", None, _mean_accuracy, "mean accuracy"),
    Metric("distinct_answers", None, _recorded("distinct_answers"), "distinct answers", _LEGEND_DIVERSITY),
    Metric("answer_entropy", None, _recorded("answer_entropy"), "answer entropy (bits)"),
    Metric("strict_accuracy", None, _share("n_correct_strict"), "strict pass@1", _LEGEND_STRICT),
    Metric("strict_share", None, _share("n_strict"), "strict share"),
):
    register_metric(_metric)

#: pass@k at k = 1, the expected share of right samples: the accuracy every report, study and search starts from.
PASS_AT_1 = PASS_AT_K.at(1)


def headline_trio(k: int | str) -> list[str]:
    """The three numbers a report of one k leads with, in the order its tables print them: ``pass@1`` (accuracy),
    ``maj@k`` (what a vote over k samples gets) and ``pass@k`` (what k samples can solve)."""
    return [PASS_AT_1, MAJ_AT_K.at(k), PASS_AT_K.at(k)]


def get_metric(name: str) -> Metric:
    """The entry for ``name``; ``ValueError`` naming the registered metrics."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; expected one of {tuple(METRICS)}") from None


def metric_at(text: str) -> tuple[Metric, str | None]:
    """``pass@4`` -> (the ``pass@k`` entry, ``"4"``), the key as a result's JSON holds it; an unkeyed metric's name ->
    (its entry, None). ``ValueError`` naming the registered metrics otherwise."""
    if text in METRICS and METRICS[text].keyed_by is None:
        return METRICS[text], None
    for metric in keyed_metrics():
        prefix = metric.at("")
        key = text[len(prefix) :]
        if text.startswith(prefix) and key:
            try:
                number = int(key) if metric.keyed_by == "k" else float(key)
            except ValueError:
                continue
            return metric, repr(number) if metric.keyed_by == "tau" else str(number)  # as the JSON writes keys
    names = ", ".join(m.at(m.keyed_by.upper()) if m.keyed_by else m.name for m in METRICS.values())
    raise ValueError(f"unknown metric {text!r}; expected one of {names}")


def keyed_metrics(by: str | None = None) -> list[Metric]:
    """The metrics with one value per key (``by``: only those keyed by ``"k"`` or ``"tau"``)."""
    return [m for m in METRICS.values() if m.keyed_by is not None and by in (None, m.keyed_by)]


def scalar_metrics() -> list[Metric]:
    """The metrics with one value per result."""
    return [m for m in METRICS.values() if m.keyed_by is None]


def headline_entries() -> list[Metric]:
    """The headline metrics, keyed by k (pass@k, maj@k), in the registry's order."""
    return [m for m in keyed_metrics("k") if m.headline]


def headline_forms(key: str = "k") -> str:
    """The headline metrics as a message names them: ``pass@k or maj@k`` (``key``: the letter a message uses)."""
    return " or ".join(m.at(key) for m in headline_entries())


def headline_at(text: str) -> tuple[Metric, int] | None:
    """``maj@16`` -> (the ``maj@k`` entry, 16) for a headline metric at a k written in digits; None for anything
    else (a study's or a search's pick metric is one of these)."""
    for metric in headline_entries():
        prefix, key = metric.at(""), str(text)[len(metric.at("")) :]
        if str(text).startswith(prefix) and key.isdigit():
            return metric, int(key)
    return None


def default_ks(n: int, *, with_n: bool = True) -> list[int]:
    """Which k a result reports for ``n`` samples a problem: the powers of two up to ``n`` (the ks of DeepSeekMath's
    Figure 7), then ``n`` itself unless ``with_n`` is False. The harness's default ``--k`` (and where the pass@k
    crossover is searched) has ``n``; a study's evaluation, the lm-eval tasks and the ``evaluate`` module stop at the
    last power of two."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    if with_n:
        return [*ks, n]
    return [*ks, n] if k == n else ks  # n is itself a power of two
