"""scripts/run_methods.py with its runs faked: the learning signal measured first, one learning rate for the GRPO
family through the two search stages, the search seed apart from the test seeds, and --quick's smaller evaluation
written into the study."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from grpo_ext.experiments.study.config import load_study

ROOT = Path(__file__).resolve().parents[3]
STUDY = ROOT / "configs" / "compare.yaml"


def fresh_driver():
    """scripts/run_methods.py loaded anew, so that it imports what a test has just monkeypatched."""
    spec = importlib.util.spec_from_file_location("run_methods_under_test", ROOT / "scripts" / "run_methods.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_driver_searches_own_rates_first_then_trains_the_family_at_the_reference_pick(tmp_path, monkeypatch):
    """scripts/run_methods.py with the runs faked: stage 0 measures the signal before any run (once: a second
    sitting reuses it), stage 2 trains each rate_of arm at its reference's stage-1 pick (search seed, validation),
    search.json says where each rate came from, and the test runs use the test seeds."""
    import grpo_ext.experiments.study.report as report
    import grpo_ext.experiments.study.runs as runs
    import grpo_ext.experiments.study.signal.stage_zero as signal_stage

    out = tmp_path / "out"
    jobs, measured_before, measured = [], [], []

    def run_jobs(batch, *args):
        jobs.append(list(batch))
        measured_before.append((out / "signal.json").is_file())

    monkeypatch.setattr(runs, "run_jobs", run_jobs)

    def measure(settings, progress=True):
        measured.append(settings)
        return {"settings": settings, "device": "cpu", "rows": []}

    monkeypatch.setattr(signal_stage, "measure_settings", measure)

    def score(job, out, study):  # grpo_outcome is best at 1.5e-4 (not its first rate), every other arm at its first
        if job.arm is None:
            return 0.5
        lr = job.setting.as_dict()["lr"]
        return 0.6 if (job.arm.name == "grpo_outcome" and lr == 1.5e-4) else 0.5 - lr

    monkeypatch.setattr(runs, "read_score", score)
    monkeypatch.setattr(report, "write_study_report", lambda *args, **kwargs: {"md": tmp_path / "report.md"})
    fresh_driver().main(["--study", str(STUDY), "--out", str(out)])

    stage1, stage2, final = jobs
    assert {j.evaluation.split for j in stage1 + stage2} == {"validation"} and stage1[0].arm is None  # base first
    own = {j.arm.name for j in stage1[1:]}
    assert own == {"sft", "rft", "online_rft", "dpo", "grpo_outcome"}
    # every rate_of arm of this study has one setting (its reference's pick): nothing to pick, so no search run
    assert all(len(a.grid) == 0 for a in load_study(STUDY).arms if a.rate_of) and stage2 == []
    assert {j.seed for j in stage1[1:]} == {100}
    assert {j.evaluation.split for j in final} == {"test"} and {j.seed for j in final[1:]} == {0, 1, 2}
    search = json.loads((out / "search.json").read_text())
    assert search["picks"]["grpo_outcome"]["slug"] == search["picks"]["outcome_skip"]["slug"] == "lr0.00015"
    assert search["picks"]["sft"]["slug"] == "lr5e-05" and "sft" not in search["rate_of"]
    assert search["rate_of"]["process_refill"] == {"arm": "grpo_outcome", "lr": 1.5e-04}
    assert list(search["scores"]) == [a.name for a in load_study(STUDY).arms]  # the study's order
    assert search["search_seed"] == 100 and search["test_seeds"] == [0, 1, 2]
    # stage 0: the study's sizes with its arm's config, written before the first run; reused by the next sitting
    study = load_study(STUDY)
    assert [(m["samples"], m["minibatches"]) for m in measured] == [
        (list(study.signal.samples), study.signal.minibatches)
    ]
    assert json.loads((out / "signal.json").read_text())["settings"] == measured[0]
    assert measured_before == [True, True, True]
    fresh_driver().main(["--study", str(STUDY), "--out", str(out)])
    assert len(measured) == 1


def test_quick_writes_its_smaller_evaluation_into_the_study_and_refuses_a_metric_it_cannot_report(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.read_text().replace("  metric: pass@1\n", "  metric: pass@16\n", 1))
    load_study(path)  # n = 16 reports pass@16
    with pytest.raises(ValueError, match=r"validation\.metric: .* k one of \[1, 2, 4\] \(n = 4\), got 'pass@16'"):
        fresh_driver().main(["--study", str(path), "--quick", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # refused before anything ran
