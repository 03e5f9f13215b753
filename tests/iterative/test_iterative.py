"""Iterative RL (issues 7 and 16): replay sampler, arms, guard, logged rewards and hacking gap, summary and targets,
resume after an interrupted iteration, reference reset, bad input. The quick config end to end (with a real kill)
is tests/iterative/test_iterative_quick.py."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import TrainerControl, TrainerState
from trl import ModelConfig

from grpo_ext.config import GRPOExtConfig
from grpo_ext.errors import UserError
from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_paired_difference_ci
from grpo_ext.iterative import (
    CollapseGuard,
    Experiment,
    IterativeArguments,
    build_policy_trainer,
    check_verifier,
    first_collapse,
    load_state,
)
from grpo_ext.iterative import loop as iterative_loop
from grpo_ext.iterative.arms import parse_arms, parse_seeds
from grpo_ext.iterative.arms_report import render_arms
from grpo_ext.iterative.policy import LastCallCache, StepMean, gap_of, training_curve
from grpo_ext.iterative.replay import mix_with_replay, replay_count, sample_replay
from grpo_ext.iterative.summary import summarize, training_gap_curve
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
        ({"train_offset": -5}, "train_offset: must be >= 0"),
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


def test_a_process_rm_with_a_mode_that_reads_no_steps_is_refused_before_any_job(tmp_path):
    it_args, training_args, model_args = quick_args(tmp_path / "run", tmp_path / "no_model")
    training_args.advantage_mode = "outcome"
    with pytest.raises(UserError, match="reward_model_type process feeds step scores to the advantages, but `outcome`"):
        Experiment(it_args, training_args, model_args)


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
    from grpo_ext.iterative.rm_training import init_reward_model

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


# ---- the loop on a tiny model: three arms, two seeds, interrupted and resumed -----------------------------------
def quick_args(run_dir, policy_dir, iterations=2, **overrides):
    it_args = IterativeArguments(
        task="arithmetic",
        task_kwargs={"max_operands": 2},
        train_offset=10,
        iterations=iterations,
        rm_prompts=4,
        rm_samples_per_prompt=2,
        rm_epochs=1,
        rm_batch_size=8,
        rm_eval_prompts=4,
        rm_heldout_prompts=3,
        rm_eval_samples_per_prompt=2,
        eval_prompts=4,
        eval_samples=2,
        sampling_batch_size=4,
        report_dir=str(run_dir / "report"),
        **{"arms": "iterative,frozen,verifier", "seeds": "0,1", "train_size": 32, **overrides},
    )
    training_args = GRPOExtConfig(
        output_dir=str(run_dir),
        advantage_mode="process" if it_args.reward_model_type == "process" else "outcome",
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=2,
        learning_rate=1e-3,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=12,
        beta=0.04,
        top_k=0,
        activation_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    model_args = ModelConfig(model_name_or_path=str(policy_dir), dtype="float32")
    return it_args, training_args, model_args


def run_quick(run_dir, policy_dir, **overrides):
    return Experiment(*quick_args(run_dir, policy_dir, **overrides)).run()


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """Seed 0 killed in the iterative arm's iteration 2 (while retraining the RM), then resumed with the same
    settings; seed 1 runs after the resume."""
    root = tmp_path_factory.mktemp("iterative")
    base = make_tiny_policy(root / "base")
    run_dir = root / "run"
    calls = {"rm": 0, "grpo": 0}
    real_train, real_build = iterative_loop.train_rm, iterative_loop.build_policy_trainer

    def failing_train(*args, **kwargs):
        calls["rm"] += 1
        if calls["rm"] == 2:  # the iterative arm's iteration 1 retrained the RM; its iteration 2 dies here
            raise KeyboardInterrupt("killed")
        return real_train(*args, **kwargs)

    def counting_build(*args, **kwargs):
        calls["grpo"] += 1
        return real_build(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(iterative_loop, "train_rm", failing_train)
    mp.setattr(iterative_loop, "build_policy_trainer", counting_build)
    with pytest.raises(KeyboardInterrupt):
        run_quick(run_dir, base)
    after_kill = load_state(run_dir / "seed_0" / "iterative")
    policy_1 = run_dir / "seed_0" / "iterative" / "iter_1" / "policy" / "model.safetensors"
    stamp = policy_1.stat().st_mtime_ns
    leftover = (run_dir / "seed_0" / "iterative" / "iter_2").exists()
    calls["grpo_before_resume"] = calls["grpo"]
    mp.setattr(iterative_loop, "train_rm", real_train)
    final = run_quick(run_dir, base)
    mp.undo()
    return {
        "base": base,
        "run_dir": run_dir,
        "after_kill": after_kill,
        "final": final,
        "calls": calls,
        "policy_1_mtime": stamp,
        "leftover": leftover,
    }


def test_resume_after_an_interrupted_iteration(interrupted_run):
    r = interrupted_run
    after_kill, final, run_dir = r["after_kill"], r["final"], r["run_dir"]
    assert after_kill["iteration"] == 1 and r["leftover"]  # iteration 2 was half done when it died
    state = final["iterative"][0]
    assert state["iteration"] == 2 and [row["iteration"] for row in state["history"]] == [0, 1, 2]
    assert state["history"][:2] == after_kill["history"]  # finished iterations are not redone...
    assert (run_dir / "seed_0/iterative/iter_1/policy/model.safetensors").stat().st_mtime_ns == r["policy_1_mtime"]
    # ...only the iterative arm's iteration 2 of seed 0, then the other 2 + 2 + 2 x 3 GRPO runs
    assert r["calls"]["grpo"] - r["calls"]["grpo_before_resume"] == 1 + 2 + 2 + 6
    assert state["buffer"] == [
        "start/rm_data.jsonl",
        "iterative/iter_1/rm_data.jsonl",
        "iterative/iter_2/rm_data.jsonl",
    ]
    assert state["policy"] == state["reference"] == str(run_dir / "seed_0" / "iterative" / "iter_2" / "policy")
    assert load_state(run_dir / "seed_0" / "iterative") == json.loads(json.dumps(state))
    assert not list(run_dir.rglob("*.tmp"))
    again = run_quick(run_dir, r["base"])  # a finished run started again does nothing but rewrite the report
    assert again["iterative"][0]["history"] == state["history"]


def test_every_iteration_leaves_the_training_record_of_any_run(interrupted_run):
    """The policy an iteration trained holds the run status and the resolved config, as scripts/train.py's runs do:
    its card finds the record, and the model it started from is the previous policy."""
    from grpo_ext.checkpoints import read_run_status
    from grpo_ext.hub.training import trained_with

    state = interrupted_run["final"]["iterative"][0]
    policy = Path(state["history"][1]["policy"])
    status = read_run_status(policy)
    assert status["status"] == "complete" and status["global_step"] == 2
    summary = trained_with(policy)
    assert summary["task"] == "arithmetic" and summary["advantage_mode"] == "process"
    assert Path(policy, summary["base_model"]).resolve() == Path(state["history"][1]["reference"]).resolve()


def test_arms_share_iteration_0_and_differ_in_their_reward(interrupted_run):
    final, run_dir = interrupted_run["final"], interrupted_run["run_dir"]
    for seed in (0, 1):
        start = json.loads((run_dir / f"seed_{seed}" / "start" / "start_state.json").read_text())
        rows = {arm: final[arm][seed]["history"] for arm in ("iterative", "frozen", "verifier")}
        for arm, history in rows.items():
            assert history[0]["pass@1"] == start["row"]["pass@1"] and history[0]["arm"] == arm
            assert [row["iteration"] for row in history] == [0, 1, 2]
            assert all(row["reference_reset"] is True for row in history[1:])
            assert history[2]["reference"] == history[1]["policy"]
        assert final["frozen"][seed]["reward_model"] == start["reward_model"]  # RM_0 throughout
        assert final["iterative"][seed]["reward_model"].endswith("iterative/iter_2/reward_model")
        assert final["verifier"][seed]["reward_model"] is None
        iterative, frozen, verifier = rows["iterative"], rows["frozen"], rows["verifier"]
        assert [row["n_replay"] for row in iterative] == [0, 1, 1]  # 10% of 8 new records, rounded
        assert "rm_auc_after" in iterative[2] and "rm_auc_after" not in frozen[2] and "rm_accuracy_before" in frozen[2]
        assert "rm_accuracy_before" not in verifier[1] and "rm_steps" not in verifier[1]["training_curve"][0]
        point = iterative[1]["training_curve"][0]
        assert {"rm_steps", "verifier_steps", "rm_outcome", "verifier_outcome"} <= set(point)
        assert frozen[1]["test_n_correct"] == iterative[1]["test_n_correct"]  # same RM_0, same seeds: same policy
        assert set(iterative[1]["time"]) == {"grpo", "sampling", "evaluation", "reward_model"}


def test_the_report_shows_every_arm_and_the_targets(interrupted_run):
    report = interrupted_run["run_dir"] / "report"
    payload = json.loads((report / "report.json").read_text())
    assert set(payload["rows"]) == {"iterative", "frozen", "verifier"}
    assert set(payload["rows"]["frozen"]) == {"0", "1"} and "test_n_correct" not in payload["rows"]["frozen"]["0"][1]
    assert [t["seed"] for t in payload["summary"]["targets"]] == [0, 1]
    text = (report / "report.md").read_text()
    assert "## Targets (reported, not asserted)" in text and "| verifier | 1 |" in text
    assert (report / "iterative.png").stat().st_size > 0
    assert (interrupted_run["run_dir"] / "seed_1" / "frozen" / "report" / "report.md").is_file()  # one run's report


def test_resume_with_other_settings_is_refused(interrupted_run):
    r = interrupted_run
    with pytest.raises(UserError, match="holds a run with other settings \\(replay_ratio\\)"):
        run_quick(r["run_dir"], r["base"], replay_ratio=0.5)


def _logps(trainer, model, ids):
    attention = torch.ones_like(ids)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, logits_to_keep=ids.shape[1] - 1)
    return logps


def test_reference_is_reset_to_the_current_policy(interrupted_run, tmp_path):
    r = interrupted_run
    state = r["final"]["iterative"][0]
    task = get_task("arithmetic", max_operands=2)
    _, training_args, _ = quick_args(tmp_path, r["base"])
    training_args.model_init_kwargs = {"dtype": "float32"}
    policy_1 = state["history"][1]["policy"]  # what iteration 2 started from

    def trainer_from(policy, out):
        return build_policy_trainer(
            policy, state["reward_model"], "process", task, task.load("train", 8), training_args, tmp_path / out
        )

    trainer = trainer_from(policy_1, "out")
    ids = torch.tensor([trainer.processing_class("12+34=12+34=46;#46")["input_ids"]])
    policy_logps, ref_logps = _logps(trainer, trainer.model, ids), _logps(trainer, trainer.ref_model, ids)
    assert torch.allclose(policy_logps, ref_logps, atol=1e-6, rtol=0)  # right after the reset: equal
    base = trainer_from(r["base"], "out_base")
    base_logps = _logps(base, base.ref_model, ids)
    assert not torch.allclose(ref_logps, base_logps, atol=1e-4)  # the reference moved on from the base


def test_the_guard_stops_an_iteration_and_the_row_says_so(tmp_path, monkeypatch):
    """The guard is wired into the iteration's trainer: a verifier reward that falls (here: faked, 1.0 then 0.0,
    since a random tiny policy never solves anything) stops GRPO at that logged step, and the row records it."""
    from grpo_ext.iterative.guard import VERIFIER_METRIC

    class FakeDrop(CollapseGuard):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and VERIFIER_METRIC in logs:
                logs = {**logs, VERIFIER_METRIC: 1.0 if state.global_step < 2 else 0.0}
            return super().on_log(args, state, control, logs=logs, **kwargs)

    monkeypatch.setattr(iterative_loop, "CollapseGuard", FakeDrop)
    base = make_tiny_policy(tmp_path / "base")
    it_args, training_args, model_args = quick_args(
        tmp_path / "run", base, iterations=1, arms="frozen", seeds="0", collapse_guard_margin=0.5
    )
    training_args.max_steps = 5
    (row,) = Experiment(it_args, training_args, model_args).run()["frozen"][0]["history"][1:]
    assert row["guard_stopped_at"] == 2 and row["grpo_steps"] == 2
    assert [p["step"] for p in row["training_curve"]] == [1, 2]


def test_the_outcome_rm_stays_an_option(tmp_path):
    base = make_tiny_policy(tmp_path / "base", seed=3)
    final = run_quick(tmp_path / "run", base, iterations=1, reward_model_type="outcome", arms="iterative", seeds="0")
    row = final["iterative"][0]["history"][1]
    assert {"rm_auc_before", "rm_auc_after", "rm_heldout_auc_after"} <= set(row) and "rm_outcome_auc_after" not in row
    point = row["training_curve"][0]
    assert {"rm_outcome", "verifier_outcome", "verifier_steps"} <= set(point) and "rm_steps" not in point
    assert gap_of(point) == pytest.approx(point["rm_outcome"] - point["verifier_outcome"])  # outcome-level gap
    data = [json.loads(line) for line in (tmp_path / "run/seed_0/iterative/iter_1/rm_data.jsonl").open()]
    assert data and all("step_labels" not in r for r in data)


def test_each_iteration_trains_on_prompts_of_its_own(tmp_path):
    """No prompt twice in a run: iteration k's GRPO reads the k-th slice of the pool (2 steps x 1 prompt here)."""
    from grpo_ext.batching import prompts_drawn
    from grpo_ext.iterative.measure import Setting

    it_args, training_args, _ = quick_args(tmp_path / "run", tmp_path / "no_model")
    setting = Setting(it_args, training_args, seed=0)
    drawn = prompts_drawn(training_args)
    slices = [setting.iteration_prompts(k, drawn)["prompt"] for k in (1, 2)]
    assert drawn == 2 and slices == [setting.pool["prompt"][:2], setting.pool["prompt"][2:4]]


