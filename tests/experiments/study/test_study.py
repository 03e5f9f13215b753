"""The fair stage: the study config, picks on validation only, the verdict rule, samples-to-reach, and a quick run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_ext.checkpoints import read_run_status
from grpo_ext.cli import run_cli
from grpo_ext.experiments.study.config import Setting, load_study, pick_settings
from grpo_ext.experiments.study.stats import finding_beats, paired_difference, samples_to_reach
from grpo_ext.hub.training import trained_with
from tests.experiments.study.test_study_driver import fresh_driver

METHODS = ("sft", "rft", "online_rft", "dpo", "grpo_outcome", "grpo_process")
GRPO_EXTENSIONS = (
    "grpo_process", "outcome_skip", "outcome_refill", "outcome_fixed_beta", "outcome_adaptive_beta", "process_refill",
)  # fmt: skip
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STUDY = os.path.join(ROOT, "configs", "compare.yaml")


def test_shipped_study_gives_every_arm_the_same_search():
    study = load_study(STUDY)
    assert len(study.learning_rates) >= 3
    assert {a.name for a in study.arms} >= {
        "sft", "rft", "online_rft", "dpo", "grpo_outcome", "grpo_process",
        "outcome_skip", "outcome_refill", "outcome_fixed_beta", "outcome_adaptive_beta", "process_refill",
    }  # fmt: skip
    dpo = study.arm("dpo")
    assert len(dpo.settings(study.learning_rates)) == len(study.learning_rates) * len(dpo.grid["beta"]) >= 9
    assert study.validation.split != study.test.split and len(study.seeds) >= 3
    assert study.search_seed not in study.seeds  # no search run is reused as a test run
    # >= 1,000 problems on each split (a paired interval of about +-0.02 rather than +-0.04 at 200)
    assert (study.validation.limit, study.validation.n, study.test.limit, study.test.n) == (1000, 16, 1000, 64)
    # the adaptive arm starts where its fixed-beta reference stays
    assert study.arm("outcome_adaptive_beta").overrides["beta"] == study.arm("outcome_fixed_beta").overrides["beta"]
    # one rate for the GRPO family: every extension trains at vanilla GRPO's pick; other families search their own
    assert {a.name for a in study.arms if a.rate_of == "grpo_outcome"} == set(GRPO_EXTENSIONS)
    assert {a.name for a in study.arms if a.rate_of is None} == {"sft", "rft", "online_rft", "dpo", "grpo_outcome"}
    # stage 1 searches only the arms with their own rate; the extensions train at grpo_outcome's pick, one setting
    # each: nothing to pick, so stage 2 trains no search run for them
    stage1 = study.search()
    assert {arm.name for arm, _, _ in stage1} == {"sft", "rft", "online_rft", "dpo", "grpo_outcome"}
    picks = {a.name: a.settings(study.learning_rates)[-1] for a in study.arms if a.rate_of is None}
    picks["grpo_outcome"] = _setting(5e-5)
    stage2 = study.search(picks)
    assert stage2 == [] and {seed for _, _, seed in stage1} == {100}
    assert {a.name: [s.slug for s in study.grid(a, picks)] for a in study.arms if a.rate_of} == dict.fromkeys(
        GRPO_EXTENSIONS, ["lr5e-05"]
    )
    # every search run, then every test seed of each pick: nothing trained twice, no test run on the search seed
    picks.update({name: _setting(5e-5) for name in GRPO_EXTENSIONS})
    runs = stage1 + stage2 + study.test_runs(picks)
    folders = [study.run_dir("out", arm, setting, seed) for arm, setting, seed in runs]
    assert len(folders) == len(set(folders)) == len(stage1) + len(stage2) + 3 * len(study.arms)
    assert {seed for _, _, seed in study.test_runs(picks)} == set(study.seeds)
    # seed by seed: every arm's first seed before any arm's second (a study cut short compares every arm)
    arms = [a.name for a in study.arms]
    assert [(a.name, seed) for a, _, seed in study.test_runs(picks)] == [(a, s) for s in study.seeds for a in arms]
    # --quick: fewer values and seeds, the search seed still apart, the shared rates kept
    quick = study.trimmed(values_per_axis=2, seeds=2)
    assert quick.seeds == [0, 1] and quick.search_seed == 100 and quick.arm("grpo_process").rate_of == "grpo_outcome"
    assert quick.learning_rates == study.learning_rates[:2] and quick.arm("dpo").grid["beta"] == [0.03, 0.1]


def test_bad_study_names_the_field(tmp_path):
    path, shipped = tmp_path / "study.yaml", Path(STUDY).read_text()
    path.write_text(shipped.replace("split: validation", "split: test"))
    with pytest.raises(ValueError, match="validation.split and test.split must differ"):
        load_study(path)
    path.write_text(shipped.replace("grid: {beta:", "grid: {gamma:"))
    with pytest.raises(ValueError, match=r"arms.dpo.grid: unknown axis \['gamma'\]"):
        load_study(path)
    path.write_text(shipped.replace("method: rft}", "method: rtf}"))
    with pytest.raises(ValueError, match="rtf"):
        load_study(path)
    with pytest.raises(FileNotFoundError, match="--study"):
        load_study(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("search_seed: 100", "search_seed: 1", r"search_seed 1 is one of seeds \[0, 1, 2\]"),
        ("search_seed: 100", "", "missing `search_seed`"),
        ("search_seed: 100", "search_seed: x", "search_seed: expected an integer, got 'x'"),
        (
            "outcome_skip: {method: grpo_outcome, overrides: {zero_std_groups: skip}, rate_of: grpo_outcome}",
            "outcome_skip: {method: grpo_outcome, overrides: {zero_std_groups: skip}, rate_of: grpo_outcom}",
            r"arms\.outcome_skip\.rate_of: unknown arm 'grpo_outcom'",
        ),
        (  # a chain: grpo_process takes its rate from grpo_outcome, so it cannot lend one
            "outcome_skip: {method: grpo_outcome, overrides: {zero_std_groups: skip}, rate_of: grpo_outcome}",
            "outcome_skip: {method: grpo_outcome, overrides: {zero_std_groups: skip}, rate_of: grpo_process}",
            r"arms\.outcome_skip\.rate_of: grpo_process takes its own rate from grpo_outcome \(rate_of\)",
        ),
        (  # an arm lending itself its rate is a chain of one
            "grpo_outcome: {method: grpo_outcome}",
            "grpo_outcome: {method: grpo_outcome, rate_of: grpo_outcome}",
            r"arms\.grpo_outcome\.rate_of: grpo_outcome takes its own rate from grpo_outcome",
        ),
        (
            "grpo_process: {method: grpo_process, rate_of: grpo_outcome}",
            "grpo_process: {method: grpo_process, rate_of: grpo_outcome, grid: {lr: [0.1]}}",
            r"arms\.grpo_process\.grid\.lr: the arm trains at grpo_outcome's picked rate",
        ),
        ("rft: {method: rft}", "rft: {method: rft, rate: sft}", r"arms\.rft: unknown field\(s\) \['rate'\]"),
        ("rft: {method: rft}", "base: {method: rft}", r"arms\.base: `base` names the base model"),
    ],
)
def test_bad_rates_and_seeds_name_the_field(tmp_path, old, new, message):
    shipped = Path(STUDY).read_text()
    assert old in shipped
    path = tmp_path / "study.yaml"
    path.write_text(shipped.replace(old, new))
    with pytest.raises(ValueError, match=message):
        load_study(path)


def test_arms_of_a_run_keep_the_reference_of_their_rate():
    study = load_study(STUDY)
    assert [a.name for a in study.only(["grpo_outcome", "outcome_skip"]).arms] == ["grpo_outcome", "outcome_skip"]
    with pytest.raises(ValueError, match=r"--arms: outcome_skip trains at grpo_outcome's picked learning rate"):
        study.only(["sft", "outcome_skip"])


def _setting(lr: float) -> Setting:
    return Setting((("lr", lr),))


def test_pick_is_the_best_validation_score_and_ties_go_to_the_first_setting():
    grid = {"a": [_setting(1e-5), _setting(5e-5), _setting(1e-4)], "b": [_setting(1e-5), _setting(5e-5)]}
    scores = {"a": {"lr1e-05": 0.40, "lr5e-05": 0.52, "lr0.0001": 0.47}, "b": {"lr1e-05": 0.3, "lr5e-05": 0.3}}
    picks = pick_settings(scores, grid)
    assert picks["a"].slug == "lr5e-05" and picks["b"].slug == "lr1e-05"
    with pytest.raises(ValueError, match="arm b: no validation score for lr5e-05"):
        pick_settings({"a": scores["a"], "b": {"lr1e-05": 0.3}}, grid)


def _result(correct: list[int], n: int = 4) -> dict:
    return {"n": n, "per_problem": [{"problem_id": i, "n_correct": c} for i, c in enumerate(correct)]}


def test_verdict_rule_needs_the_interval_and_every_seed():
    better = [_result([4, 4, 3, 4, 2, 4, 4, 3] * 5), _result([4, 3, 4, 4, 3, 4, 4, 3] * 5)]
    worse = [_result([2, 1, 2, 2, 1, 2, 1, 2] * 5), _result([2, 2, 1, 2, 2, 1, 2, 1] * 5)]
    assert finding_beats("x", better, worse)["verdict"] == "agrees"
    assert finding_beats("x", worse, better)["verdict"] == "disagrees"
    # one seed the other way round: never "agrees", whatever the interval
    mixed = [better[0], _result([1, 1, 1, 1, 1, 1, 1, 1] * 5)]
    assert finding_beats("x", mixed, worse)["verdict"] == "inconclusive"
    # pass@1 difference by hand: per problem (c_a - c_b) / 4, averaged
    diff = paired_difference(better[:1], worse[:1], "pass@1")
    assert diff["difference"] == pytest.approx((28 - 13) / 4 / 8)
    assert diff["low"] <= diff["difference"] <= diff["high"]


def test_paired_difference_against_the_base_measures_every_seed_and_the_majk_gap():
    """The base is one model: each of an arm's seeds is measured against it (not only the first); ``minus`` gives
    DeepSeekMath's Maj@K-over-Pass@K gap, paired the same way."""
    base = _result([2] * 40)
    arm = [_result([2] * 40), _result([3] * 40)]
    for result, maj in ((base, 0.5), (arm[0], 0.9), (arm[1], 1.0)):
        for row in result["per_problem"]:
            row["maj@k"] = {"4": maj}
    pass1 = paired_difference(arm, [base], "pass@1")
    assert pass1["per_seed"] == pytest.approx([0.0, 0.25]) and pass1["difference"] == pytest.approx(0.125)
    # by hand: pass@4 is 1 wherever a sample is right (no gain); maj@4 gains +0.4 / +0.5
    gap = paired_difference(arm, [base], "maj@4", minus="pass@4")
    assert gap["per_seed"] == pytest.approx([0.4, 0.5]) and gap["difference"] == pytest.approx(0.45)
    assert gap["low"] == pytest.approx(0.45) == gap["high"]  # every problem alike: the interval is its point
    # resampling the seeds too: a mean of two draws from the seeds' {0.4, 0.5} (and {0, 0.25}), each extreme 1/4
    assert gap["over_seeds"] == pytest.approx([0.4, 0.5]) and pass1["over_seeds"] == pytest.approx([0.0, 0.25])


