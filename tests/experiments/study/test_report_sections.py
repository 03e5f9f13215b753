"""Report sections a skeptic asks for, worked by hand. A study that scores some models at a larger n (the base and
GRPO at 64, the other arms at 4): where the base's pass@k catches up with an arm's (the crossover, searched to the
smaller n of the two); the paper's Maj@K finding judged at the K that GRPO and the base were scored at, not the other
arms' n; each model's Pass@K / Maj@K drawn as far as it was measured. And each arm's seeds, with intervals over seeds
and problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_ext.experiments.study.anatomy import study_anatomy
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.crossover import arm_crossover, render_crossovers
from grpo_ext.experiments.study.method_configs import method_config_path, task_of
from grpo_ext.experiments.study.plots import by_k, model_ks, sampled_during_training
from grpo_ext.experiments.study.seeds import render_seed_spread, seed_spread
from grpo_ext.experiments.study.stats import paper_findings
from grpo_ext.tasks import get_task


def _result(correct: list[int], n: int, maj: dict[int, float] | None = None) -> dict:
    """A harness result: problem i has correct[i] of n samples right (and maj@k = maj[k] on every problem)."""
    rows = [{"problem_id": i, "n_correct": c} for i, c in enumerate(correct)]
    for row in rows:
        if maj:
            row["maj@k"] = {str(k): v for k, v in maj.items()}
    return {"n": n, "per_problem": rows}


# 16 problems. The base is right on 1 of its 8 samples everywhere: pass@k = k / 8 on every problem (1 - C(7,k)/C(8,k)),
# i.e. 0.125, 0.25, 0.5, 1 at k = 1, 2, 4, 8. An arm right on all 8 samples of a share p of the problems and on none
# of the rest has pass@k = p at every k.
BASE = _result([1] * 16, n=8)
SEED_QUARTER = _result([8] * 4 + [0] * 12, n=8)  # p = 0.25: the base reaches it at k = 2
SEED_HALF = _result([8] * 8 + [0] * 8, n=8)  # p = 0.5: at k = 4


def test_crossover_by_hand_with_each_seed_beside_the_seed_mean():
    c = arm_crossover([SEED_QUARTER, SEED_HALF], BASE)
    # the seed mean is 0.375 at every k: above the base at k = 1 and 2 (0.125, 0.25), reached at k = 4 (0.5)
    assert (c["leader"], c["k"], c["n"], c["ks"]) == ("b", 4, 8, [1, 2, 4, 8])
    assert [s["k"] for s in c["per_seed"]] == [2, 4] and {s["leader"] for s in c["per_seed"]} == {"b"}
    # a resample's crossover is 2, 4 or 8 as its share of solved problems (the arm's mean) is <= 0.25, 0.5 or above
    assert c["low"] in (2, 4) and c["high"] in (4, 8) and c["no_crossover_share"] == 0.0


def test_search_stops_at_the_smaller_n_and_says_when_the_base_never_catches_up():
    arm = _result([4] * 13 + [0] * 3, n=4)  # scored at n = 4: pass@k = 13/16 ~ 0.81 at every k
    c = arm_crossover([arm], BASE)
    assert c["n"] == 4 and c["ks"] == [1, 2, 4] and c["leader"] == "b" and c["k"] is None  # base@4 = 0.5
    row = next(line for line in render_crossovers({"grpo": c}) if line.startswith("| grpo"))
    assert "grpo leads at k = 1; the base's pass@k never reaches grpo's: none within k <= 4" in row
    assert row.endswith("| none |")


def test_section_names_the_leader_and_a_seed_that_disagrees():
    worse = _result([0] * 16, n=8)  # never right: the base leads at k = 1 and the arm never catches up
    c = arm_crossover([SEED_HALF, worse], BASE)  # seed mean 0.25 at every k: the base reaches it at k = 2
    assert (c["leader"], c["k"]) == ("b", 2)
    lines = render_crossovers({"rft": c})
    assert lines[0] == "## Pass@k against the base: the crossover"
    row = next(line for line in lines if line.startswith("| rft"))
    assert "rft leads at k = 1; the base's pass@k reaches rft's at k = 2" in row
    assert row.endswith("| 4, none (the base leads) |")
    assert render_crossovers({}) == []


def test_majk_finding_is_judged_at_the_k_grpo_and_the_base_were_scored_at():
    """GRPO and the base at n = 16, another arm at n = 4: the Maj@K finding is judged at K = 4 and 16, not 4 only."""
    base = _result([4] * 40, n=16, maj={4: 0.2, 16: 0.3})
    grpo = [_result([4] * 40, n=16, maj={4: 0.5, 16: 0.9}), _result([4] * 40, n=16, maj={4: 0.6, 16: 0.8})]
    others = [_result([1] * 40, n=4), _result([1] * 40, n=4)]
    majk = paper_findings({"grpo_outcome": grpo, "online_rft": others}, base)[-1]
    assert [r["k"] for r in majk["by_k"]] == [4, 16] and majk["verdict"] == "agrees"
    # by hand: pass@K is the same for both (same counts), so the gap is the maj@K gain: +0.35 at 4, +0.55 at 16
    assert [r["difference"] for r in majk["by_k"]] == pytest.approx([0.35, 0.55])
    assert majk["by_k"][1]["per_seed"] == pytest.approx([0.6, 0.5])


def _curve(*generated):
    return {"points": [{"step": 4 * i, "samples_generated": g, "eval/pass@1": 0.0} for i, g in enumerate(generated)]}


def test_the_samples_axis_draws_the_arms_that_sampled_while_training():
    """The real study's curves (`learning_curve.json`): online arms start at 0 generated samples and grow; RFT and DPO
    drew theirs before step 0, SFT none. Refill's runs have only a first and a last point (3-4 optimizer steps): an
    earlier rule read the second point as "after the offline draw" and left refill off the plot."""
    assert sampled_during_training([_curve(0, 128, 256, 384)])  # GRPO, online RFT
    assert sampled_during_training([_curve(0, 384), _curve(0, 448), _curve(0, 480)])  # refill: 2 points a seed
    assert not sampled_during_training([_curve(384, 384, 384, 384)])  # RFT / DPO: drawn before training
    assert not sampled_during_training([_curve(0, 0, 0, 0)])  # SFT: the task's reference solutions
    assert not sampled_during_training([{"points": [{"step": 0, "eval/pass@1": 0.0}]}])  # no count recorded


def test_each_model_is_drawn_to_the_largest_k_all_its_seeds_report():
    assert model_ks([BASE]) == [1, 2, 4, 8]  # no `ks` in the result: the powers of two up to n
    assert model_ks([{**BASE, "ks": [1, 2, 4, 8]}, {**SEED_HALF, "ks": [1, 2, 4]}]) == [1, 2, 4]
    half = _result([8] * 8 + [0] * 8, n=8, maj=dict.fromkeys((1, 2, 4, 8), 0.5))  # SEED_HALF with its maj@k
    curves = by_k([half], model_ks([half]))  # pass@k = 0.5 at every k, by hand
    assert sorted(curves["pass"]) == sorted(curves["maj"]) == [1, 2, 4, 8]
    assert [curves["pass"][k]["mean"] for k in (1, 2, 4, 8)] == pytest.approx([0.5] * 4)


def test_seed_spread_by_hand():
    """Three seeds right on 1, 2, 3 of 4 samples of every problem against a base right on 1 of 4: no problem noise,
    so the interval over seeds and problems is the seeds' own: a mean of three draws from {0.25, 0.5, 0.75}, whose
    2.5% and 97.5% quantiles are its extremes (each has probability 1/27 > 2.5%)."""
    base = _result([1] * 30, n=4)
    seeds = [_result([c] * 30, n=4) for c in (1, 2, 3)]
    row = seed_spread({"grpo": seeds}, base)["grpo"]
    assert row["per_seed"] == pytest.approx([0.25, 0.5, 0.75])
    assert (row["mean"], row["low"], row["high"]) == pytest.approx((0.5, 0.25, 0.75))
    minus = row["minus_base"]
    assert (minus["difference"], minus["low"], minus["high"]) == pytest.approx((0.25, 0.0, 0.5))
    lines = render_seed_spread({"grpo": row})
    assert lines[0] == "## Seeds: how much of each number is the seed"
    assert "| grpo | 0.250, 0.500, 0.750 | 0.500 [0.250, 0.750] | +0.250 [+0.000, +0.500] |" in lines


def test_group_anatomy_takes_the_smallest_n_the_models_were_scored_at(tmp_path):
    """The real study scores the base at n = 64 and the arms at n = 4: every model's groups are 4 samples (the
    training groups are 8), where the base's n alone asked the arms for 8 they do not have."""
    root = Path(__file__).resolve().parents[3]
    study = load_study(root / "configs" / "real" / "study.yaml")
    problem = get_task("word_arithmetic", **_real_task_kwargs(study)).load("test", 1)[0]
    picks = {arm.name: arm.settings(study.learning_rates)[0] for arm in study.arms}
    folders = {"base": (tmp_path / "base", 64)}
    folders |= {a.name: (study.run_dir(tmp_path, a, picks[a.name], study.seeds[0]), 4) for a in study.arms}
    for folder, n in folders.values():
        folder.mkdir(parents=True)
        (folder / "test.json").write_text(json.dumps({"n": n}))
        row = {"problem_id": "0", "prompt": problem["prompt"], "completion": "#### 1"}
        rows = [{**row, "sample_index": i} for i in range(n)]
        (folder / "test_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "training_log.json").write_text("[]")
    anatomy = study_anatomy(study, tmp_path, picks, str(study.configs_dir))
    assert anatomy["group_size"] == 4 and anatomy["rows"]["base"]["all_wrong"] == 1.0


def test_group_anatomy_takes_the_group_size_of_an_online_arm(tmp_path):
    """The SFT study's first arm is more_sft, whose config has no num_generations: the group is an online arm's (4
    here, every online config of the study changed so), not the default 8 an SFT config gave."""
    import shutil

    import yaml

    root = Path(__file__).resolve().parents[3]
    data = yaml.safe_load((root / "configs" / "real" / "sft_study.yaml").read_text())
    configs = tmp_path / "configs"
    shutil.copytree(root / data["configs"], configs)
    for config in configs.glob("*.yaml"):
        config.write_text(config.read_text().replace("num_generations: 8", "num_generations: 4"))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**data, "configs": str(configs)}, sort_keys=False))
    study = load_study(tmp_path / "study.yaml")
    assert study.arms[0].method == "sft" and "num_generations" not in (configs / "sft.yaml").read_text()
    problem = get_task("word_arithmetic", **_real_task_kwargs(study)).load("test", 1)[0]
    picks = {arm.name: arm.settings(study.learning_rates)[0] for arm in study.arms}
    out = tmp_path / "out"
    folders = [out / "base", *(study.run_dir(out, a, picks[a.name], study.seeds[0]) for a in study.arms)]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "test.json").write_text(json.dumps({"n": 16}))
        row = {"problem_id": "0", "prompt": problem["prompt"], "completion": "#### 1"}
        (folder / "test_samples.jsonl").write_text("".join(json.dumps({**row, "sample_index": i}) + "\n"
                                                           for i in range(16)))  # fmt: skip
        (folder / "training_log.json").write_text("[]")
    assert study_anatomy(study, out, picks, str(configs))["group_size"] == 4


def _real_task_kwargs(study) -> dict:
    return task_of(method_config_path(study.arms[0].method, study.configs_dir))[1]
