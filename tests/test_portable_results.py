"""Results files record model folders relative to the repository (issue 19): the iterative loop's report and the
benchmarks' JSON, written from states and payloads that hold absolute paths."""

import json

from grpo_ext.experiments.iterative.report import write_report
from grpo_ext.io import REPO_ROOT

EMBEDDED = str(REPO_ROOT / "grpo_ext" / "assets" / "embedded")


def _row(iteration: int, policy: str, reference: str | None) -> dict:
    row = {"iteration": iteration, "policy": policy, "seconds": 1.0, "n_new": 4, "n_replay": 0}
    row |= {"rm_accuracy_before": 0.5, "rm_accuracy_after": 0.75, "rm_auc_before": 0.5, "rm_auc_after": 0.8}
    row |= {"pass@1": 0.25, "maj@4": 0.5, "pass@4": 0.75, "policy_sample_accuracy": 0.25, "replay_ratio_used": 0.0}
    return row | ({"reference": reference} if reference else {})


def test_iterative_report_records_portable_model_folders(tmp_path):
    inside = REPO_ROOT / "outputs" / "iterative-run-that-does-not-exist" / "iter_1" / "policy"
    outside = str(tmp_path / "iter_2" / "policy")
    config = {"reward_model_type": "outcome", "task": "arithmetic", "task_kwargs": {}, "base": EMBEDDED}
    config |= {"max_steps": 2, "replay_ratio": 0.1}
    state = {"config": config, "history": [_row(0, EMBEDDED, None), _row(1, str(inside), EMBEDDED)]}
    state["history"].append(_row(2, outside, str(inside)))
    write_report(state, tmp_path / "report", 4)
    payload = json.loads((tmp_path / "report" / "report.json").read_text())
    assert payload["config"]["base"] == "grpo_ext/assets/embedded"
    rows = [(r["policy"], r.get("reference")) for r in payload["rows"]]
    assert rows == [
        ("grpo_ext/assets/embedded", None),
        ("outputs/iterative-run-that-does-not-exist/iter_1/policy", "grpo_ext/assets/embedded"),
        (outside, "outputs/iterative-run-that-does-not-exist/iter_1/policy"),  # outside the repository: as given
    ]
    assert "base `grpo_ext/assets/embedded`" in (tmp_path / "report" / "report.md").read_text()
    assert state["config"]["base"] == EMBEDDED and state["history"][1]["policy"] == str(inside)  # a resume needs these


def test_benchmark_results_record_portable_paths(tmp_path, monkeypatch, capsys):
    from benchmarks import _common

    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(_common, "ROOT", tmp_path)
    params = {"model": EMBEDDED, "workdir": str(REPO_ROOT / "outputs" / "bench"), "reps": 3, "lora": {"r": 16}}
    _common.write_results("demo", {"params": params, "speedup": 2.0}, "| a |")
    record = json.loads((tmp_path / "demo.json").read_text())
    portable = {"model": "grpo_ext/assets/embedded", "workdir": "outputs/bench", "reps": 3, "lora": {"r": 16}}
    assert record["params"] == portable
    assert record["speedup"] == 2.0 and params["model"] == EMBEDDED  # the caller's payload is left as it was
