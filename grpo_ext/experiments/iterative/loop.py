"""One arm of one seed: iterations 1..N on top of the seed's shared iteration 0, its state saved after each.

Iteration k (see :mod:`grpo_ext.experiments.iterative.arms` for what the arms reward the policy with):

(a) GRPO from policy_{k-1}, which is also the reference (the reset), against the arm's reward source -> policy_k;
    the RM's and the verifier's rewards on the training samples are logged side by side (the hacking gap), and the
    collapse guard, when on, may stop it early;
(b) fresh samples of policy_k on pool and held-out prompts: the RM it was trained against, measured on them;
(c) ``iterative`` only: RM data = fresh samples of policy_k on pool prompts + a replay of ``replay_ratio`` x (their
    number) historical records; RM_{k-1} trained on it -> RM_k, measured again on the (b) samples;
(d) policy_k's pass@1 / maj@k on the test problems.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from trl import ModelConfig

from grpo_ext.batching import prompts_drawn
from grpo_ext.experiments.iterative.arms import RETRAINS_RM, USES_RM
from grpo_ext.experiments.iterative.guard import CollapseGuard
from grpo_ext.experiments.iterative.iteration_zero import RM_DATA_FILE, Clock, load_policy, train_rm
from grpo_ext.experiments.iterative.measure import Setting, rm_metrics
from grpo_ext.experiments.iterative.policy import (
    RewardLog,
    build_policy_trainer,
    is_lora_policy,
    merge_adapter,
    policy_model_args,
    reference_matches_policy,
    training_curve,
    training_reward_summary,
)
from grpo_ext.experiments.iterative.replay import mix_with_replay
from grpo_ext.experiments.iterative.report import write_report
from grpo_ext.experiments.iterative.rm_training import load_reward_model
from grpo_ext.experiments.iterative.state import (
    iteration_dir,
    read_records,
    replace_folder,
    resume_or_start,
    save_state,
    write_records,
)
from grpo_ext.run_record import training_run
from grpo_ext.sampler.sampling import derive_seed

__all__ = ["ArmRun"]


class ArmRun:
    """``arm`` of ``setting.seed`` in ``seed_dir/<arm>``, resumed after its last finished iteration."""

    def __init__(
        self, setting: Setting, training_args, arm: str, base: str, seed_dir: Path, start: dict, config, model_args=None
    ):
        self.setting, self.args, self.arm = setting, setting.args, arm
        self.model_args = model_args
        self.training_args, self.base, self.seed_dir, self.start = training_args, base, seed_dir, start
        self.run_dir = seed_dir / arm
        self.config = {**config, "arm": arm}

    def _initial_state(self) -> dict:
        return {
            "iteration": 0,
            "arm": self.arm,
            "seed": self.setting.seed,
            "policy": self.base,
            "reference": None,
            "reward_model": self.start["reward_model"] if self.arm in USES_RM else None,
            "buffer": list(self.start["buffer"]),
            "history": [{**self.start["row"], "arm": self.arm, "seed": self.setting.seed}],
        }

    # ---- (a) the policy ----------------------------------------------------------------------------------------
    def _train_policy(self, state: dict, folder: Path, k: int) -> tuple[str, dict]:
        source = state["reward_model"] if self.arm in USES_RM else "verifier"
        guard = CollapseGuard(self.args.collapse_guard_margin) if self.args.collapse_guard_margin else None
        work = folder / "policy.tmp"
        trainer = build_policy_trainer(
            state["policy"],
            source,
            self.setting.reward_model_type,
            self.setting.task,
            self.setting.iteration_prompts(k, prompts_drawn(self.training_args)),
            self.training_args,
            work,
            log_verifier_reward=self.args.log_verifier_reward,
            seed=derive_seed(self.setting.seed, "grpo", k) % 2**31,
            callbacks=[guard] if guard else None,
            model_args=self.model_args,
            rm_dtype=self.args.rm_dtype,
        )
        RewardLog(f"[iterative] seed {self.setting.seed}, {self.arm}, iteration {k}").install(trainer)
        reference_reset = reference_matches_policy(trainer)
        if reference_reset is False:
            raise RuntimeError("the reference model does not start from the current policy")
        # the run's record (status, resolved config) in the policy's folder, as every runner writes it; the model
        # this iteration started from is the previous policy, not the experiment's base
        lora = is_lora_policy(self.model_args)
        model_config = policy_model_args(self.model_args, state["policy"]) if lora else None
        with training_run(trainer, self.args, model_config or ModelConfig(model_name_or_path=str(state["policy"]))):
            trainer.train()
            # an iteration whose reward source scored nothing learned nothing: it fails (recorded), as train.py's run
            trainer.check_rewards_were_scored()
            trainer.save_model(str(work))
            trainer.processing_class.save_pretrained(str(work))
        curve = training_curve(trainer.state.log_history)
        curve_steps = trainer.state.global_step
        merge = None
        if lora:
            # the next iteration's policy (and reference) is a plain folder: this adapter merged into its base; the
            # adapter stays beside it with the run's record (a few MB)
            del trainer
            gc.collect()
            trainer = None
            replace_folder(work, folder / "adapter")
            merge = merge_adapter(folder / "adapter", work, state["policy"], self.model_args.dtype)
        info = {
            "reference": state["policy"],
            "reference_reset": reference_reset,
            "grpo_steps": int(curve_steps),
            "guard_stopped_at": guard.stopped_at if guard else None,
            "training_curve": curve,
            **training_reward_summary(curve),
            **({"merge": merge} if merge else {}),
        }
        del trainer
        gc.collect()
        policy_dir = folder / "policy"
        replace_folder(work, policy_dir)
        return str(policy_dir), info

    def _history(self, state: dict) -> list[dict]:
        """Every earlier iteration's RM records (what the replay draws from)."""
        return [record for name in state["buffer"] for record in read_records(self.seed_dir / name)]

    # ---- one iteration -----------------------------------------------------------------------------------------
    def run_iteration(self, state: dict, k: int) -> dict:
        """Iteration ``k`` on top of ``state`` (iteration k - 1 finished); returns the state after it."""
        start = time.perf_counter()
        s, rm_type, sep = self.setting, self.setting.reward_model_type, self.setting.separator
        folder = iteration_dir(self.run_dir, k)
        folder.mkdir(parents=True, exist_ok=True)
        row = {"iteration": k, "arm": self.arm, "seed": s.seed}
        # the replay's history read before anything trains: a record it cannot read fails here, not after (a)
        history = self._history(state) if self.arm in RETRAINS_RM else None
        clock = Clock()
        policy, info = self._train_policy(state, folder, k)  # (a)
        row.update(policy=policy, **info)
        clock.lap("grpo")
        model, tokenizer = load_policy(policy, s.policy_dtype)
        eval_sets = s.eval_sets(model, tokenizer, k, f"{self.arm}/it{k}")  # (b)
        row["policy_sample_accuracy"] = sum(r["label"] for r in eval_sets["pool"]) / len(eval_sets["pool"])
        new, reward_model = None, state["reward_model"]
        if self.arm in RETRAINS_RM:
            new = s.rm_data(model, tokenizer, k, f"{self.arm}/it{k}/train")
        clock.lap("sampling")
        row.update(s.evaluate_policy(model, tokenizer, policy, self.run_dir / "eval_samples.jsonl"))  # (d)
        clock.lap("evaluation")
        del model
        if self.arm in USES_RM:
            rm, rm_tokenizer = load_reward_model(rm_type, state["reward_model"], self.args.rm_dtype)
            row.update(rm_metrics(rm_type, rm, rm_tokenizer, eval_sets, sep, "before"))
            if new is not None:  # (c)
                records, replay = mix_with_replay(new, history, self.args.replay_ratio, seed=s.seed + k)
                rm_dir = folder / "reward_model"
                fit = train_rm(s, rm, rm_tokenizer, records, rm_dir, self.args.rm_epochs, s.seed + k)
                row.update(rm_metrics(rm_type, rm, rm_tokenizer, eval_sets, sep, "after"))
                row.update(**replay, rm_train_loss=fit["train_loss"], rm_train_steps=fit["steps"])
                write_records(folder / RM_DATA_FILE, new)
                reward_model = str(rm_dir)
            del rm
            clock.lap("reward_model")
        row["time"] = clock.laps
        row["seconds"] = round(time.perf_counter() - start, 1)
        buffer = state["buffer"] + ([f"{self.arm}/{folder.name}/{RM_DATA_FILE}"] if new is not None else [])
        state.update(
            iteration=k,
            policy=policy,
            reward_model=reward_model,
            reference=policy,  # the next iteration's reference
            buffer=buffer,
            history=[*state["history"], row],
        )
        return state

    def run(self) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = resume_or_start(self.run_dir, self.config, self._initial_state(), self.args.resume)
        for k in range(state["iteration"] + 1, self.args.iterations + 1):
            print(f"[iterative] seed {self.setting.seed}, {self.arm}: iteration {k}/{self.args.iterations}", flush=True)
            state = self.run_iteration(state, k)
            save_state(self.run_dir, state)
            write_report(state, self.run_dir / "report", self.args.eval_samples)
        return state
