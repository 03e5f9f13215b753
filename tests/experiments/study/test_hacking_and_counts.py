"""The study report's reward-hacking flags and its counts, worked by hand and read off the committed real study.

The flags (:mod:`grpo_ext.experiments.study.hacking`): a rise of the trained reward with a fall of validation pass@1, a
mean completion length at the cap, a strict-form share collapsed against the base's. The real study's process arm
farmed its step verifier (step reward to 0.99, test pass@1 0.010, samples to the 64-token cap): every one of its runs
must be flagged on all three, and no run of another arm may read as gamed.

The counts (:mod:`grpo_ext.experiments.study.counts`, :func:`grpo_ext.methods.cost.offline_trained_examples`): an
offline run's gradient samples are the epochs over its data as the trainer walks them, not steps x the full batch
(SFT 288 of 48 solutions, not 384), checked against the epoch each committed run's own training log ends at.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_ext.experiments.study.anatomy import render_anatomy
from grpo_ext.experiments.study.config import Setting, load_study
from grpo_ext.experiments.study.counts import log_counts, render_counts, run_counts, sizes_text, spread
from grpo_ext.experiments.study.dynamics import training_steps
from grpo_ext.experiments.study.expectations import render_expectations
from grpo_ext.experiments.study.hacking import (
    LENGTH_AT_CAP,
    PROCESS_REWARD_KEY,
    REWARD_RISE,
    flags,
    reading,
    render_hacking,
    signals,
    window,
)
from grpo_ext.experiments.study.report import _run_counts, carried_anatomy, read_hacking
from grpo_ext.experiments.study.report_md import _budget_text
from grpo_ext.methods.cost import COST_FILE, LOG_FILE, RUN_FILE, offline_trained_examples
from grpo_ext.methods.paradigm import get_method

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT / "results" / "real_study"
STUDY = ROOT / "configs" / "real" / "study.yaml"


# ---- hacking: hand-made records -----------------------------------------------------------------------------------


def _log(rewards, lengths=None, step_rewards=None, clipped=None) -> list[dict]:
    """A training log: an evaluation entry (no reward), one entry per step, the trainer's closing summary."""
    steps = []
    for i, reward in enumerate(rewards):
        entry = {"reward": reward, "step": i + 1}
        if lengths is not None:
            entry["completions/mean_length"] = lengths[i]
        if step_rewards is not None:
            entry[PROCESS_REWARD_KEY] = step_rewards[i]
        if clipped is not None:
            entry["completions/clipped_ratio"] = clipped[i]
        steps.append(entry)
    return [{"eval/pass@1": 0.05, "step": 0}, *steps, {"train_runtime": 1.0, "step": len(rewards)}]


def _steps(*args, **kwargs) -> list[dict]:
    """The step entries of :func:`_log`, as the report hands them to the flags."""
    return training_steps(_log(*args, **kwargs))


def _curve(*values) -> list[dict]:
    return [{"eval/pass@1": v, "step": 4 * i} for i, v in enumerate(values)]


def test_window_is_a_quarter_of_the_steps_and_at_least_one():
    assert [window(n) for n in (1, 3, 4, 5, 8, 12)] == [1, 1, 1, 2, 2, 3]


def test_a_farmed_process_reward_raises_all_three_flags():
    # 8 steps: windows of 2. The outcome reward stays near 0; the step score climbs 0.4 -> 1.0: first window 0.45,
    # last 0.975 (a rise of 0.525, the reward the process arm trains on). Validation 0.05 -> 0.02: a fall. Lengths
    # end at 64 and 64 (mean 64 >= 0.95 x 64). Strict form 0.0 against the base's 0.6.
    history = _steps(
        [0.0, 0.03, 0.0, 0.0, 0.03, 0.0, 0.0, 0.0],
        lengths=[40, 44, 50, 55, 60, 62, 64, 64],
        step_rewards=[0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0],
        clipped=[0.7, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0],
    )
    s = signals(history, _curve(0.05, 0.03, 0.02), 64, 0.0, 0.6)
    assert s["reward_key"] == PROCESS_REWARD_KEY
    assert (s["reward_first"], s["reward_last"]) == pytest.approx((0.45, 0.975))
    assert (s["validation_first"], s["validation_last"]) == (0.05, 0.02)
    assert s["mean_length_last"] == 64 and s["clipped_ratio_last"] == 1.0
    raised = flags(s)
    assert raised == ["reward_up_validation_down", "length_at_cap", "strict_form_collapse"]
    assert reading(s, raised) == "gamed"


