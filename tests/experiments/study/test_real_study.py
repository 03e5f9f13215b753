"""The real-model study (configs/real/study.yaml, issue 38): its design as written (same stage, base, prompts and
budget for every arm; picks on validation; n = 64 where K = 64 is judged), its budget estimate by hand, expectations
judged on a slice of the test problems (hand-made records: a gain on additions only is the shortcut and must not
hold), baselines, stop strings, the driver and its rehearsal (the runners on a LoRA chat policy:
tests/experiments/study/test_study_lora_runners.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from grpo_ext.errors import UserError
from grpo_ext.experiments.study.budget import estimate
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.expectations import Expectation, judge_expectations, render_expectations
from grpo_ext.experiments.study.options import StudyOptions
from tests.experiments.study.test_study_driver import fresh_driver

ROOT = Path(__file__).resolve().parents[3]
STUDY = ROOT / "configs" / "real" / "study.yaml"
GPU_STUDY = ROOT / "configs" / "real" / "gpu_study.yaml"
TASK_KWARGS = {"min_operands": 2, "max_operands": 2, "digits": 2, "num_fewshot": 2, "balance_operations": True}


def _configs(study) -> dict[str, dict]:
    return {a.name: yaml.safe_load((study.configs_dir / f"{a.method}.yaml").read_text()) for a in study.arms}


@pytest.mark.parametrize("path", [STUDY, GPU_STUDY], ids=["cpu", "gpu"])
def test_real_studies_train_every_arm_on_one_stage_and_budget(path):
    study = load_study(path)
    assert {"sft", "rft", "online_rft", "dpo", "grpo_outcome", "grpo_process", "outcome_refill"} <= {
        a.name for a in study.arms
    }
    configs = _configs(study)
    for name, config in configs.items():  # one stage, one base, one budget: a difference is the method's
        assert config["task"] == "word_arithmetic" and config["task_kwargs"] == TASK_KWARGS, name
        assert config["model_name_or_path"] == study.base == "smollm2-135m-instruct", name
        assert (config["use_peft"], config["lora_r"], config["dtype"]) == (True, 16, "bfloat16"), name
    for key in ("train_size", "max_steps", "warmup_steps", "lr_scheduler_type"):
        assert len({c[key] for c in configs.values()}) == 1, key
    sequences = {
        n: c["per_device_train_batch_size"] * c["gradient_accumulation_steps"] * (2 if n == "dpo" else 1)
        for n, c in configs.items()
    }
    assert len(set(sequences.values())) == 1  # the same gradient sequences a step (a DPO pair is two)
    generated = {c["sample_budget"] for n, c in configs.items() if n != "sft"}
    assert generated == {configs["grpo_outcome"]["max_steps"] * sequences["grpo_outcome"]}  # equal generated samples
    assert configs["grpo_process"]["step_separator"] == "newline"
    assert study.arm("outcome_refill").overrides["zero_std_groups"] == "refill"
    assert {a.name for a in study.arms if a.rate_of} >= {"grpo_process", "outcome_refill"}  # GRPO's rate
    assert {a.rate_of for a in study.arms if a.rate_of} == {"grpo_outcome"}
    assert study.arm("dpo").grid["beta"] and len(study.learning_rates) >= 2
    assert study.validation.split == "validation" and study.validation.limit >= 300
    assert study.test.limit >= 500 and study.test.n_for("base") == study.test.n_for("grpo_outcome") == 64
    assert study.validation.stop is None and study.test.stop is None  # the task's stop strings
    (baseline,) = [b for b in study.baselines if b.name == "fewshot8"]
    assert baseline.task_kwargs == {"num_fewshot": 8}
    shortcut = study.expectations["outcome_every_operation"]
    assert (shortcut.arm, shortcut.against, shortcut.slices, shortcut.min_difference) == (
        "grpo_outcome", "base", "operation", 0.10,
    )  # fmt: skip
    assert study.expectations["outcome_above_base"].min_difference == 0.25
    pairs = {(e.arm, e.against, e.metric, e.minus) for e in study.expectations.values()}
    assert pairs >= {
        ("online_rft", "rft", "pass@1", None), ("grpo_outcome", "online_rft", "pass@1", None),
        ("grpo_process", "grpo_outcome", "pass@1", None), ("outcome_refill", "grpo_outcome", "pass@1", None),
        ("grpo_outcome", "base", "maj@64", "pass@64"),
    }  # fmt: skip


def test_the_cpu_study_fits_its_twelve_core_hours_at_its_own_rates():
    study = load_study(STUDY)
    result = estimate(study)
    assert study.budget["core_hours"] == 12 and result["core_hours"] <= 12
    # 12 search runs (the rate_of arms have one setting each: not searched) + 21 test runs, the base, the baseline
    assert sum(r["runs"] for r in result["rows"]) == 35


def test_the_estimate_shows_the_spend_of_the_folder_named_only(tmp_path, capsys):
    """--estimate prints the measured spend beside the plan for the study folder --out names (the committed CPU study
    has runs), and none without --out: the default folder holds another study's runs."""
    driver = fresh_driver()
    driver.main(["--study", str(STUDY), "--estimate"])
    assert "Measured in" not in capsys.readouterr().out
    driver.main(["--study", str(STUDY), "--estimate", "--out", str(tmp_path)])  # no run there yet
    assert "Measured in" not in capsys.readouterr().out
    driver.main(["--study", str(STUDY), "--estimate", "--out", str(ROOT / "results" / "real_study")])
    printed = capsys.readouterr().out
    assert "Measured in" in printed and "| sft | " in printed.split("Measured in", 1)[1]
    # and the whole study priced at the rates its runs measured (grpo_ext.experiments.study.spent.measured_rates)
    assert "At the rates measured here (" in printed and " s a sequence (" in printed


