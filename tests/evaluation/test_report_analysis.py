"""The harness report's numbers on synthetic results whose answers are known: per-problem scoring, means, intervals,
B-against-A comparisons (differences, solved-set overlap, pass@k crossover), report files (complete or refused,
portable model paths), and scoring problem by problem without holding the samples (with and without a cache)."""

import json
import math
import random
import tracemalloc

import numpy as np
import pytest

from grpo_ext.errors import UserError
from grpo_ext.evaluation import report as report_module
from grpo_ext.evaluation.analysis import BootstrapSettings, compare_models, model_intervals, per_problem_values
from grpo_ext.evaluation.backends import Backend
from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_paired_difference_ci
from grpo_ext.evaluation.harness import evaluate_model, score_samples
from grpo_ext.evaluation.metrics import cover_at, maj_at_k, pass_at_k, pass_hat_k
from grpo_ext.evaluation.report import read_comparisons, read_report, write_reports
from grpo_ext.evaluation.scoring import score_problem, summarize
from grpo_ext.io import REPO_ROOT
from grpo_ext.sampler.sampling import SamplingParams
from grpo_ext.tasks import get_task
from tests.harness_results import harness_result

TASK = get_task("arithmetic")
KS = (1, 2, 4, 8)
FAST = BootstrapSettings(n_resamples=2000, seed=0)


def _problems(count: int) -> list[dict]:
    return [{"problem_id": str(i), "prompt": f"{i}+0=", "answer": str(i)} for i in range(count)]


def _result(name: str, n_correct: list[int], n: int = 8, ks=KS) -> dict:
    """A harness-shaped result: problem i has n_correct[i] samples answering i (right), the rest answering i + 1."""
    completions = [[f"#{i}"] * c + [f"#{i + 1}"] * (n - c) for i, c in enumerate(n_correct)]
    return harness_result(name, TASK, _problems(len(n_correct)), completions, ks)


# ---- one problem, one model ------------------------------------------------------------------------------------


def test_score_problem_counts_by_hand():
    completions = ["1+4=5;#5", "#5", "#7", "no answer", "#05", "#7", "#9", "#5"]
    record = score_problem(TASK, {"problem_id": "p", "prompt": "1+4=", "answer": "5"}, completions, [1, 2, 8])
    assert record["n_correct"] == 4 and record["n_extracted"] == 7 and record["top_answer"] == "5"
    assert record["answer_classes"] == [[4, 4], [2, 0], [1, 0]]  # largest first: "5", "7", "9"
    assert record["distinct_answers"] == 3
    shares = np.array([4, 2, 1]) / 7
    assert record["answer_entropy"] == pytest.approx(float(-(shares * np.log2(shares)).sum()), abs=1e-12)
    answers = [TASK.extract_answer(c) for c in completions]
    correct = [TASK.is_correct(c, "5") for c in completions]
    assert record["maj@k"] == {str(k): pytest.approx(maj_at_k(answers, correct, k), abs=1e-15) for k in (1, 2, 8)}


def test_summary_means_equal_the_metric_functions_problem_by_problem():
    n_correct = [0, 1, 3, 8, 5, 4]
    result = _result("m", n_correct)
    for k in KS:
        assert result["pass@k"][str(k)] == pytest.approx(np.mean([pass_at_k(8, c, k) for c in n_correct]), abs=1e-12)
        assert result["pass^k"][str(k)] == pytest.approx(np.mean([pass_hat_k(8, c, k) for c in n_correct]), abs=1e-12)
    for tau in (0.1, 0.5, 0.9):
        assert result["cover@tau"][repr(tau)] == np.mean([cover_at(8, c, tau) for c in n_correct])
    assert result["mean_accuracy"] == pytest.approx(sum(n_correct) / 48)
    assert result["distinct_answers"] == pytest.approx(np.mean([1, 2, 2, 1, 2, 2]))  # all-right/all-wrong: 1 answer
    with pytest.raises(ValueError, match="no problems"):
        summarize([], 8, KS)


