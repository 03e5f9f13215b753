"""The iterative loop on a tiny model (grpo_ext.experiments.iterative.loop): three arms, two seeds, interrupted and
resumed; the reference reset, the guard's stop, the outcome RM, prompts per iteration and the pool checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trl import ModelConfig

from grpo_ext.errors import UserError
from grpo_ext.experiments.iterative import (
    CollapseGuard,
    Experiment,
    IterativeArguments,
    build_policy_trainer,
    load_state,
)
from grpo_ext.experiments.iterative import loop as iterative_loop
from grpo_ext.experiments.iterative.policy import gap_of
from grpo_ext.tasks import get_task
from tests.rewards.test_reward_models import make_tiny_policy
from tests.trainer_utils import tiny_args


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
    training_args = tiny_args(
        tmp_path=run_dir,
        advantage_mode="process" if it_args.reward_model_type == "process" else "outcome",
        per_device_train_batch_size=4,
        max_completion_length=12,
        beta=0.04,
        step_separator=None,  # the task's, filled in by the loop's assembly
    )
    model_args = ModelConfig(model_name_or_path=str(policy_dir), dtype="float32")
    return it_args, training_args, model_args


def test_a_process_rm_with_a_mode_that_reads_no_steps_is_refused_before_any_job(tmp_path):
    it_args, training_args, model_args = quick_args(tmp_path / "run", tmp_path / "no_model")
    training_args.advantage_mode = "outcome"
    with pytest.raises(UserError, match="reward_model_type process feeds step scores to the advantages, but `outcome`"):
        Experiment(it_args, training_args, model_args)


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
    from grpo_ext.experiments.iterative.guard import VERIFIER_METRIC

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
    from grpo_ext.experiments.iterative.measure import Setting

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
