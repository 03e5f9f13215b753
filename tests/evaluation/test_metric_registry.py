"""grpo_ext.evaluation.registry: one table of metrics that the scorer, the analysis, the report and the card read."""

import numpy as np
import pytest

from grpo_ext.evaluation import registry
from grpo_ext.evaluation.analysis import model_intervals, per_problem_values
from grpo_ext.evaluation.registry import METRICS, Metric, get_metric, keyed_metrics, scalar_metrics
from grpo_ext.evaluation.scoring import summarize

# two problems, n = 4: one right 3 times (answers 5, 5, 5, 7; two of the right ones in the strict form, and the 7),
# one right once (answers 1, 2, 2, None; the right 1 unformatted, one 2 strict)
RECORDS = [
    {"problem_id": "a", "n_correct": 3, "n_extracted": 4, "distinct_answers": 2, "answer_entropy": 0.811,
     "maj@k": {"1": 0.75, "2": 0.875}, "n_strict": 3, "n_correct_strict": 2},
    {"problem_id": "b", "n_correct": 1, "n_extracted": 3, "distinct_answers": 2, "answer_entropy": 0.918,
     "maj@k": {"1": 0.25, "2": 0.2}, "n_strict": 1, "n_correct_strict": 0},
]  # fmt: skip


def test_the_registry_orders_the_metrics_as_the_reports_did():
    assert list(METRICS) == [
        "pass@k", "maj@k", "pass^k", "cover@tau", "mean_accuracy", "distinct_answers", "answer_entropy",
        "strict_accuracy", "strict_share",
    ]  # fmt: skip
    assert tuple(m.name for m in keyed_metrics()) == ("pass@k", "maj@k", "pass^k", "cover@tau")
    assert tuple(m.name for m in scalar_metrics()) == (
        "mean_accuracy", "distinct_answers", "answer_entropy", "strict_accuracy", "strict_share"
    )  # fmt: skip
    assert [m.name for m in METRICS.values() if m.headline] == ["pass@k", "maj@k"]
    with pytest.raises(ValueError, match="unknown metric 'pass@x'"):
        get_metric("pass@x")


def test_summarize_is_the_mean_of_each_registered_per_problem_function():
    out = summarize(RECORDS, 4, [1, 2], taus=[0.5])
    # hand-worked: pass@2 = mean(1 - C(1,2)/C(4,2), 1 - C(3,2)/C(4,2)) = mean(1, 0.5); pass^2 = mean(3/6, 0)
    assert out["pass@k"] == {"1": 0.5, "2": 0.75}
    assert out["pass^k"] == {"1": 0.5, "2": 0.25}
    assert out["maj@k"] == {"1": 0.5, "2": pytest.approx(0.5375)}
    assert out["cover@tau"] == {"0.5": 0.5}
    assert out["mean_accuracy"] == 0.5 and out["answers_extracted"] == 7 / 8
    assert out["distinct_answers"] == 2.0 and out["answer_entropy"] == pytest.approx(0.8645)
    # strict: mean(2/4, 0/4) right in the strict form; mean(3/4, 1/4) in the strict form at all
    assert out["strict_accuracy"] == 0.25 and out["strict_share"] == 0.5
    assert list(out) == [*METRICS, "answers_extracted"]


def test_records_written_before_a_metric_existed_summarize_without_it():
    old = [{k: v for k, v in r.items() if k not in ("n_strict", "n_correct_strict")} for r in RECORDS]
    out = summarize(old, 4, [1, 2], taus=[0.5])
    assert "strict_accuracy" not in out and "strict_share" not in out and out["mean_accuracy"] == 0.5


def test_a_new_metric_is_one_registry_line(monkeypatch):
    """What adding a metric takes: its per-problem function and one entry; the scorer and the intervals pick it up."""

    def share_unanimous(n, records, key):  # e.g. problems whose samples all gave one answer
        return np.array([float(r["distinct_answers"] == 1) for r in records])

    extra = Metric("unanimous", None, share_unanimous, "unanimous problems")
    monkeypatch.setitem(registry.METRICS, "unanimous", extra)
    assert summarize(RECORDS, 4, [1])["unanimous"] == 0.0
    result = {"n": 4, "per_problem": RECORDS, "pass@k": {"1": 0.5}, "unanimous": 0.0}
    assert per_problem_values(result, "unanimous").tolist() == [0.0, 0.0]
    assert model_intervals(result)["pass@k"]["1"] == [0.25, 0.75]  # the others are as before