def test_samples_to_reach_interpolates_between_evaluations():
    points = [
        {"samples_generated": 0, "eval/pass@1": 0.40},
        {"samples_generated": 1000, "eval/pass@1": 0.50},
        {"samples_generated": 2000, "eval/pass@1": 0.60},
    ]
    assert samples_to_reach(points, 0.55) == pytest.approx(1500)
    assert samples_to_reach(points, 0.40) == 0
    assert samples_to_reach(points, 0.61) is None


@pytest.mark.slow
def test_quick_run_of_every_method_picks_on_validation_before_any_test_number(tmp_path, monkeypatch, capsys):
    """The driver end to end on the six methods of the paradigm: equal budgets, the picks are the best validation
    scores (grpo_process at grpo_outcome's picked rate), search runs on the search seed only, test results exist
    only for the picked settings on the test seeds (each written after the picks); then the ad-hoc comparison
    (evals/compare.py) reads the picked runs."""
    out = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "scripts/run_methods.py", "--quick", "--arms", ",".join(METHODS), "--jobs", "1"]
    proc = subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    search = json.loads((out / "search.json").read_text())
    picked_at = (out / "search.json").stat().st_mtime
    base_validation = json.loads((out / "base" / "validation.json").read_text())
    assert base_validation["split"] == "validation" and search["base"] == base_validation["pass@k"]["1"]
    assert search["search_seed"] == 100 and search["rate_of"] == {"grpo_process": search["rate_of"]["grpo_process"]}
    # no search of its own: one setting (grpo_outcome's pick), nothing to pick, no search run
    assert search["scores"]["grpo_process"] == {} and not list((out / "runs" / "grpo_process").glob("*/seed100"))
    assert search["picks"]["grpo_process"]["slug"] == search["picks"]["grpo_outcome"]["slug"]
    for arm, scores in search["scores"].items():
        scores = scores or {search["picks"][arm]["slug"]: None}  # an unsearched arm: its one setting
        for slug, score in scores.items():
            if score is None:
                continue
            validation = json.loads((out / "runs" / arm / slug / "seed100" / "validation.json").read_text())
            assert validation["split"] == "validation" and validation["pass@k"]["1"] == score
            assert not (out / "runs" / arm / slug / "seed100" / "test.json").exists()  # a search run is never tested
        best = max(scores, key=lambda s: (scores[s] or 0, -list(scores).index(s)))
        assert search["picks"][arm]["slug"] == best
        for slug in scores:
            tests = list((out / "runs" / arm / slug).glob("seed*/test.json"))
            if slug == best:
                assert sorted(t.parent.name for t in tests) == ["seed0", "seed1"]
                assert all(t.stat().st_mtime >= picked_at for t in tests)
            else:
                assert tests == []  # a setting that was not picked is never scored on test
        cost = json.loads((out / "runs" / arm / best / "seed0" / "training_cost.json").read_text())
        assert cost["optimizer_steps"] == 2 and cost["samples_generated"] == (0 if arm == "sft" else 32)
        # every runner leaves the same training record as scripts/train.py: the card reads it
        status = read_run_status(out / "runs" / arm / best / "seed0")
        assert status["status"] == "complete" and status["global_step"] == 2
        assert trained_with(out / "runs" / arm / best / "seed0")["task"] == "arithmetic"
        log = json.loads((out / "runs" / arm / best / "seed0" / "training_log.json").read_text())
        assert log[-1]["step"] == 2 and "train_runtime" in log[-1]  # the trainer's whole log history is kept
    report = (out / "report.md").read_text()
    assert report.splitlines()[2] == "## Expectations (written in the study config before the run)"
    assert "scored on 6 `validation` problems (n = 4" in report  # what --quick scored, not the full study
    assert "not measured: the test drew 4 samples a problem, fewer than K = 64" in report  # --quick draws n = 4
    assert "not measured: no run of outcome_skip" in report  # an arm this run left out
    assert f"| base | - | {search['base']:.3f} |" in report  # the picks are read against the base on validation
    assert "## Search (validation)" in report and "(pick)" in report and "95% percentile bootstrap" in report
    # the command that reproduces it, as typed (a folder outside the repository stays absolute)
    assert f"Command: `python scripts/run_methods.py --quick --arms {','.join(METHODS)} --jobs 1 --out {out}`" in report
    assert "Online RFT beats RFT" in report and "raises Maj@K more than Pass@K" in report
    # the crossover of every arm's pass@k against the base's, searched to the test's n = 4
    crossovers = json.loads((out / "report.json").read_text())["crossovers"]
    assert set(crossovers) == set(METHODS) and {c["n"] for c in crossovers.values()} == {4}
    assert all(len(c["per_seed"]) == 2 for c in crossovers.values())
    assert "## Pass@k against the base: the crossover" in report
    assert (out / "curves.png").stat().st_size > 0 and (out / "passk_majk.png").stat().st_size > 0
    assert "## Where the learning signal is (diagnostic)" in report
    # stage 0: the signal at the base, on --quick's batch of the signal arm (16 samples, 4 prompts x 4) only
    signal = json.loads((out / "signal.json").read_text())
    shapes = [(r["objective"], r["samples"], r["prompts"], r["minibatches"]) for r in signal["rows"]]
    assert shapes == [("grpo", 16, 4, 3), ("sft", 16, 16, 3)] and signal["settings"]["arm_samples"] == 16
    assert "## The learning signal at the base (before any training)" in report and "| **16** (arms) |" in report
    assert json.loads((out / "report.json").read_text())["signal"] == signal
    anatomy = json.loads((out / "report.json").read_text())["anatomy"]
    assert set(anatomy["rows"]) == {"base", *METHODS} and anatomy["group_size"] == 4  # the quick test draws n = 4
    for name, row in anatomy["rows"].items():
        assert row["all_correct"] + row["all_wrong"] + row["mixed"] == pytest.approx(1.0)
        assert (row.get("training_zero_std") is None) == (name in ("base", "sft", "rft", "dpo")), name
    # the online runs' training logs, search runs (seed 100) and the picks' test seeds, offline arms left out
    assert "## Training dynamics of the online arms (from the training logs)" in report
    assert (out / "dynamics.png").stat().st_size > 0 and "(dynamics.png)" in report
    dynamics = json.loads((out / "report.json").read_text())["dynamics"]
    assert {r["arm"] for r in dynamics} == set(METHODS) - {"sft", "rft", "dpo"}
    assert {r["seed"] for r in dynamics} == {100, 0, 1} and all(r["summary"]["steps"] == 2 for r in dynamics)

    from grpo_ext.experiments.compare.cli import main as compare

    runs = ["base=embedded"] + [f"{m}@seed0={out / 'runs' / m / search['picks'][m]['slug'] / 'seed0'}" for m in METHODS]
    argv = [a for r in runs for a in ("--run", r)] + ["--out", str(tmp_path / "compare"), "--no-progress"]
    compare([*argv, "--n", "4", "--k", "1,2,4", "--limit", "6", "--max-new-tokens", "32"])
    compared = json.loads((tmp_path / "compare" / "report.json").read_text())
    assert {r["name"] for r in compared["runs"]} == {"base", *(f"{m}@seed0" for m in METHODS)}
    assert len(compared["findings"]) == 4

    # --report-only: the same report from the runs' records alone (what a clone has: no weights, no sample caches)
    first = report.splitlines()
    for path in [*out.rglob("*.safetensors"), *out.rglob("*_samples.jsonl")]:
        path.unlink()
    (out / "report.md").unlink()
    one = next(out.glob("runs/rft/*/seed1/test.json"))
    kept = one.read_bytes()
    one.unlink()  # a test result missing: refused, naming it, and nothing written
    # the script's own entry point (run_cli: exit code 2 and one line for a refusal) in this process, as a subprocess
    # runs it: no second start of torch and the rest for a command that trains nothing (the study above is a process)
    monkeypatch.chdir(ROOT)
    report_only = [*cmd[2:], "--out", str(out), "--report-only"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as missing:
        run_cli(fresh_driver().main, report_only)
    assert missing.value.code == 2
    assert f"1 of {1 + 2 * len(METHODS)} test results are missing in {out}, e.g. {one}" in capsys.readouterr().err
    assert not (out / "report.md").exists()
    one.write_bytes(kept)
    run_cli(fresh_driver().main, report_only)  # returns: exit code 0
    assert "no group anatomy" in capsys.readouterr().out and not list(out.rglob("*.safetensors"))  # nothing trained
    rendered = (out / "report.md").read_text().splitlines()
    assert rendered[: first.index("## Search (validation)")] == first[: first.index("## Search (validation)")]
    # the group anatomy reads the sample caches: without them it is carried over from the report.json of the same
    # test results (a clone's), and says so
    assert "## Test results of the picks" in rendered and "## Where the learning signal is (diagnostic)" in rendered
    assert any(line.startswith("Carried over from the previous `report.json`") for line in rendered)


def test_group_anatomy_by_hand():
    from grpo_ext.experiments.study.anatomy import group_anatomy

    groups = [
        ([True, True], [[1.0, 1.0], [1.0, 1.0]]),  # all right
        ([False, False], [[1.0, 0.0], [0.0, 0.0]]),  # all wrong, but the steps differ: process signal only
        ([False, False], [[0.0, 0.0], [0.0, 0.0]]),  # all wrong, nothing differs
        ([True, False], [[1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]),  # mixed; the wrong one has a right 2-step prefix
    ]
    anatomy = group_anatomy(groups)
    assert anatomy["all_correct"] == anatomy["mixed"] == anatomy["all_wrong_with_step_signal"] == 0.25
    assert anatomy["all_wrong"] == 0.5 and anatomy["wrong_samples"] == 5
    # wrong samples' first wrong step: 1 of 2, 0, 0, 0, 2 of 4 -> two with a right prefix; shares 1/2 + 2/4 over 5
    assert anatomy["wrong_with_correct_prefix"] == pytest.approx(2 / 5)
    assert anatomy["correct_prefix_share"] == pytest.approx(1.0 / 5)
    # a step with nothing to check (NaN) is left out: no step signal from it, and it is no right prefix (the process
    # arm's hack, "Step 1: Identify the problem" lines before a wrong answer, shows as no correct prefix at all)
    nan = float("nan")
    unchecked = group_anatomy([([False, False], [[nan, 0.0], [0.0, 0.0]]), ([False], [[nan, nan, 1.0, 0.0]])])
    assert unchecked["all_wrong_with_step_signal"] == 0.5  # checked scores {0} (a NaN is no other score), {1, 0}
    # checked steps [0], [0, 0], [1, 0]: one wrong sample of three has a right first step, prefix shares 0, 0, 1/2
    assert unchecked["wrong_with_correct_prefix"] == pytest.approx(1 / 3)
    assert unchecked["correct_prefix_share"] == pytest.approx(0.5 / 3)


def test_samples_to_reach_is_undefined_when_the_reference_never_rose_above_its_start():
    from grpo_ext.experiments.study.report import _reach

    def curve(*ys):
        return {"points": [{"samples_generated": 100 * i, "eval/pass@1": y} for i, y in enumerate(ys)]}

    fell = _reach([curve(0.5, 0.45, 0.52)], [curve(0.5, 0.4, 0.48)])["reach"]  # ended below its start of 0.5
    assert fell["ratio"] is None and fell["reference_start"] == 0.5 and "per_seed" not in fell
    rose = _reach([curve(0.5, 0.6, 0.7)], [curve(0.5, 0.55, 0.6)])["reach"]  # 0.6 reached at 100 of 200 samples
    assert rose["per_seed"] == [100.0] and rose["ratio"] == 0.5
