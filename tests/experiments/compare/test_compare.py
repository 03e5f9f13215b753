"""evals/compare.py and scripts/run_methods.py: the report, the findings' verdicts, bad input, the quick run."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from grpo_ext.evaluation.metrics import pass_at_k
from grpo_ext.experiments.compare.findings import findings
from grpo_ext.experiments.compare.runs import Run
from grpo_ext.methods import paradigm_rows
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

ROOT = Path(__file__).resolve().parents[3]
MODEL = str(EMBEDDED_MODEL_DIR)
N, KS, PROBLEMS = 4, (1, 2, 4), 3
EVAL_FLAGS = ["--n", str(N), "--k", "1,2,4", "--limit", str(PROBLEMS), "--no-progress"]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _load(ROOT / "evals" / "compare.py", "compare_cli_under_test")


def fake_result(correct: int, maj_top: float, *, temperature: float = 0.7, n: int = N) -> dict:
    """An evaluate_model-shaped result: every problem has `correct` of n samples right."""
    params = {"n": n, "temperature": temperature, "top_p": 1.0, "max_new_tokens": 48, "seed": 0, "batch_size": 8}
    return {
        "model": "fake",
        "model_fingerprint": None,
        "backend": "transformers",
        "task": "arithmetic",
        "task_id": "arithmetic/test",
        "split": "test",
        "n_problems": PROBLEMS,
        "n": n,
        "ks": list(KS),
        "dropped_ks": [],
        "warnings": [],
        "params": params,
        "params_key": f"temperature={temperature!r},top_p=1.0,max_new_tokens=48,seed=0",
        "pass@k": {str(k): pass_at_k(n, correct, k) for k in KS},
        "maj@k": {"1": correct / n, "2": correct / n, "4": maj_top},
        "mean_accuracy": correct / n,
        "answers_extracted": 1.0,
        "samples": {
            "total": PROBLEMS * n,
            "from_cache": 0,
            "generated": PROBLEMS * n,
            "seconds": 1.0,
            "samples_per_second": None,
        },
        "per_problem": [
            {
                "problem_id": str(i),
                "prompt": "1+1=",
                "answer": "2",
                "n_correct": correct,
                "n_extracted": n,
                "top_answer": "2",
                "maj@k": {"1": correct / n, "2": correct / n, "4": maj_top},
            }
            for i in range(PROBLEMS)
        ],
    }


# (correct of 4, maj@4) per run, every problem alike (so every bootstrap interval is its point). Built so that each
# finding gets a different verdict under the study's rule (interval excludes 0, every seed the same sign):
#   online RFT > RFT by +0.25 in both seeds (agrees); GRPO vs online RFT: +0, +0.25 (a seed at 0: inconclusive);
#   process vs outcome: -0.25, -0.5 (disagrees); GRPO raises maj@4 (0.5 -> 0.9/0.95), pass@4 stays 1: the gap
#   (maj gain - pass gain) is +0.4 / +0.45 (agrees).
RUNS = {
    "base": (2, 0.5),
    "rft@s0": (2, 0.5),
    "rft@s1": (2, 0.5),
    "online_rft@s0": (3, 0.8),
    "online_rft@s1": (3, 0.8),
    "grpo_outcome@s0": (3, 0.9),
    "grpo_outcome@s1": (4, 0.95),
    "grpo_process@s0": (2, 0.5),
    "grpo_process@s1": (2, 0.5),
}


def write_results(folder: Path, runs=RUNS, **overrides) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    specs = []
    for name, (correct, maj) in runs.items():
        path = folder / f"{name.replace('@', '_')}.json"
        path.write_text(json.dumps(fake_result(correct, maj, **overrides.get(name, {}))))
        specs += ["--run", f"{name}={path}"]
    return specs


def test_report_from_results_files_has_every_output_and_each_verdict(tmp_path):
    out = tmp_path / "report"
    result = compare.main([*write_results(tmp_path / "results"), *EVAL_FLAGS, "--out", str(out)])
    for name in ("report.md", "report.json", "passk_majk.png", "accuracy_vs_samples.png"):
        assert (out / name).stat().st_size > 0, name
    assert result["warnings"] == []
    report = json.loads((out / "report.json").read_text())
    methods = ["rft", "online_rft", "grpo_outcome", "grpo_process"]
    assert report["paradigm"] == paradigm_rows(methods)  # generated from the registry
    verdicts = [f["verdict"] for f in report["findings"]]
    assert verdicts == ["agrees", "inconclusive", "disagrees", "agrees"]
    assert report["findings"][0]["pass@1"]["per_seed"] == [0.25, 0.25]  # paired by seed label
    assert report["findings"][1]["pass@1"]["per_seed"] == [0.0, 0.25]
    majk = report["findings"][3]["by_k"]
    assert [r["k"] for r in majk] == [4] and majk[0]["per_seed"] == pytest.approx([0.4, 0.45])
    summary = report["summary"]["methods"]
    assert summary["grpo_outcome"]["metrics"]["pass@1"]["min"] == 0.75
    assert summary["grpo_outcome"]["metrics"]["pass@1"]["max"] == 1.0
    md = (out / "report.md").read_text()
    assert "| GRPO (outcome supervision) | 2 | 0.875 (0.750–1.000) |" in md
    assert "## The paradigm (generated from `grpo_ext.methods.METHODS`)" in md
    assert "**disagrees**" in md and "Warning" not in md


def test_findings_not_measured_when_a_method_is_missing():
    runs = [
        Run("base", "base", "", "x", "results", result=fake_result(2, 0.5)),
        Run("rft", "rft", "", "x", "results", result=fake_result(2, 0.5)),
    ]
    found = findings(runs)
    assert [f["verdict"] for f in found] == ["not measured"] * 4
    assert "no run of online_rft" in found[0]["text"]


def test_runs_evaluated_with_different_settings_are_refused_or_flagged(tmp_path):
    specs = write_results(tmp_path / "results", **{"rft@s1": {"temperature": 1.0}})
    with pytest.raises(ValueError, match=r"different sampling settings.*rft@s1.*temperature=1.0"):
        compare.main([*specs, *EVAL_FLAGS, "--out", str(tmp_path / "refused")])
    assert not (tmp_path / "refused" / "report.md").exists()

    out = tmp_path / "flagged"
    result = compare.main([*specs, *EVAL_FLAGS, "--out", str(out), "--allow-mixed-settings"])
    assert any("NOT COMPARABLE" in w and "rft@s1" in w for w in result["warnings"])
    md = (out / "report.md").read_text()
    assert "> **Warning**" in md and "NOT COMPARABLE: run rft@s1" in md
    assert "| rft@s1 |" in md and "mixed evaluation settings |" in md


def test_a_results_file_with_another_n_is_refused(tmp_path):
    specs = write_results(tmp_path / "results", runs={"rft": (2, 0.5)}, rft={"n": 8})
    with pytest.raises(ValueError, match="different sampling settings"):
        compare.main([*specs, *EVAL_FLAGS, "--out", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "spec, error, message",
    [
        ("ppo@s0=embedded", ValueError, "unknown method 'ppo'"),
        ("rft=/nonexistent/checkpoint", FileNotFoundError, "checkpoint /nonexistent/checkpoint does not exist"),
        ("rft=/nonexistent/results.json", FileNotFoundError, "results file /nonexistent/results.json does not exist"),
        ("rft", ValueError, "expected NAME=CHECKPOINT"),
    ],
)
def test_bad_runs_are_named_before_anything_is_loaded(tmp_path, spec, error, message):
    with pytest.raises(error, match=message):
        compare.main(["--run", spec, *EVAL_FLAGS, "--out", str(tmp_path)])


def test_duplicate_names_and_a_checkpoint_trained_as_another_method(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="names must be unique; repeated: rft"):
        compare.main(["--run", f"rft={folder}", "--run", f"rft={folder}", *EVAL_FLAGS, "--out", str(tmp_path)])
    (folder / "method_run.json").write_text(json.dumps({"method": {"name": "dpo"}}))
    with pytest.raises(ValueError, match="was trained as 'dpo', not 'rft'"):
        compare.main(["--run", f"rft={folder}", *EVAL_FLAGS, "--out", str(tmp_path)])


def test_the_command_line_reports_bad_input_in_one_line(python, tmp_path):
    proc = subprocess.run(
        [python, "evals/compare.py", "--run", "ppo=embedded", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "unknown method 'ppo'" in proc.stderr and "Traceback" not in proc.stderr