def _tiny_study(tmp_path: Path, configs: dict[str, dict], body: str) -> Path:
    folder = tmp_path / "methods"
    folder.mkdir()
    for name, config in configs.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))
    path = tmp_path / "study.yaml"
    path.write_text(f"configs: {folder}\n" + body)
    return path


def test_budget_estimate_by_hand(tmp_path):
    common = {"task": "arithmetic", "train_size": 10, "max_steps": 5, "per_device_train_batch_size": 4}
    path = _tiny_study(
        tmp_path,
        {
            "grpo_outcome": {
                **common,
                "method": "grpo_outcome",
                "gradient_accumulation_steps": 2,
                "curve_every": 5,
                "curve_prompts": 2,
                "curve_n": 5,
            },
            "dpo": {**common, "method": "dpo", "samples_per_prompt": 3},
        },  # fmt: skip
        """
search_seed: 9
seeds: [0, 1]
learning_rates: [1.0e-4, 2.0e-4]
validation: {split: validation, limit: 10, n: 2}
test: {split: test, limit: 20, n: 4, n_by: {base: 8}}
arms:
  grpo_outcome: {method: grpo_outcome}
  dpo: {method: dpo, grid: {beta: [0.1, 0.2, 0.3]}}
budget:
  seconds_per_sequence: {online: 2.0, sft: 1.0, rft: 1.0, dpo: 3.0}
  eval_samples_per_second: {trained: 10, base: 5}
""",
    )
    rows = {r["what"]: r for r in estimate(load_study(path))["rows"]}
    grpo = rows["grpo_outcome (online)"]
    # 2 search + 2 test runs; each 5 steps x 8 samples x 2 s + curve 2 points x 2 prompts x 5 samples / 10 = 82 s
    assert (grpo["runs"], grpo["train_core_seconds"]) == (4, 4 * 82.0)
    assert grpo["eval_core_seconds"] == 2 * (10 * 2 / 10) + 2 * (20 * 4 / 10)
    dpo = rows["dpo (dpo)"]  # 6 search (2 rates x 3 betas) + 2 test; 5 x 8 sequences x 3 s + 30 drawn / 5 per s
    assert (dpo["runs"], dpo["train_core_seconds"]) == (8, 8 * (120.0 + 6.0))
    assert rows["base (no training)"]["eval_core_seconds"] == (10 * 2 + 20 * 8) / 5


