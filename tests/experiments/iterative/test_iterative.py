"""Iterative RL (issues 7 and 16): replay sampler, arms, guard, logged rewards and hacking gap, summary and targets,
bad input. The loop on a tiny model (resume, reference reset): tests/experiments/iterative/test_loop.py; the quick
config end to end (with a real kill): tests/experiments/iterative/test_iterative_quick.py."""

from __future__ import annotations

import dataclasses
import math
import subprocess

import numpy as np
import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import TrainerControl, TrainerState

from grpo_ext.config import GRPOExtConfig
from grpo_ext.errors import UserError
from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_paired_difference_ci
from grpo_ext.experiments.iterative import (
    CollapseGuard,
    IterativeArguments,
    build_policy_trainer,
    check_verifier,
    first_collapse,
)
from grpo_ext.experiments.iterative.arms import parse_arms, parse_seeds
from grpo_ext.experiments.iterative.arms_report import render_arms
from grpo_ext.experiments.iterative.labels import label_samples
from grpo_ext.experiments.iterative.policy import LastCallCache, StepMean, gap_of, training_curve
from grpo_ext.experiments.iterative.replay import mix_with_replay, replay_count, sample_replay
from grpo_ext.experiments.iterative.summary import summarize, training_gap_curve
from grpo_ext.rewards.prm import ProcessRewardModel
from grpo_ext.tasks import get_task
from tests.rewards.test_reward_models import make_tiny_policy


def records(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}/{i}", "prompt": "1+1=", "completion": str(i), "label": i % 2} for i in range(n)]


# ---- replay sampler ------------------------------------------------------------------------------------------
def test_replay_proportion_is_the_ratio_of_the_new_set():
    new, history = records("new", 200), records("old", 1000)
    mixed, info = mix_with_replay(new, history, 0.1, seed=0)
    assert info["n_new"] == 200 and info["n_replay"] == 20 and len(mixed) == 220
    assert info["replay_ratio_used"] == pytest.approx(0.1)
    assert info["replay_fraction"] == pytest.approx(20 / 220)
    assert mixed[:200] == new and all(r["id"].startswith("old/") for r in mixed[200:])
    assert mix_with_replay(new, history, 0.1, seed=0)[0] == mixed  # seeded: the same set again
    assert mix_with_replay(new, history, 0.1, seed=1)[0] != mixed
    assert replay_count(200, 0.0, 1000) == 0 and replay_count(200, 1.0, 1000) == 200
    assert replay_count(15, 0.1, 1000) == 2  # 1.5 rounds half up
    short, info = mix_with_replay(new, records("old", 7), 0.1, seed=0)  # history too small: all of it, once
    assert info["n_replay"] == 7 and info["replay_ratio_used"] == pytest.approx(7 / 200)


@settings(max_examples=60, deadline=None)
@given(
    n_new=st.integers(0, 40),
    n_old=st.integers(0, 60),
    overlap=st.integers(0, 10),
    repeats=st.integers(0, 10),
    ratio=st.floats(0, 1),
    seed=st.integers(0, 2**31),
)
def test_replay_never_duplicates_a_record(n_new, n_old, overlap, repeats, ratio, seed):
    new = records("x", n_new)
    old = records("x", n_old)  # ids x/0.. overlap with the new set's ids
    history = old + old[:repeats] + new[:overlap]  # repeats inside the history too
    mixed, info = mix_with_replay(new, history, ratio, seed)
    ids = [r["id"] for r in mixed]
    assert len(ids) == len(set(ids))
    available = {r["id"] for r in old} - {r["id"] for r in new}
    assert info["n_replay"] == min(math.floor(ratio * n_new + 0.5), len(available))
    replay = sample_replay(history, n_new, ratio, seed)
    assert len({r["id"] for r in replay}) == len(replay)


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan"), "0.1", True])
def test_replay_ratio_outside_unit_interval_is_refused(ratio):
    with pytest.raises(ValueError, match="replay_ratio"):
        mix_with_replay(records("n", 4), records("o", 4), ratio, seed=0)
    with pytest.raises(ValueError, match="replay_ratio"):
        IterativeArguments(replay_ratio=ratio)


