"""Iterative RL (issue 7): replay sampler, reference reset, resume after an interrupted iteration, bad input."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st
from trl import ModelConfig

from grpo_ext.config import GRPOExtConfig
from grpo_ext.iterative import IterativeArguments, build_policy_trainer, check_verifier, load_state, run_iterative
from grpo_ext.iterative import loop as iterative_loop
from grpo_ext.iterative.replay import mix_with_replay, replay_count, sample_replay
from grpo_ext.steps import step_texts
from grpo_ext.tasks import get_task
from tests.test_reward_models import make_tiny_policy


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
@pytest.mark.parametrize("iterations", [0, -1])
def test_zero_iterations_is_refused(iterations):
    with pytest.raises(ValueError, match="iterations: must be an integer >= 1"):
        IterativeArguments(iterations=iterations)


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
        [
            python,
            "scripts/iterative.py",
            "--config",
            "configs/iterative.yaml",
            "--output_dir",
            str(tmp_path),
            "--replay_ratio",
            "1.5",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "replay_ratio: must be in [0, 1]" in proc.stderr and "Traceback" not in proc.stderr


# ---- the loop: a quick variant, interrupted and resumed ----------------------------------------------------------
def quick_args(run_dir, policy_dir, iterations=2, **overrides):
    it_args = IterativeArguments(
        task="arithmetic",
        task_kwargs={"max_operands": 2},
        train_size=32,
        iterations=iterations,
        rm_prompts=4,
        rm_samples_per_prompt=2,
        rm_epochs=1,
        rm_batch_size=8,
        rm_eval_prompts=4,
        rm_eval_samples_per_prompt=2,
        eval_prompts=4,
        eval_samples=2,
        sampling_batch_size=4,
        report_dir=str(run_dir / "report"),
        **overrides,
    )
    training_args = GRPOExtConfig(
        output_dir=str(run_dir),
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


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A 2-iteration run killed in iteration 2 (while retraining the RM), then resumed with the same settings."""
    root = tmp_path_factory.mktemp("iterative")
    base = make_tiny_policy(root / "base")
    run_dir = root / "run"
    calls = {"rm": 0, "grpo": 0}
    real_train, real_build = iterative_loop.train_reward_model, iterative_loop.build_policy_trainer

    def failing_train(*args, **kwargs):
        calls["rm"] += 1
        if calls["rm"] == 3:  # iteration 0 and 1 trained the RM; iteration 2 dies here
            raise KeyboardInterrupt("killed")
        return real_train(*args, **kwargs)

    def counting_build(*args, **kwargs):
        calls["grpo"] += 1
        return real_build(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(iterative_loop, "train_reward_model", failing_train)
    mp.setattr(iterative_loop, "build_policy_trainer", counting_build)
    with pytest.raises(KeyboardInterrupt):
        run_iterative(*quick_args(run_dir, base))
    after_kill = load_state(run_dir)
    policy_1 = run_dir / "iter_1" / "policy" / "model.safetensors"
    stamp = policy_1.stat().st_mtime_ns
    leftover = (run_dir / "iter_2").exists()
    calls["grpo_before_resume"] = calls["grpo"]
    mp.setattr(iterative_loop, "train_reward_model", real_train)
    final = run_iterative(*quick_args(run_dir, base))
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
    assert final["iteration"] == 2 and [row["iteration"] for row in final["history"]] == [0, 1, 2]
    assert final["history"][:2] == after_kill["history"]  # finished iterations are not redone...
    assert (run_dir / "iter_1/policy/model.safetensors").stat().st_mtime_ns == r["policy_1_mtime"]
    assert r["calls"]["grpo"] - r["calls"]["grpo_before_resume"] == 1  # ...only iteration 2 trains the policy
    assert final["buffer"] == ["iter_0/rm_data.jsonl", "iter_1/rm_data.jsonl", "iter_2/rm_data.jsonl"]
    assert final["policy"] == final["reference"] == str(run_dir / "iter_2" / "policy")
    assert load_state(run_dir) == json.loads(json.dumps(final))
    assert not list(run_dir.rglob("*.tmp"))
    # a finished run started again does nothing but rewrite the report
    again = run_iterative(*quick_args(run_dir, r["base"]))
    assert again["history"] == final["history"]


def test_each_iteration_reports_rm_policy_and_replay(interrupted_run):
    rows = interrupted_run["final"]["history"]
    for row in rows:
        for key in (
            "rm_accuracy_before",
            "rm_accuracy_after",
            "rm_auc_before",
            "rm_auc_after",
            "pass@1",
            "maj@2",
            "replay_ratio_used",
            "n_new",
            "n_replay",
        ):
            assert key in row
        assert 0 <= row["rm_accuracy_after"] <= 1 and 0 <= row["pass@1"] <= 1
    assert [row["n_replay"] for row in rows] == [0, 1, 1]  # 10% of 8 new records, rounded
    assert rows[1]["reference_reset"] is True and rows[2]["reference_reset"] is True
    assert rows[2]["reference"] == rows[1]["policy"]
    report = interrupted_run["run_dir"] / "report"
    assert (report / "iterative.png").stat().st_size > 0
    assert "| 2 |" in (report / "report.md").read_text()
    assert len(json.loads((report / "report.json").read_text())["rows"]) == 3


def test_resume_with_other_settings_is_refused(interrupted_run):
    r = interrupted_run
    with pytest.raises(ValueError, match="holds a run with other settings \\(replay_ratio\\)"):
        run_iterative(*quick_args(r["run_dir"], r["base"], replay_ratio=0.5))


def _logps(trainer, model, ids):
    attention = torch.ones_like(ids)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, logits_to_keep=ids.shape[1] - 1)
    return logps