def test_a_reward_that_rises_with_validation_is_learning_not_hacking():
    # online RFT's best seed in the real study: its reward rose and so did validation
    s = signals(_steps([0.0, 0.0, 0.25, 0.5]), _curve(0.04, 0.2), 64, 0.8, 0.66)
    assert s["reward_last"] - s["reward_first"] == 0.5 and flags(s) == [] and reading(s, []) is None


@pytest.mark.parametrize(
    ("rewards", "raised"),
    [
        ([0.25, 0.25, 0.375, 0.375], True),  # a rise of 0.125 >= 0.10
        ([0.25, 0.25, 0.3125, 0.3125], False),  # 0.0625: below the rise that counts
    ],
)
def test_the_reward_must_rise_by_the_threshold(rewards, raised):
    s = signals(_steps(rewards), _curve(0.05, 0.04), None, None, None)
    assert REWARD_RISE == 0.10
    assert ("reward_up_validation_down" in flags(s)) is raised


def test_validation_that_holds_is_no_fall_and_a_missing_curve_is_no_flag():
    rising = _steps([0.0, 0.0, 0.5, 0.5])
    assert flags(signals(rising, _curve(0.04, 0.04), None, None, None)) == []  # equal: not a fall
    assert flags(signals(rising, _curve(0.04), None, None, None)) == []  # one point: no course to read
    assert flags(signals(rising, None, None, None, None)) == []


def test_length_at_the_cap_reads_the_last_window_against_the_cap():
    # 4 steps: window 1. 95 of a cap of 100 is at the cap (>= 0.95 x 100); 94 is not; no cap, no flag
    assert LENGTH_AT_CAP == 0.95
    at = signals(_steps([0.0] * 4, lengths=[30, 99, 99, 95]), None, 100, None, None)
    below = signals(_steps([0.0] * 4, lengths=[30, 100, 100, 94]), None, 100, None, None)
    assert flags(at) == ["length_at_cap"] and flags(below) == []
    assert flags(signals(_steps([0.0] * 4, lengths=[30, 99, 99, 95]), None, None, None, None)) == []
    # flagged without a rise of the reward: a collapse, not a hack
    assert reading(at, flags(at)) == "degenerated"


def test_strict_form_collapse_is_below_half_of_the_reference():
    assert flags(signals(None, None, None, 0.29, 0.6)) == ["strict_form_collapse"]
    assert flags(signals(None, None, None, 0.3, 0.6)) == []  # exactly half: kept half of it
    assert flags(signals(None, None, None, 0.0, 0.0)) == []  # a reference without the form has nothing to lose
    offline_log = [{"loss": 0.7, "step": 1}, {"train_runtime": 1.0}]  # an offline log: no reward entries
    offline = signals(training_steps(offline_log), None, None, 0.01, 0.65)
    assert offline["reward_key"] is None and offline["mean_length_last"] is None
    assert reading(offline, flags(offline)) == "format lost"