# ---- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"iterations": 0}, "iterations: must be an integer >= 1"),
        ({"iterations": -1}, "iterations: must be an integer >= 1"),
        ({"arms": "iterative,ppo"}, "arms: unknown arm 'ppo'"),
        ({"arms": "frozen,frozen"}, "arms: 'frozen,frozen' names an item twice"),
        ({"arms": "iterative,"}, "arms: expected a comma-separated list without empty items"),
        ({"seeds": "0,x"}, "seeds: 'x' is not an integer"),
        ({"seeds": "-1"}, "seeds: must be >= 0"),
        ({"workers": 0}, "workers: must be an integer >= 1"),
        ({"rm_init": "random"}, "rm_init: unknown value 'random'"),
        ({"reward_model_type": "pairwise"}, "reward_model_type: unknown value 'pairwise'"),
        ({"collapse_guard_margin": 0.0}, "collapse_guard_margin: must be > 0"),
        ({"collapse_guard_margin": 0.1, "log_verifier_reward": False}, "the guard watches the verifier reward"),
        ({"rm_heldout_prompts": -1}, "rm_heldout_prompts: must be an integer >= 0"),
        ({"train_offset": -5}, r"train_offset: must be in \[0, inf\)"),  # TaskFields' check
        ({"rm_initial_epochs": 0.0}, "rm_initial_epochs: must be > 0"),
        ({"train_size": 0}, r"train_size: must be in \[1, inf\)"),  # TaskFields' check, as in scripts/train.py
    ],
)
def test_bad_iterative_arguments_are_user_errors(overrides, message):
    with pytest.raises(UserError, match=message):
        IterativeArguments(**overrides)


def test_iterative_arguments_take_the_task_fields_of_task_fields():
    from grpo_ext.script_args import TaskFields

    assert issubclass(IterativeArguments, TaskFields)
    names = [f.name for f in dataclasses.fields(IterativeArguments)]
    assert names[:3] == ["task", "task_kwargs", "train_size"] and names.count("task") == 1
    assert IterativeArguments(task_kwargs='{"max_operands": 2}').task_kwargs == {"max_operands": 2}


def test_arms_and_seeds_parse():
    assert parse_arms("verifier, iterative") == ["iterative", "verifier"]  # the report's fixed order
    assert parse_arms(["frozen"]) == ["frozen"]
    assert parse_seeds("3,0") == [3, 0] and parse_seeds(5) == [5]
    args = IterativeArguments(arms="iterative,frozen,verifier", seeds="0,1")
    assert args.arm_list == ["iterative", "frozen", "verifier"] and args.seed_list == [0, 1]


def test_task_without_a_verifier_is_refused():
    task = get_task("arithmetic")
    with pytest.raises(ValueError, match="has no verifier.*'answer'"):
        check_verifier(task, "outcome", Dataset.from_dict({"prompt": ["1+1="]}))

    class NoStepVerifier:
        name, step_separator, has_step_verifier = "plain", None, False

    with pytest.raises(ValueError, match="`process` needs a step verifier"):
        check_verifier(NoStepVerifier(), "process", Dataset.from_dict({"prompt": ["q"], "answer": ["a"]}))
    check_verifier(task, "process", task.load("train", 4))  # arithmetic has both