def test_reference_is_reset_to_the_current_policy(interrupted_run, tmp_path):
    r = interrupted_run
    state = r["final"]
    task = get_task("arithmetic", max_operands=2)
    _, training_args, _ = quick_args(tmp_path, r["base"])
    training_args.model_init_kwargs = {"dtype": "float32"}
    policy_1 = state["history"][1]["policy"]  # what iteration 2 started from
    trainer = build_policy_trainer(
        policy_1,
        state["reward_model"],
        "outcome",
        task,
        task.load("train", 8),
        training_args,
        tmp_path / "out",
        log_verifier_reward=False,
    )
    ids = torch.tensor([trainer.processing_class("12+34=12+34=46;#46")["input_ids"]])
    policy_logps, ref_logps = _logps(trainer, trainer.model, ids), _logps(trainer, trainer.ref_model, ids)
    assert torch.allclose(policy_logps, ref_logps, atol=1e-6, rtol=0)  # right after the reset: equal
    base = build_policy_trainer(
        r["base"],
        state["reward_model"],
        "outcome",
        task,
        task.load("train", 8),
        training_args,
        tmp_path / "out_base",
        log_verifier_reward=False,
    )
    base_logps = _logps(base, base.ref_model, ids)
    assert not torch.allclose(ref_logps, base_logps, atol=1e-4)  # the reference moved on from the base


def test_process_reward_model_loop_runs(tmp_path):
    base = make_tiny_policy(tmp_path / "base", seed=3)
    state = run_iterative(*quick_args(tmp_path / "run", base, iterations=1, reward_model_type="process"))
    rows = state["history"]
    assert [row["iteration"] for row in rows] == [0, 1] and rows[1]["reference_reset"] is True
    assert "rm_outcome_accuracy_after" in rows[1]
    assert (tmp_path / "run/iter_1/reward_model/config.json").is_file()
    data = [json.loads(line) for line in (tmp_path / "run/iter_1/rm_data.jsonl").read_text().splitlines()]
    assert data and all(len(r["step_labels"]) == len(step_texts(r["completion"], ";")) for r in data)