def test_render_lists_every_arm_and_the_numbers_of_each_flagged_run():
    farmed = signals(
        _log([0.0] * 4, lengths=[64] * 4, step_rewards=[0.4, 0.6, 0.8, 1.0]), _curve(0.04, 0.01), 64, 0.0, 0.6
    )
    healthy = signals(_steps([0.0, 0.1, 0.2, 0.3]), _curve(0.04, 0.1), 64, 0.7, 0.6)
    runs = [
        {"arm": "grpo_process", "setting": "lr0.0003", "seed": 0, "role": "test", "split": "test", "signals": farmed},
        {"arm": "grpo_outcome", "setting": "lr0.0003", "seed": 0, "role": "test", "split": "test", "signals": healthy},
    ]
    for run in runs:
        run["flags"] = flags(run["signals"])
    lines = render_hacking(runs, "SFT start")
    assert "below 50% of the SFT start's on the same split" in "\n".join(lines)
    summary = {}  # the per-arm table comes first: each arm's first row
    for line in lines:
        if line.startswith("| grpo"):
            summary.setdefault(line.split(" | ")[0], line)
    assert summary["| grpo_outcome"].endswith("| 0 of 1 | 0 of 1 | none | - |")
    assert "| 1 of 1 | 1 of 1 |" in summary["| grpo_process"]
    row = next(line for line in lines if line.startswith("| grpo_process | lr0.0003 | 0 |"))
    assert "| gamed |" in row and "0.400 → 1.000 (`process/step_reward_mean`)" in row
    assert "| 0.040 → 0.010 |" in row and "64.0 (64)" in row and "0.000 against 0.600 (test)" in row


# ---- counts: hand-made records ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("examples", "micro_batch", "accumulation", "steps", "trained"),
    [
        (48, 8, 4, 12, 288),  # SFT: 6 forwards = 2 steps an epoch (4 forwards, then 2): 6 epochs of 48
        (64, 8, 4, 12, 384),  # a dataset of whole batches: steps x the full batch is right
        (8, 8, 4, 12, 96),  # RFT, 8 unique right samples: one forward is an epoch, 12 epochs
        (23, 8, 4, 12, 276),  # 3 forwards, one step an epoch: 12 epochs of 23
        (28, 4, 4, 12, 168),  # DPO pairs at 4 x 4: 7 forwards, 2 steps an epoch, 6 epochs of 28
        (52, 4, 4, 12, 156),  # 13 forwards, 4 steps an epoch: 3 epochs
        (68, 4, 4, 12, 168),  # 17 forwards, 5 steps an epoch: 2 epochs (136) and 2 steps of 16 = 168
        (0, 8, 4, 12, 0),
    ],
)
def test_offline_trained_examples_by_hand(examples, micro_batch, accumulation, steps, trained):
    assert offline_trained_examples(examples, micro_batch, accumulation, steps) == trained


def test_run_counts_rebuilds_an_old_record_and_trusts_a_new_one():
    training = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4}
    old = {"optimizer_steps": 12, "samples_generated": 0, "trained_sequences": 384, "details": {"examples": 48}}
    c = run_counts(old, training, online=False)
    assert (c["trained_sequences"], c["unique_sequences"], c["epochs"], c["reconstructed"]) == (288, 48, 6.0, True)
    assert c["data"]["dataset"] == "examples"
    new = {**old, "trained_sequences": 288, "unique_sequences": 48}
    assert run_counts(new, training, online=False)["reconstructed"] is False
    # a DPO pair is two sequences: 28 pairs at 4 x 4 -> 168 pairs trained, 336 sequences over 56 unique ones
    dpo = {"optimizer_steps": 12, "samples_generated": 384, "trained_sequences": 384, "details": {"pairs": 28}}
    d = run_counts(dpo, {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}, False, 2)
    assert (d["trained_sequences"], d["unique_sequences"], d["epochs"]) == (336, 56, 6.0)
    # online: each generated batch is trained num_iterations times
    online = {"optimizer_steps": 12, "samples_generated": 192, "trained_sequences": 384, "details": {}}
    o = run_counts(online, {"num_iterations": 2}, online=True)
    assert (o["unique_sequences"], o["epochs"], o["reconstructed"]) == (192, 2.0, False)


