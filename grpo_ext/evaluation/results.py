"""One typed reader of an evaluation result: what ``evaluate_model`` returns and ``read_report`` reads back.

    result = EvalResult.of(read_report("outputs/eval"))
    result.value(PASS_AT_1), result.value(MAJ_AT_K.at(16))   # one number each
    result.table(PASS_AT_K.name)                             # {1: 0.41, 2: 0.55, ...}, ks as integers

Names are the metric registry's (:mod:`grpo_ext.evaluation.registry`): ``pass@k`` names a table, ``pass@4`` one of
its values, ``mean_accuracy`` a number. A reader that picks metrics by name (a search's ``--metric``, a report's
headline numbers) asks here rather than indexing the result with a metric's name and ``str(k)`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from grpo_ext.evaluation.registry import METRICS, PASS_AT_1, keyed_metrics, metric_at, scalar_metrics

__all__ = ["EvalResult"]


@dataclass(frozen=True)
class EvalResult:
    """One model's result.

    Attributes:
        model: the model's name as the result gives it (None when it does not).
        n: samples per problem.
        ks: the ks the result was scored at, ascending.
        tables: per keyed metric the result holds, ``{key as its JSON writes it: value}``.
        scalars: per one-number metric the result holds, its value.
    """

    model: str | None
    n: int
    ks: tuple[int, ...]
    tables: Mapping[str, Mapping[str, float]]
    scalars: Mapping[str, float]

    @classmethod
    def of(cls, result: dict) -> EvalResult:
        """The registered metrics of a result dict (other keys, e.g. ``per_problem``, stay in the dict)."""
        tables = {
            m.name: {str(key): float(v) for key, v in result[m.name].items()}
            for m in keyed_metrics()
            if isinstance(result.get(m.name), dict)
        }
        scalars = {m.name: float(result[m.name]) for m in scalar_metrics() if result.get(m.name) is not None}
        return cls(result.get("model"), int(result["n"]), tuple(sorted(result["ks"])), tables, scalars)

    def value(self, name: str) -> float:
        """One number: ``pass@4``, ``cover@0.5``, ``mean_accuracy``; a ``ValueError`` naming what the result has."""
        metric, key = metric_at(name)
        if key is None:
            if name not in self.scalars:
                raise ValueError(f"result of {self.model!r} has no {name}")
            return self.scalars[name]
        table = self.tables.get(metric.name, {})
        if key not in table and metric.at(key) == PASS_AT_1 and "mean_accuracy" in self.scalars:
            return self.scalars["mean_accuracy"]  # pass@1 is the mean accuracy whether or not k = 1 was scored
        if key not in table:
            have = ", ".join(metric.sort_keys(table)) or "none"
            raise ValueError(f"result of {self.model!r} has no {name} ({metric.name} at {metric.keyed_by}: {have})")
        return table[key]

    def table(self, name: str) -> dict[int | float, float]:
        """A keyed metric's values by key (ks as integers, taus as floats) in key order; {} when the result lacks it."""
        metric = METRICS.get(name)
        if metric is None or metric.keyed_by is None:
            raise ValueError(f"{name!r} is not a table; expected one of {', '.join(m.name for m in keyed_metrics())}")
        table = self.tables.get(name, {})
        cast = int if metric.keyed_by == "k" else float
        return {cast(key): table[key] for key in metric.sort_keys(table)}