# ---- expectations on a slice of the test problems, on hand-made records -------------------------------------------


def _result(correct: list[int], ops: list[str] | None, n: int = 4) -> dict:
    rows = [{"problem_id": str(i), "n_correct": c, "n_extracted": n} for i, c in enumerate(correct)]
    for row, op in zip(rows, ops or [], strict=False):
        row["attributes"] = {"operation": op}
    return {"n": n, "per_problem": rows}


OPS = ["+", "-"] * 10  # 20 problems, 10 of each
BASE = _result([0] * 20, OPS)
# the shortcut: every addition right in both seeds, every subtraction still wrong (the first real-model result)
SHORTCUT = [_result([4, 0] * 10, OPS), _result([4, 0] * 10, OPS)]
# a real gain: 2 of 4 right on every problem, both operations
EVERYWHERE = [_result([2] * 20, OPS), _result([3, 2] * 10, OPS)]


def _exp(**kw) -> Expectation:
    fields = {"name": "e", "arm": "grpo", "against": "base", "metric": "pass@1", "text": "t", **kw}
    return Expectation(**fields)


def test_the_shortcut_holds_overall_and_on_additions_but_not_on_every_operation():
    rows = judge_expectations(
        {
            "all": _exp(min_difference=0.25),
            "plus": _exp(slice={"operation": "+"}),
            "every": _exp(min_difference=0.10, slices="operation"),
        },
        {"grpo": SHORTCUT},
        BASE,
    )
    overall, plus, every = rows
    assert overall["held"] and overall["difference"]["difference"] == pytest.approx(0.5)  # 10 of 20 problems +1.0
    assert plus["held"] and plus["difference"]["difference"] == pytest.approx(1.0)
    assert plus["difference"]["per_seed"] == pytest.approx([1.0, 1.0])
    assert every["held"] is False and every["binding_slice"] == "-"
    by = {s["value"]: s for s in every["by_slice"]}
    assert by["+"]["held"] and by["+"]["n_problems"] == 10
    assert by["-"]["difference"]["difference"] == 0.0 and by["-"]["verdict"] == "inconclusive"
    assert every["difference"] == by["-"]["difference"]  # the row shows the slice that binds
    text = "\n".join(render_expectations(rows))
    assert "on each operation" in text and "operation - (10 problems): +0.000" in text and "did not hold" in text


def test_a_gain_on_every_operation_holds_per_slice_paired_by_problem():
    (row,) = judge_expectations({"e": _exp(min_difference=0.10, slices="operation")}, {"grpo": EVERYWHERE}, BASE)
    by = {s["value"]: s["difference"] for s in row["by_slice"]}
    # + problems: seed 0 right 2 of 4, seed 1 3 of 4 -> seed mean 0.625; - problems: 2 of 4 in both -> 0.5
    assert by["+"]["difference"] == pytest.approx(0.625) and by["-"]["difference"] == pytest.approx(0.5)
    assert by["+"]["per_seed"] == pytest.approx([0.5, 0.75])
    assert row["held"] and row["binding_slice"] == "-"


def test_a_slice_without_attributes_or_problems_is_not_measured_and_says_why():
    bare = [_result([4, 0] * 10, None)]
    (row,) = judge_expectations({"e": _exp(slices="operation")}, {"grpo": bare}, _result([0] * 20, None))
    assert row["held"] is None and "no attribute 'operation'" in row["why"]
    (row,) = judge_expectations({"e": _exp(slice={"operation": "*"})}, {"grpo": SHORTCUT}, BASE)
    assert row["held"] is None and row["why"] == "no test problem has operation = *"