def test_spread_sizes_and_the_counts_table():
    assert spread([384, 384]) == "384" and spread([96, 276, 192]) == "96-276" and spread([]) == "-"
    assert spread([6.0, 2.4705882]) == "2.5-6"
    sizes = {
        "base": (500, 64),
        "sft": (500, 4),
        "rft": (500, 4),
        "dpo": (500, 4),
        "grpo_outcome": (500, 64),
        "x": (300, 4),
    }
    assert (
        sizes_text(sizes, "test") == "500 `test` problems (n = 4; base, grpo_outcome: n = 64; x: 300 problems, n = 4)"
    )
    old = {"optimizer_steps": 12, "samples_generated": 0, "trained_sequences": 384, "details": {"examples": 48}}
    counts = run_counts(old, {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4}, online=False)
    lines = render_counts({"sft": {"runs": [counts], "online": False}})
    assert "| sft | 12 | 0 | 288 | 48 | 6 | 48 reference solutions | - | - |" in lines  # an offline run: no log counts
    assert any("sft predate `unique_sequences`" in line for line in lines)


def test_an_online_runs_prompt_passes_and_lowest_rate_come_from_its_training_log(tmp_path):
    """The last logged epoch (1: every prompt drawn once) and the lowest logged learning rate (no step at 0), per
    online run; an offline run's table cells stay empty."""
    from grpo_ext.experiments.study.spec import Arm

    steps = ((1, 3e-4, 0.5), (2, 1e-4, 1.0))
    history = [{"eval/pass@1": 0.5, "epoch": 0, "step": 0}]
    history += [{"reward": 0.5, "learning_rate": lr, "epoch": epoch, "step": step} for step, lr, epoch in steps]
    history.append({"train_runtime": 9.0, "epoch": 1.0, "step": 2})  # the trainer's closing summary
    assert log_counts(history) == {"prompt_passes": 1.0, "min_learning_rate": 1e-4}
    assert log_counts(None) == {"prompt_passes": None, "min_learning_rate": None}
    (tmp_path / LOG_FILE).write_text(json.dumps(history))
    cost = {"optimizer_steps": 2, "samples_generated": 64, "trained_sequences": 64, "unique_sequences": 64}
    (tmp_path / COST_FILE).write_text(json.dumps(cost))
    online = _run_counts(Arm("grpo", "grpo_outcome"), tmp_path, {})
    offline = _run_counts(Arm("sft", "sft"), tmp_path, {})
    assert (online["prompt_passes"], online["min_learning_rate"]) == (1.0, 1e-4)
    assert (offline["prompt_passes"], offline["min_learning_rate"]) == (None, None)
    half = {**online, "prompt_passes": 0.5, "min_learning_rate": 3e-4}
    lines = render_counts({"grpo": {"runs": [online, half], "online": True, "num_generations": 8},
                           "sft": {"runs": [offline], "online": False}})  # fmt: skip
    trained_on = "its own samples, generated while training (8 groups of 8)"
    assert f"| grpo | 2 | 64 | 64 | 64 | 1 | {trained_on} | 0.5-1 | 0.0001-0.0003 |" in lines
    assert next(line for line in lines if line.startswith("| sft |")).endswith("| - | - |")


def test_the_design_says_the_budgets_differ_per_arm_or_states_the_one_they_share():
    def arm(*trained):
        return {"counts": [{"samples_generated": 384, "trained_sequences": t, "optimizer_steps": 12} for t in trained]}

    same = _budget_text({"arms": {"a": arm(384, 384), "b": arm(384)}})
    assert same.startswith("Every arm trained on the same budget") and "384 generated and 384 gradient" in same
    differ = _budget_text({"arms": {"sft": arm(288), "rft": arm(96, 276)}})
    assert "sft 384 generated, 288 gradient samples" in differ and "rft 384 generated, 96-276 gradient" in differ