# ---- intervals ---------------------------------------------------------------------------------------------------


def test_intervals_are_the_bootstrap_of_the_per_problem_values_and_reproducible():
    n_correct = [0, 1, 3, 8, 5, 4, 2, 7, 6, 1]
    result = _result("m", n_correct)
    intervals = model_intervals(result, FAST)
    per_k = np.array([[pass_at_k(8, c, k) for k in KS] for c in n_correct])
    ci = bootstrap_mean_ci(per_k, n_resamples=2000, seed=0)
    assert intervals["pass@k"] == {str(k): [ci.low[j], ci.high[j]] for j, k in enumerate(KS)}
    maj = np.array([[p["maj@k"][str(k)] for k in KS] for p in result["per_problem"]])
    maj_ci = bootstrap_mean_ci(maj[:, 2], n_resamples=2000, seed=0)
    assert intervals["maj@k"]["4"] == pytest.approx([maj_ci.low, maj_ci.high])
    assert set(intervals) == {
        "pass@k",
        "maj@k",
        "pass^k",
        "cover@tau",
        "mean_accuracy",
        "distinct_answers",
        "answer_entropy",
        "strict_accuracy",
        "strict_share",
    }
    for key, (low, high) in intervals["pass^k"].items():
        assert low <= result["pass^k"][key] <= high
    assert model_intervals(result, FAST) == intervals  # same seed and resamples: the same numbers
    assert model_intervals(result, BootstrapSettings(n_resamples=2000, seed=1))["pass@k"] != intervals["pass@k"]
    with pytest.raises(ValueError, match="n_resamples"):
        BootstrapSettings(n_resamples=0)


# ---- B against A -------------------------------------------------------------------------------------------------


def test_crossover_and_solved_overlap_where_they_are_known():
    # A (a "base") solves every problem once in 8: pass@k = k / 8 on each. B (an "RL model") always solves half the
    # problems and never the other half: pass@k = 0.5 at every k. B leads at k = 1; A reaches 0.5 at k = 4.
    a = _result("base", [1] * 40)
    b = _result("rl", [8] * 20 + [0] * 20)
    c = compare_models(a, b, FAST)
    assert (c["a"], c["b"], c["n_problems"], c["n"]) == ("base", "rl", 40, 8)
    assert c["crossover"]["leader"] == "b" and c["crossover"]["k"] == 4
    # a resample holds a share p of B's solved problems: the crossover is k = 4 when p <= 0.5, else k = 8
    assert (c["crossover"]["low"], c["crossover"]["high"]) == (4, 8) and c["crossover"]["no_crossover_share"] == 0
    # solved = pass@k >= 0.5: A solves nothing at k <= 2 and everything from k = 4 on
    expected = {"1": (0, 0, 20, 20), "2": (0, 0, 20, 20), "4": (20, 20, 0, 0), "8": (20, 20, 0, 0)}
    for k, counts in expected.items():
        o = c["solved_overlap"][k]
        assert (o["both"], o["only_a"], o["only_b"], o["neither"]) == counts, k
    d = c["difference"]["pass@k"]
    assert d["1"]["difference"] == pytest.approx(0.5 - 1 / 8) and d["4"]["difference"] == pytest.approx(0.0)
    per_a, per_b = per_problem_values(a, "pass@k", ["1"]), per_problem_values(b, "pass@k", ["1"])
    ci = bootstrap_paired_difference_ci(per_b, per_a, n_resamples=2000, seed=0)
    assert (d["1"]["low"], d["1"]["high"]) == pytest.approx((ci.low[0], ci.high[0]))
    assert c["difference"]["cover@tau"]["0.9"]["difference"] == pytest.approx(0.5)  # B: half always right; A: none
    assert c["difference"]["distinct_answers"]["difference"] == pytest.approx(1 - 2)  # B: 1 answer each, A: 2


