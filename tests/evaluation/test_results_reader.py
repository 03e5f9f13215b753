"""One typed reader of an evaluation result (grpo_ext.evaluation.results.EvalResult) and the registry's metric names
(``Metric.at``, ``metric_at``) that the search, the method comparison and the study read results through."""

import importlib.util
from pathlib import Path

import pytest

from grpo_ext.evaluation.registry import METRICS, metric_at
from grpo_ext.evaluation.results import EvalResult
from grpo_ext.evaluation.scoring import summarize
from grpo_ext.experiments.compare.findings import run_metrics
from grpo_ext.experiments.compare.runs import RESULTS, Run
from grpo_ext.experiments.study.stats import headline_metrics

# two problems, n = 4: right 3 times and once (pass@1 = 0.5, pass@2 = mean(1, 0.5) = 0.75, pass^2 = mean(0.5, 0))
RECORDS = [
    {"problem_id": "a", "n_correct": 3, "n_extracted": 4, "distinct_answers": 2, "answer_entropy": 0.8,
     "maj@k": {"1": 0.75, "2": 0.875}},
    {"problem_id": "b", "n_correct": 1, "n_extracted": 3, "distinct_answers": 2, "answer_entropy": 0.9,
     "maj@k": {"1": 0.25, "2": 0.25}},
]  # fmt: skip


def _result(ks=(1, 2), model="runs/a") -> dict:
    """A result as evaluate_model returns it (and read_report reads it back)."""
    return {"model": model, "n": 4, "ks": list(ks), **summarize(RECORDS, 4, list(ks), taus=[0.5]), "per_problem": []}


def test_metric_names_at_a_key_round_trip_through_the_registry():
    assert [m.at(4) for m in METRICS.values() if m.keyed_by == "k"] == ["pass@4", "maj@4", "pass^4"]
    assert METRICS["cover@tau"].at(0.5) == "cover@0.5"
    assert metric_at("maj@16") == (METRICS["maj@k"], "16")
    assert metric_at("pass^2") == (METRICS["pass^k"], "2")  # not pass@k: the prefix decides
    assert metric_at("pass@04") == (METRICS["pass@k"], "4")  # the key as the result's JSON writes it
    assert metric_at("cover@.5") == (METRICS["cover@tau"], "0.5")
    assert metric_at("mean_accuracy") == (METRICS["mean_accuracy"], None)
    for bad in ("pass@k", "pass@", "pass@two", "majority@4", "mean_accuracy@2"):
        with pytest.raises(ValueError, match=f"unknown metric '{bad}'; expected one of pass@K, maj@K, pass\\^K"):
            metric_at(bad)
    with pytest.raises(ValueError, match="one value"):
        METRICS["mean_accuracy"].at(2)


def test_a_result_reads_one_number_or_a_table_by_its_registry_name():
    result = EvalResult.of(_result())
    assert (result.model, result.n, result.ks) == ("runs/a", 4, (1, 2))
    assert result.value("pass@2") == 0.75 and result.value("pass^2") == 0.25 and result.value("maj@2") == 0.5625
    assert result.value("cover@0.5") == 0.5 and result.value("mean_accuracy") == 0.5
    assert result.table("pass@k") == {1: 0.5, 2: 0.75} and list(result.table("maj@k")) == [1, 2]
    assert result.table("cover@tau") == {0.5: 0.5}
    with pytest.raises(ValueError, match=r"'runs/a' has no pass@8 \(pass@k at k: 1, 2\)"):
        result.value("pass@8")
    with pytest.raises(ValueError, match="'pass@2' is not a table"):
        result.table("pass@2")


def test_pass_at_1_is_the_mean_accuracy_when_k_1_was_not_scored():
    result = EvalResult.of(_result(ks=(2,)))
    assert 1 not in result.table("pass@k") and result.value("pass@1") == 0.5
    with pytest.raises(ValueError, match="no maj@1"):  # only pass@1 has a second name
        result.value("maj@1")


def test_the_readers_ask_the_typed_result():
    assert headline_metrics(16) == ["pass@1", "maj@16", "pass@16"]
    run = Run("grpo@s0", "grpo_outcome", "s0", "r.json", RESULTS, result=_result())
    assert run_metrics(run, 2) == {"pass@1": 0.5, "maj@2": 0.5625, "pass@2": 0.75}
    spec = importlib.util.spec_from_file_location("search_score", Path(__file__).parents[2] / "scripts/search.py")
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    report = {"models": [_result(), {**_result(), "pass@k": {"1": 0.25, "2": 0.5}, "model": "runs/b"}]}
    assert search._score(report, "pass@2") == 0.75 and search._score(report, "pass@2", 1) == 0.5
    assert search._score(report, "maj@1", 1) == 0.5