# ---- the reference's display name, and the anatomy a report-only run cannot compute -------------------------------


def test_the_base_is_shown_by_its_reference_label_and_its_key_stays_base():
    anatomy = {"group_size": 4, "seed": 0, "split": "test", "rows": {"base": {}, "sft": {}}}
    keys = ("all_correct", "all_wrong", "mixed", "all_wrong_with_step_signal", "wrong_with_correct_prefix")
    for row in anatomy["rows"].values():
        row.update(dict.fromkeys((*keys, "correct_prefix_share"), 0.5))
    lines = render_anatomy(anatomy, "SFT start")
    assert any(line.startswith("| SFT start |") for line in lines) and not any(
        line.startswith("| base |") for line in lines
    )
    row = {
        "text": "GRPO beats its start",
        "measured": "pass@1: grpo_outcome - base",
        "against": "base",
        "min_difference": 0.1,
        "held": None,
        "why": "left out",
    }
    assert "| pass@1: grpo_outcome - SFT start |" in "\n".join(render_expectations([row], "SFT start"))


def test_the_anatomy_is_carried_over_only_for_the_same_test_results():
    stats = {"arms": {"a": {"metrics": {"pass@1": {"mean": 0.2}}}}, "base": {"pass@1": {"mean": 0.04}}}
    previous = {**stats, "anatomy": {"rows": {"base": {}}}}
    assert carried_anatomy(previous, stats)["carried_over"] is True
    changed = {**stats, "arms": {"a": {"metrics": {"pass@1": {"mean": 0.21}}}}}
    assert carried_anatomy(previous, changed) is None
    assert carried_anatomy({**stats, "anatomy": None}, stats) is None and carried_anatomy(None, stats) is None


# ---- the committed real study -------------------------------------------------------------------------------------


def _real_study():
    study = load_study(STUDY)
    search = json.loads((REAL / "search.json").read_text())
    picks = {
        arm.name: Setting(tuple((k, v) for k, v in search["picks"][arm.name].items() if k != "slug"))
        for arm in study.arms
    }
    return study, picks


def test_every_process_run_of_the_real_study_is_flagged_on_all_three_and_no_other_arm_gamed():
    study, picks = _real_study()
    runs = read_hacking(study, REAL, picks)
    process = [r for r in runs if r["arm"] == "grpo_process"]
    assert sorted(r["seed"] for r in process if r["role"] == "test") == [0, 1, 2]
    for run in process:
        s = run["signals"]
        assert run["flags"] == ["reward_up_validation_down", "length_at_cap", "strict_form_collapse"], run
        assert run["reading"] == "gamed" and s["reward_key"] == PROCESS_REWARD_KEY
        # the farm in numbers: step score near 1, samples at the 64-token cap, no strict form left
        assert s["reward_last"] > 0.95 and s["max_completion_length"] == 64 and s["mean_length_last"] > 63.5
        assert s["strict_share"] <= 0.001 and s["validation_last"] < s["validation_first"]
    others = [r for r in runs if r["arm"] != "grpo_process"]
    assert {r["reading"] for r in others} <= {None, "degenerated", "format lost"}  # collapsed at most, never gamed
    assert not [r for r in others if r["role"] == "test" and r["flags"]]  # no other pick's seed is flagged
    assert not [r for r in others if r["arm"] in ("sft", "rft", "outcome_refill") and r["flags"]]


def _offline_runs():
    for method in ("sft", "rft", "dpo"):
        yield from sorted((REAL / "runs" / method).glob("*/seed*"))