def test_no_crossover_within_n_and_no_leader():
    a = _result("base", [1] * 10 + [0] * 10)  # pass@k <= 0.5
    b = _result("rl", [8] * 20)  # pass@k = 1
    c = compare_models(a, b, FAST)
    assert c["crossover"]["leader"] == "b" and c["crossover"]["k"] is None and c["crossover"]["ks"] == [1, 2, 4, 8]
    same = compare_models(a, _result("copy", [1] * 10 + [0] * 10), FAST)
    assert same["crossover"]["leader"] is None and same["crossover"]["k"] is None


def test_crossover_is_searched_at_every_power_of_two_up_to_n():
    # the report asks only k = 1 and 16; A (c = 1 of 16) reaches B (half the problems always right) at k = 8
    a = _result("base", [1] * 10, n=16, ks=(1, 16))
    b = _result("rl", [16] * 5 + [0] * 5, n=16, ks=(1, 16))
    c = compare_models(a, b, FAST)
    assert c["crossover"]["ks"] == [1, 2, 4, 8, 16] and c["crossover"]["k"] == 8 and c["ks"] == [1, 16]


def test_models_are_paired_by_problem_id():
    a = _result("base", [1, 3, 5, 7, 2, 8])
    b = _result("rl", [2, 2, 6, 8, 0, 8])
    reference = compare_models(a, b, FAST)
    shuffled = dict(b, per_problem=random.Random(0).sample(b["per_problem"], 6))
    assert compare_models(a, shuffled, FAST) == reference
    extra = _result("base", [1, 3, 5, 7, 2, 8, 4])  # a problem that B was not scored on is left out
    assert compare_models(extra, b, FAST)["n_problems"] == 6
    assert compare_models(extra, b, FAST)["difference"] == reference["difference"]
    assert compare_models(a, dict(b, per_problem=[]), FAST) is None  # nothing per problem: nothing to pair


def test_study_stats_read_the_same_per_problem_values():
    """experiments/study/stats.py takes its per-problem values and bootstrap settings from analysis (one source)."""
    from grpo_ext.experiments.study.stats import BOOTSTRAP, per_problem

    result = {
        "n": 4,
        "per_problem": [
            {"problem_id": "b", "n_correct": 1, "maj@k": {"2": 0.25}},
            {"problem_id": "a", "n_correct": 4, "maj@k": {"2": 1.0}},
        ],
    }
    assert per_problem(result, "pass@2").tolist() == [1.0, 0.5]  # problem-id order; b: 1 - C(3, 2) / C(4, 2)
    assert per_problem(result, "maj@2").tolist() == [1.0, 0.25]
    # any registered metric keyed by k: pass^2 of b is C(1, 2) / C(4, 2) = 0, of a C(4, 2) / C(4, 2) = 1
    assert per_problem(result, "pass^2").tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="expected one of pass@k, maj@k, pass\\^k"):
        per_problem(result, "cover@0.5")
    with pytest.raises(ValueError, match="maj@4"):
        per_problem(result, "maj@4")
    assert BOOTSTRAP == {"n_resamples": 10_000, "seed": 0, "confidence": 0.95}  # what study reports record


# ---- report files ------------------------------------------------------------------------------------------------