def test_an_expectation_against_a_baseline_uses_its_one_run():
    rows = judge_expectations({"e": _exp(against="fewshot8")}, {"grpo": EVERYWHERE}, BASE, baselines={})
    assert rows[0]["held"] is None and rows[0]["why"] == "no run of fewshot8"
    (row,) = judge_expectations({"e": _exp(against="fewshot8")}, {"grpo": EVERYWHERE}, BASE, {"fewshot8": BASE})
    assert row["held"] and row["difference"]["per_seed"] == pytest.approx([0.5, 0.625])


# ---- the study file: baselines, n_by, slices, stop ------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("slices: operation,", "slices: operation, slice: {operation: '+'},", r"`slice` \(one value\) or `slices`"),
        ("slices: operation,", "slice: {operation: '+', operands: '2'},", r"slice: expected one attribute"),
        ("n_by: {base: 64, grpo_outcome: 64}", "n_by: {base: 64}", r"majk_over_passk\.metric: maj@64 needs K = 64"),
        ("n_by: {base: 64, grpo_outcome: 64}", "n_by: {bse: 64, grpo_outcome: 64}", r"test\.n_by\.bse: unknown run"),
        ("    task_kwargs: {num_fewshot: 8}\n", "", r"baselines\.fewshot8\.task_kwargs: required"),
        ("  fewshot8:\n", "  sft:\n", r"baselines\.sft: the name 'sft' is taken"),
        (
            "  stop: null                      # the task's stop strings",
            "  stop: Question",
            r"validation\.stop: expected a list",
        ),
        ("  dtype: bfloat16                 # as trained", "  dtype: int8 #", r"validation\.dtype: expected one of"),
        ("against: fewshot8,", "against: fewshot9,", r"against: unknown arm 'fewshot9'; expected base or one of few"),
    ],
)
def test_bad_real_study_names_the_field(tmp_path, old, new, message):
    text = STUDY.read_text()
    assert old in text
    path = tmp_path / "study.yaml"
    path.write_text(
        text.replace(old, new, 1).replace("configs: configs/real/methods", f"configs: {ROOT}/configs/real/methods")
    )
    with pytest.raises(UserError, match=message):
        load_study(path)


def test_the_evaluation_cuts_at_the_task_stop_strings_or_refuses_to_start():
    import dataclasses

    from grpo_ext.experiments.study.runs import check_stop_support, evaluation_stops, stop_kwargs
    from grpo_ext.sampler.sampling import SamplingParams
    from grpo_ext.tasks import get_task

    study = load_study(STUDY)
    task = get_task("word_arithmetic", **TASK_KWARGS)
    assert evaluation_stops(study.test, task) == ("Question:",)
    assert evaluation_stops(dataclasses.replace(study.test, stop=()), task) == ()
    assert stop_kwargs(()) == {}
    options = StudyOptions(base=study.base, configs=str(study.configs_dir), quick=False)
    if "stop" in {f.name for f in dataclasses.fields(SamplingParams)}:  # the harness issue's stop strings are in
        assert stop_kwargs(("Question:",)) == {"stop": ("Question:",)} and check_stop_support(study, options) == []
    else:  # refused before any run, naming the way out; a --quick rehearsal goes on without, saying so
        with pytest.raises(UserError, match=r"no `stop`; set `stop: \[\]`"):
            check_stop_support(study, options)
        notes = check_stop_support(study, dataclasses.replace(options, quick=True))
        assert len(notes) == 2 and notes[0].startswith("--quick: validation evaluated without stop strings")


# ---- the driver: baselines beside the base, the rehearsal end to end ------------------------------------------------