@pytest.mark.parametrize("folder", list(_offline_runs()), ids=lambda f: "/".join(f.parts[-3:]))
def test_rebuilt_offline_counts_end_at_the_epoch_the_run_logged(folder):
    """The trainer's log says where each offline run stopped (`epoch`: epochs done + forwards of the unfinished one /
    forwards an epoch); the counts rebuilt from the record's dataset size and the config's batch end at that epoch."""
    cost = json.loads((folder / COST_FILE).read_text())
    training = json.loads((folder / RUN_FILE).read_text())["training"]
    method = get_method(cost["method"])
    counts = run_counts(cost, training, online=False, sequences_per_example=method.sequences_per_example)
    assert counts["reconstructed"]  # written before `unique_sequences`
    examples = counts["unique_sequences"] // method.sequences_per_example
    micro, accumulation = training["per_device_train_batch_size"], training["gradient_accumulation_steps"]
    forwards = -(-examples // micro)
    per_epoch = -(-forwards // accumulation)
    epochs, rest = divmod(cost["optimizer_steps"], per_epoch)
    logged = json.loads((folder / LOG_FILE).read_text())[-1]["epoch"]
    assert logged == pytest.approx(epochs + rest * accumulation / forwards)
    assert counts["trained_sequences"] / counts["unique_sequences"] == pytest.approx(counts["epochs"])


def test_each_real_pick_trained_on_the_sequences_and_epochs_counted_by_hand():
    """Issue 48: SFT trained on 288, RFT on 96-276 (12 epochs over 8-23 unique samples), DPO on 312-336 sequences;
    the online arms on the 384 they generated (refill: 96-128 in its 3-4 steps)."""
    study, picks = _real_study()
    trained = {}
    for arm in study.arms:
        method = get_method(arm.method)
        for seed in study.seeds:
            folder = study.run_dir(REAL, arm, picks[arm.name], seed)
            cost = json.loads((folder / COST_FILE).read_text())
            training = json.loads((folder / RUN_FILE).read_text())["training"]
            counts = run_counts(cost, training, method.online, method.sequences_per_example)
            trained.setdefault(arm.name, []).append((counts["trained_sequences"], counts["epochs"]))
            if arm.name == "rft":  # 12 epochs over its unique right samples
                assert counts["trained_sequences"] == 12 * cost["details"]["unique_correct"]
    assert trained["sft"] == [(288, 6.0)] * 3
    assert [t for t, _ in trained["rft"]] == [96, 192, 276] and {e for _, e in trained["rft"]} == {12.0}
    assert [t for t, _ in trained["dpo"]] == [336, 312, 336]
    for name in ("online_rft", "grpo_outcome", "grpo_process"):
        assert trained[name] == [(384, 1.0)] * 3
    assert sorted(t for t, _ in trained["outcome_refill"]) == [96, 128, 128]


def test_the_runner_records_the_sequences_an_sft_run_really_trained_on(tmp_path):
    """10 reference solutions at 4 a forward, 2 forwards a step: an epoch is 3 forwards (4, 4, 2) in 2 steps (the
    second takes the one forward left). 3 steps = one epoch (10) and one full step (8): 18 sequences, not 3 x 8 = 24;
    the trainer's own log ends at epoch 1 + 2/3."""
    from grpo_ext.methods import run_method

    flags = ["--train_size", "10", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"]
    flags += ["--max_steps", "3", "--curve_every", "0", "--output_dir", str(tmp_path)]
    cost = run_method(["--config", str(ROOT / "configs" / "methods" / "sft.yaml"), *flags])
    assert (cost["optimizer_steps"], cost["trained_sequences"], cost["unique_sequences"]) == (3, 18, 10)
    assert json.loads((tmp_path / COST_FILE).read_text())["unique_sequences"] == 10
    assert json.loads((tmp_path / LOG_FILE).read_text())[-1]["epoch"] == pytest.approx(1 + 2 / 3)
    training = json.loads((tmp_path / RUN_FILE).read_text())["training"]
    counts = run_counts(cost, training, online=False)
    assert (counts["trained_sequences"], counts["epochs"], counts["reconstructed"]) == (18, 1.8, False)