def test_write_reports_records_the_settings_and_everything_reads_back(tmp_path):
    a = _result("base", [1] * 20 + [8] * 4)
    b = _result("runs/rl", [8] * 12 + [0] * 12)
    paths = write_reports([a, b], tmp_path, command="cmd", bootstrap=BootstrapSettings(n_resamples=500, seed=3))
    assert {p.name for p in paths.values()} == {
        "report.md",
        "report.json",
        "passk_majk.png",
        "per_problem_accuracy.png",
    }
    payload = json.loads((tmp_path / "report.json").read_text())
    assert payload["bootstrap"] == {
        "n_resamples": 500,
        "seed": 3,
        "confidence": 0.95,
        "method": "percentile",
        "unit": "problem",
    }
    settings = BootstrapSettings(n_resamples=500, seed=3)
    assert payload["models"][0]["intervals"] == model_intervals(a, settings)
    assert (
        read_comparisons(tmp_path) == payload["comparisons"] == [json.loads(json.dumps(compare_models(a, b, settings)))]
    )
    assert read_report(tmp_path, "rl")["intervals"] == payload["models"][1]["intervals"]
    lines = (tmp_path / "report.json").read_text().splitlines()
    records = [line for line in lines if line.lstrip().startswith('{"problem_id"')]
    assert len(records) == 48  # one line per per-problem record
    md = (tmp_path / "report.md").read_text()
    assert "500 resamples, seed 3" in md and "## B against A: runs/rl (B) vs base (A)" in md
    assert "| 4 | " in md and "pass^k" in md and "Cover@tau" in md and "distinct answers per problem" in md
    assert "crossover of pass@k: B leads at k = 1; A's pass@k reaches B's at k = " in md
    for name in ("passk_majk.png", "per_problem_accuracy.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reports_written_before_the_new_metrics_still_read_and_render(tmp_path):
    new = _result("base", [1, 3, 5, 7])
    keep = {"problem_id", "prompt", "answer", "n_correct", "n_extracted", "top_answer", "maj@k"}
    old = {
        k: v for k, v in new.items() if k not in {"pass^k", "cover@tau", "distinct_answers", "answer_entropy", "taus"}
    }
    old["per_problem"] = [{k: v for k, v in p.items() if k in keep} for p in new["per_problem"]]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.json").write_text(json.dumps({"task": "arithmetic/test", "models": [old]}))
    assert read_report(tmp_path / "old", require=("per_problem", "maj@k"))["per_problem"] == old["per_problem"]
    assert read_comparisons(tmp_path / "old") == []
    write_reports([old, dict(old, model="other", per_problem=[])], tmp_path / "again", bootstrap=FAST)
    payload = json.loads((tmp_path / "again" / "report.json").read_text())
    assert set(payload["models"][0]["intervals"]) == {"pass@k", "maj@k", "mean_accuracy"}
    assert payload["models"][1]["intervals"] == {} and payload["comparisons"] == []
    assert not (tmp_path / "again" / "per_problem_accuracy.png").exists()
    md = (tmp_path / "again" / "report.md").read_text()
    assert "| k | pass@k | maj@k |\n" in md and "B against A" not in md


def test_report_json_is_written_last_and_a_report_left_incomplete_is_refused(tmp_path, monkeypatch):
    a, b = _result("base", [1] * 6 + [8] * 2), _result("rl", [8] * 4 + [0] * 4)
    writes = []
    real_text, real_bytes = report_module.atomic_write_text, report_module.atomic_write_bytes

    def text(path, data):
        writes.append((path.name, json.loads(data)["complete"] if path.name == "report.json" else None))
        return real_text(path, data)

    def png(path, data):
        writes.append((path.name, None))
        return real_bytes(path, data)

    monkeypatch.setattr(report_module, "atomic_write_text", text)
    monkeypatch.setattr(report_module, "atomic_write_bytes", png)
    write_reports([a, b], tmp_path, bootstrap=FAST)
    assert writes[0] == ("report.json", False) and writes[-1] == ("report.json", True)
    assert {name for name, _ in writes[1:-1]} == {"report.md", "passk_majk.png", "per_problem_accuracy.png"}
    assert json.loads((tmp_path / "report.json").read_text())["complete"] is True
    assert read_report(tmp_path, "rl")["model"] == "rl"

    def full_disk(path, data):  # the disk fills up at the first PNG of the next run (one model this time)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report_module, "atomic_write_bytes", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_reports([_result("other", [2] * 8)], tmp_path, bootstrap=FAST)
    for read in (lambda: read_report(tmp_path), lambda: read_comparisons(tmp_path / "report.json")):
        with pytest.raises(UserError, match="incomplete") as info:
            read()
        assert str(tmp_path / "report.json") in str(info.value) and "\n" not in str(info.value)

    monkeypatch.setattr(report_module, "atomic_write_bytes", real_bytes)  # the next run finishes: one model, no pairs
    write_reports([_result("other", [2] * 8)], tmp_path, bootstrap=FAST)
    assert read_report(tmp_path)["model"] == "other"
    assert not (tmp_path / "per_problem_accuracy.png").exists()  # the earlier run's scatter is not left behind


def test_reports_name_local_models_relative_to_the_repository(tmp_path):
    inside = str(REPO_ROOT / "grpo_ext" / "assets" / "embedded")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    a, b = _result(inside, [1] * 6 + [8] * 2), _result(str(outside), [8] * 4 + [0] * 4)
    write_reports([a, b], tmp_path / "out", bootstrap=FAST)
    payload = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [m["model"] for m in payload["models"]] == ["grpo_ext/assets/embedded", str(outside)]
    assert payload["comparisons"][0]["a"] == "grpo_ext/assets/embedded"
    assert inside not in (tmp_path / "out" / "report.md").read_text()
    assert read_report(tmp_path / "out", "embedded")["per_problem"] == a["per_problem"]
    assert a["model"] == inside  # the caller's results are left as they were


# ---- scoring as samples arrive -----------------------------------------------------------------------------------


class _BigSamples(Backend):
    """Completions of ~20 kB each (the right answer, then padding), one prompt at a time, made on demand."""

    name, backend_name = "big", "fake"

    def generate_stream(self, prompts, params, *, progress=False):
        for j, prompt in enumerate(prompts):
            answer = str(sum(int(x) for x in prompt.rstrip("=").split("+")))
            yield j, [f"#{answer if i % 3 else int(answer) + 1}" + " " * 20_000 for i in range(params.n)]


def test_evaluate_model_scores_each_problem_as_it_arrives_and_keeps_no_samples():
    problems = _problems(24)
    params = SamplingParams(n=32, temperature=1.0, max_new_tokens=8, batch_size=1)
    total = 24 * 32 * 20_000  # 15 MB of completions
    tracemalloc.start()
    try:
        result = evaluate_model(_BigSamples(), TASK, params, [1, 4, 32], None, problems=problems, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < total / 8, f"peak {peak / 1e6:.1f} MB for {total / 1e6:.0f} MB of samples"
    completions = [list(c) for _, c in _BigSamples().generate_stream([p["prompt"] for p in problems], params)]
    summary, per_problem = score_samples(TASK, problems, completions, [1, 4, 32])
    assert result["per_problem"] == per_problem
    assert all(result[key] == value for key, value in summary.items())
    assert result["pass@k"]["1"] == pytest.approx(21 / 32) and math.isclose(result["distinct_answers"], 2)


def test_a_cached_run_keeps_only_its_own_samples_and_a_fresh_one_none(tmp_path):
    """With a cache file, drawing keeps nothing (records are written, not remembered); a rerun from the cache holds
    its own model's samples at most, not the other models' records in the same file, and scores the same."""
    problems = _problems(24)
    params = SamplingParams(n=32, temperature=1.0, max_new_tokens=8, batch_size=1)
    total = 24 * 32 * 20_000  # 15 MB of completions per model
    path = tmp_path / "samples.jsonl"

    class _Other(_BigSamples):
        name = "other"

    def peak_of(backend):
        tracemalloc.start()
        try:
            result = evaluate_model(backend, TASK, params, [1, 4, 32], path, problems=problems, progress=False)
            return result, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    evaluate_model(_Other(), TASK, params, [1, 4, 32], path, problems=problems, progress=False)
    fresh, peak = peak_of(_BigSamples())
    assert fresh["samples"]["generated"] == 24 * 32
    # a problem's samples, its records and their JSON line: a few problems' worth, whatever the number of problems
    assert peak < total / 24 * 5, f"drawing: peak {peak / 1e6:.1f} MB for {total / 1e6:.0f} MB of samples"
    cached, peak = peak_of(_BigSamples())
    assert cached["samples"]["from_cache"] == 24 * 32 and cached["per_problem"] == fresh["per_problem"]
    assert peak < 1.5 * total, f"from the cache: peak {peak / 1e6:.1f} MB for {total / 1e6:.0f} MB (two models' worth)"