def test_driver_scores_the_baselines_beside_the_base_and_trains_nothing_for_them(tmp_path, monkeypatch):
    import grpo_ext.experiments.study.runs as runs

    jobs = []
    monkeypatch.setattr(runs, "run_jobs", lambda batch, *args: jobs.append(list(batch)))
    monkeypatch.setattr(runs, "check_stop_support", lambda study, options: [])
    monkeypatch.setattr(runs, "read_score", lambda job, out, study: 0.5 if job.arm is None else 0.1)
    driver = fresh_driver()
    import grpo_ext.experiments.study.report as report
    import grpo_ext.experiments.study.stages as stages

    monkeypatch.setattr(stages, "write_expectations", lambda *args: {})

    monkeypatch.setattr(report, "write_study_report", lambda *args, **kwargs: {"md": tmp_path / "report.md"})
    driver.main(["--study", str(STUDY), "--out", str(tmp_path), "--model", "embedded"])
    stage1, stage2, final = jobs
    assert [j.run for j in stage1[:2]] == ["base", "fewshot8"] and {j.evaluation.split for j in stage1} == {
        "validation"
    }
    assert final[1].baseline.name == "fewshot8" and final[1].evaluation.split == "test" and final[1].arm is None
    assert stage2 == []  # grpo_process and outcome_refill train at grpo_outcome's pick: one setting, no search run
    search = json.loads((tmp_path / "search.json").read_text())
    assert search["baselines"] == {"fewshot8": 0.5} and search["base"] == 0.5
    from grpo_ext.experiments.study.runs import job_dir

    assert job_dir(final[1], tmp_path, load_study(STUDY)) == tmp_path / "baselines" / "fewshot8"


def test_a_rehearsal_tokenizer_needs_the_quick_rehearsal(tmp_path):
    with pytest.raises(UserError, match=r"--rehearsal-tokenizer: only with --quick"):
        fresh_driver().main(["--study", str(STUDY), "--out", str(tmp_path), "--rehearsal-tokenizer", str(tmp_path)])


@pytest.mark.slow
def test_quick_rehearsal_of_the_real_study_runs_every_stage(tmp_path, tiny_chat_tokenizer):
    """`make real-study-quick`: every arm, the base and the baseline through search, test and report on a tiny random
    model with a chat tokenizer in SmolLM2's layout (the real one's with `make real-model`; a test-made one here, so the
    test needs no download), retrained on the task's text; the expectations (slices included) are judged with the
    baseline's result."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "scripts/run_methods.py", "--study", str(STUDY), "--quick", "--jobs", "2"]
    cmd += ["--rehearsal-tokenizer", str(tiny_chat_tokenizer)]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    search = json.loads((tmp_path / "search.json").read_text())
    assert set(search["baselines"]) == {"fewshot8"} and search["rate_of"]["outcome_refill"]["arm"] == "grpo_outcome"
    test = json.loads((tmp_path / "baselines" / "fewshot8" / "test.json").read_text())
    assert test["study_evaluation"]["run"] == "fewshot8" and test["n_problems"] == 6
    assert {p["attributes"]["operation"] for p in test["per_problem"]} == {"+", "-"}  # the balanced split, sliced
    rows = {r["name"]: r for r in json.loads((tmp_path / "expectations.json").read_text())["expectations"]}
    assert {s["value"] for s in rows["outcome_every_operation"]["by_slice"]} == {"+", "-"}
    assert rows["outcome_above_prompting"]["held"] is not None  # judged against the baseline's own run
    for arm in ("rft", "dpo"):  # a random model is never right: no data, GC 0, the base kept (and evaluated)
        (cost,) = [json.loads(p.read_text()) for p in (tmp_path / "runs" / arm).glob("*/seed0/training_cost.json")]
        assert cost["optimizer_steps"] == 0 and "no_training_data" in cost["details"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["baselines"]) == {"fewshot8"} and "fewshot8" in report["answers"]  # beside the base
    judged = {r["name"]: r for r in report["expectations"]}
    assert judged["outcome_above_prompting"]["held"] is not None  # the report judges against the baseline too
    assert set(report["answers"]["grpo_outcome"]["by"]) == {"+", "-"} and report["slice_attribute"] == "operation"
    assert "| fewshot8 (baseline) | - |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "passk_majk_by_slice.png").stat().st_size > 0
    # the rehearsal model: the tokenizer's pipeline and chat template, a vocabulary of the task's text
    from transformers import AutoTokenizer

    from grpo_ext.experiments.study.rehearsal import REHEARSAL_VOCAB

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "rehearsal_model")
    assert 259 < len(tokenizer) <= REHEARSAL_VOCAB and tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