def test_a_pool_too_small_for_every_iterations_prompts_is_refused(tmp_path):
    it_args, training_args, model_args = quick_args(tmp_path / "run", tmp_path / "no_model", train_size=3)
    with pytest.raises(
        UserError,
        match=r"train_size: each of the 2 iterations trains on 2 prompts .* needs >= 4; .* gives 3 \(train_size 3",
    ):
        Experiment(it_args, training_args, model_args)


def test_a_pool_the_task_caps_below_the_iterations_prompts_is_refused_before_any_job(tmp_path):
    """A dataset of fixed size (a JSONL file, GSM8K) gives fewer rows than asked, or all it has without train_size:
    the check counts the pool loaded, not the size asked."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(3)))
    it_args, training_args, model_args = quick_args(tmp_path / "run", tmp_path / "no_model")
    it_args.task, it_args.task_kwargs, it_args.train_size = "jsonl", {"path": str(data)}, None
    it_args.train_offset = 0
    it_args.reward_model_type = "outcome"
    training_args.advantage_mode = "outcome"
    with pytest.raises(UserError, match=r"pool needs >= 4; the task's train split gives 3 \(train_size None"):
        Experiment(it_args, training_args, model_args)


def test_refill_is_refused_by_the_iterative_loop(tmp_path):
    it_args, training_args, model_args = quick_args(tmp_path / "run", tmp_path / "no_model")
    training_args.zero_std_groups = "refill"
    with pytest.raises(UserError, match="zero_std_groups: `refill` is not supported by the iterative loop"):
        Experiment(it_args, training_args, model_args)