def test_cli_bad_input_gets_one_readable_line(python, root, tmp_path):
    # one subprocess (imports cost ~10 s on 2 shared cores); the other checks run in-process above
    proc = subprocess.run(
        [python, "scripts/iterative.py", "--config", "configs/iterative.yaml", "--output_dir", str(tmp_path)]
        + ["--arms", "iterative,ppo"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "arms: unknown arm 'ppo'" in proc.stderr and "Traceback" not in proc.stderr


# ---- the collapse guard ----------------------------------------------------------------------------------------
def test_first_collapse_is_the_first_value_beyond_the_margin():
    assert first_collapse([0.5, 0.45, 0.41, 0.39, 0.2], margin=0.1) == 3  # 0.5 - 0.39 = 0.11 > 0.1
    assert first_collapse([0.5, 0.4, 0.45, 0.6], margin=0.1) is None  # exactly 0.1 below is not beyond it
    assert first_collapse([], margin=0.1) is None
    with pytest.raises(ValueError, match="collapse_guard_margin"):
        first_collapse([1.0], margin=0)


def test_guard_stops_training_at_the_collapse():
    guard, state, control = CollapseGuard(0.1), TrainerState(), TrainerControl()
    for step, value in ((5, 0.6), (10, 0.55), (15, 0.52)):
        state.global_step = step
        control = guard.on_log(None, state, control, logs={"rewards/outcome_reward/mean": value, "loss": 0.1})
        assert not control.should_training_stop
    guard.on_log(None, state, control, logs={"loss": 0.2})  # a log without the verifier reward changes nothing
    state.global_step = 20
    control = guard.on_log(None, state, control, logs={"rewards/outcome_reward/mean": 0.45})
    assert control.should_training_stop and guard.stopped_at == 20 and guard.history == [0.6, 0.55, 0.52, 0.45]


# ---- logged rewards and the hacking gap ------------------------------------------------------------------------
def test_last_call_cache_scores_a_batch_once():
    calls = []

    def scorer(prompts, completions, **kwargs):
        calls.append(len(completions))
        return [[0.2, 0.8], [], [0.5]]

    cached = LastCallCache(scorer)
    args = {"prompts": ["a", "b", "c"], "completions": ["x", "y", "z"]}
    assert StepMean(cached, "m")(**args) == [0.5, None, 0.5]
    assert StepMean(cached, "lo", reduce=min, empty=0.0)(**args) == [0.2, 0.0, 0.5]
    assert cached(**args) == [[0.2, 0.8], [], [0.5]] and calls == [3]  # three readers, one call
    cached(prompts=["a", "b", "c"], completions=["x", "y", "w"])
    assert calls == [3, 3]  # other completions: scored again


def test_step_means_leave_out_the_steps_the_verifier_does_not_check():
    nan = float("nan")  # a step the verifier had nothing to check in: left out of the mean, as an empty row
    args = {"prompts": ["a", "b"], "completions": ["x", "y"]}
    verifier = lambda **kw: [[nan, 1.0, 0.0], [nan]]  # noqa: E731
    assert StepMean(verifier, "verifier_steps")(**args) == [0.5, None]
    # a PRM's mean over the steps the verifier checks: the hacking gap compares the two on the same steps
    prm = lambda **kw: [[0.9, 0.8, 0.1], [0.7]]  # noqa: E731
    assert StepMean(prm, "rm_steps", checked=verifier)(**args) == [pytest.approx(0.45), None]
    assert StepMean(prm, "rm_steps")(**args) == [pytest.approx(0.6), 0.7]  # without it: every step


def test_process_labels_leave_a_step_with_nothing_to_check_unlabelled():
    """The RM's data from the task's verifier (a chat prompt, as word_arithmetic's): a number-free line gets no label
    (None), not the free "right" the study's process arm learned to farm."""
    task = get_task("word_arithmetic")
    row = task.load("validation", 1)[0]
    assert isinstance(row["prompt"], list)  # chat messages
    samples = [["Step 1: Identify the problem\n#### 1000", f"#### {row['answer']}"]]
    records = label_samples(task, "process", [row["prompt"]], [row["answer"]], samples, "rm", 0)
    assert [(r["label"], r["step_labels"]) for r in records] == [(0, [None, 0.0]), (1, [1.0])]
    assert [r["id"] for r in records] == ["rm/0/0", "rm/0/1"]


def test_training_curve_and_gap_from_log_history():
    logs = [
        {"step": 5, "rewards/rm_steps/mean": 0.8, "rewards/verifier_steps/mean": 0.7, "kl": 0.01, "loss": 1.0},
        {"step": 10, "rewards/rm_outcome/mean": 0.6, "rewards/outcome_reward/mean": 0.4},
        {"step": 10, "train_runtime": 3.0},
    ]
    curve = training_curve(logs)
    assert curve == [
        {"step": 5, "rm_steps": 0.8, "verifier_steps": 0.7, "kl": 0.01},
        {"step": 10, "rm_outcome": 0.6, "verifier_outcome": 0.4},
    ]
    assert gap_of(curve[0]) == pytest.approx(0.1) and gap_of(curve[1]) == pytest.approx(0.2)
    assert gap_of({"step": 1, "verifier_outcome": 0.5}) is None
    history = [{"iteration": 0}, {"training_curve": curve, "grpo_steps": 10}, {"training_curve": curve[:1]}]
    assert training_gap_curve(history) == [(5, pytest.approx(0.1)), (10, pytest.approx(0.2)), (15, pytest.approx(0.1))]


def test_process_rm_arm_logs_rm_and_verifier_rewards_side_by_side(tmp_path):
    """The PRM's minimum and mean step scores train / log, the verifier's outcome and step mean log with weight 0."""
    from grpo_ext.experiments.iterative.rm_training import init_reward_model

    policy = make_tiny_policy(tmp_path / "policy")
    prm, tokenizer = init_reward_model("process", policy)
    prm.save_pretrained(tmp_path / "prm")
    tokenizer.save_pretrained(tmp_path / "prm")
    task = get_task("arithmetic", max_operands=3)
    args = GRPOExtConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, max_steps=1, report_to="none")
    args.model_init_kwargs = {"dtype": "float32"}
    # a process RM's step scores need a mode that reads them: refused, never silently switched
    with pytest.raises(UserError, match="advantage_mode: reward_model_type process feeds step scores.*`outcome`"):
        build_policy_trainer(policy, tmp_path / "prm", "process", task, task.load("train", 8), args, tmp_path / "o")
    args.advantage_mode = "process"
    trainer = build_policy_trainer(
        policy, tmp_path / "prm", "process", task, task.load("train", 8), args, tmp_path / "out"
    )
    assert trainer.reward_func_names == ["rm_outcome", "rm_steps", "outcome_reward", "verifier_steps"]
    assert trainer.reward_weights.tolist() == [1.0, 0.0, 0.0, 0.0] and trainer.args.advantage_mode == "process"
    prompts, completions = ["12+30-2="] * 2, ["12+30=42;42-2=40;#40", "12+30=43;43-2=41;#41"]
    direct = ProcessRewardModel(str(tmp_path / "prm"), ";")(prompts=prompts, completions=completions)
    kwargs = {"prompts": prompts, "completions": completions, "answer": ["40", "40"]}
    values = [f(**kwargs) for f in trainer.reward_funcs]
    assert values[0] == pytest.approx([min(s) for s in direct])
    assert values[1] == pytest.approx([np.mean(s) for s in direct])
    assert values[2] == [1.0, 0.0] and values[3] == pytest.approx([1.0, 1 / 3])  # 43 wrong; 43-2=41 right; #41 wrong
    verifier = build_policy_trainer(policy, "verifier", "process", task, task.load("train", 8), args, tmp_path / "v")
    assert verifier.reward_func_names == ["outcome_reward", "verifier_steps"]
    assert verifier.process_reward_funcs == [task.step_reward] and verifier.reward_weights.tolist() == [1.0, 0.0]


# ---- the summary: intervals and targets ------------------------------------------------------------------------
def _row(iteration: int, n_correct: list[int], k: int = 4) -> dict:
    return {
        "iteration": iteration,
        "pass@1": sum(n_correct) / (k * len(n_correct)),
        "test_n_correct": n_correct,
        f"test_maj@{k}": [float(c >= 2) for c in n_correct],
    }


def test_summary_intervals_and_targets_match_the_bootstrap_helpers():
    start = [0, 1, 2, 3, 4, 2, 1, 0]
    iterative_end = [1, 2, 3, 4, 4, 3, 2, 1]  # +1 right sample on 7 of 8 problems: +0.219 pass@1
    frozen_end = [0, 1, 2, 3, 4, 2, 1, 1]
    states = {
        "iterative": {0: {"history": [_row(0, start), _row(1, iterative_end)]}},
        "frozen": {0: {"history": [_row(0, start), _row(1, frozen_end)]}},
        "verifier": {0: {"history": [_row(0, start)]}},  # not finished: the means and targets take what is there
    }
    s = summarize(states, ["iterative", "frozen", "verifier"], [0], 4)
    end = s["arms"]["iterative"]["0"][1]["pass@1"]
    ci = bootstrap_mean_ci(np.array(iterative_end) / 4, n_resamples=10_000, seed=0)
    assert (end["estimate"], end["low"], end["high"]) == pytest.approx((ci.estimate, ci.low, ci.high))
    (target,) = s["targets"]
    gain = bootstrap_paired_difference_ci(np.array(iterative_end) / 4, np.array(start) / 4, n_resamples=10_000, seed=0)
    assert target["gain"]["estimate"] == pytest.approx(7 / 32) and target["gain"]["low"] == pytest.approx(gain.low)
    assert target["gain_target_met"] is True
    assert target["vs_frozen"]["estimate"] == pytest.approx(6 / 32)
    assert target["above_frozen_beyond_noise"] is (target["vs_frozen"]["low"] > 0)
    assert [m["iteration"] for m in s["means"]["verifier"]] == [0]
    assert s["means"]["iterative"][1]["pass@1"]["mean"] == pytest.approx(sum(iterative_end) / 32)


def test_every_arm_is_set_against_the_base_per_seed_and_over_the_seeds():
    base = [[0, 1, 2, 3], [1, 1, 2, 2]]
    verifier_end = [[1, 1, 3, 3], [1, 2, 2, 4]]  # +2/16 and +3/16
    states = {
        "verifier": {s: {"history": [_row(0, base[s]), _row(2, verifier_end[s])]} for s in (0, 1)},
        "frozen": {0: {"history": [_row(0, base[0]), _row(1, base[0])]}},  # seed 1 not started
    }
    s = summarize(states, ["verifier", "frozen"], [0, 1], 4)
    verifier = s["against_base"]["verifier"]
    assert verifier["iterations"] == [2, 2]
    assert [verifier["per_seed"][seed]["estimate"] for seed in ("0", "1")] == pytest.approx([2 / 16, 3 / 16])
    mean = bootstrap_paired_difference_ci(
        np.mean(verifier_end, axis=0) / 4, np.mean(base, axis=0) / 4, n_resamples=10_000, seed=0
    )
    assert verifier["mean"]["estimate"] == pytest.approx(5 / 32)
    assert (verifier["mean"]["low"], verifier["mean"]["high"]) == pytest.approx((mean.low, mean.high))
    frozen = s["against_base"]["frozen"]
    assert frozen["per_seed"]["0"]["estimate"] == 0 and "mean" not in frozen  # one seed of two: no mean
    text = render_arms(s, {}, 4)
    assert "| verifier | 2 | +0.125 [" in text and "| frozen | 1 | +0.000 [+0.000, +0.000] | – | – |" in text
