"""The iterative loop: one body per iteration, its state saved when the iteration is done."""

from __future__ import annotations

import gc
import random
import time
from dataclasses import asdict
from pathlib import Path

from grpo_ext.advantages import get_gradient_coefficient
from grpo_ext.iterative.args import IterativeArguments
from grpo_ext.iterative.labels import check_verifier, label_samples
from grpo_ext.iterative.policy import build_policy_trainer, reference_matches_policy, training_reward_summary
from grpo_ext.iterative.replay import mix_with_replay
from grpo_ext.iterative.report import write_report
from grpo_ext.iterative.rm_training import (
    evaluate_reward_model,
    init_reward_model,
    load_reward_model,
    train_reward_model,
)
from grpo_ext.iterative.state import (
    iteration_dir,
    read_records,
    replace_folder,
    resume_or_start,
    save_state,
    write_records,
)

__all__ = ["IterativeLoop", "run_iterative"]

RM_DATA_FILE = "rm_data.jsonl"


class IterativeLoop:
    """Iterative RL on one task: a base policy, a reward model retrained on each new policy's samples.

    Iteration 0 has no GRPO step: it samples the base policy and trains the initial RM (initialised from the
    base policy's weights). Every iteration k >= 1 first trains policy_k from policy_{k-1} against RM_{k-1}.
    """

    def __init__(self, it_args: IterativeArguments, training_args, model_args):
        from grpo_ext.modeling import policy_init
        from grpo_ext.tasks import get_task
        from grpo_ext.tasks.base import require_prompt_column

        if (
            getattr(model_args, "use_peft", False)
            or getattr(model_args, "load_in_4bit", False)
            or getattr(model_args, "load_in_8bit", False)
        ):
            raise ValueError(
                "use_peft/load_in_4bit/load_in_8bit: the iterative loop resets the reference to the full policy "
                "saved after each iteration; run it in full precision"
            )
        self.args = it_args
        self.task = get_task(it_args.task, **it_args.task_kwargs)
        self.reward_model_type = it_args.reward_model_type
        self.train_dataset = require_prompt_column(
            self.task.load("train", it_args.train_size), f"task {self.task.name!r}"
        )
        check_verifier(self.task, self.reward_model_type, self.train_dataset)
        if training_args.step_separator is None and self.task.step_separator is not None:
            training_args.step_separator = self.task.step_separator
        self.separator = training_args.step_separator
        mode = training_args.advantage_mode
        if self.reward_model_type == "outcome" and get_gradient_coefficient(mode).needs_step_rewards:
            raise ValueError(
                f"advantage_mode: `{mode}` needs step rewards, which only reward_model_type: process gives in the "
                "iterative loop"
            )
        base_id, _, _ = policy_init(model_args, training_args)  # also sets the trainer's model_init_kwargs
        if not Path(base_id).is_dir():
            raise FileNotFoundError(f"model_name_or_path: the iterative loop needs a local model folder, got {base_id}")
        self.base = str(Path(base_id).resolve())
        self.training_args = training_args
        self.run_dir = Path(training_args.output_dir).resolve()
        self.report_dir = Path(it_args.report_dir).resolve() if it_args.report_dir else self.run_dir / "report"
        self.seed = int(training_args.seed)
        self.max_new_tokens = int(training_args.max_completion_length)
        self.temperature = float(training_args.temperature)
        test = self.task.load("test", max(it_args.rm_eval_prompts, it_args.eval_prompts))
        self.rm_eval_set = test.select(range(min(it_args.rm_eval_prompts, len(test))))
        self.eval_problems = [
            {"problem_id": str(i), "prompt": row["prompt"], "answer": row["answer"]}
            for i, row in enumerate(test.select(range(min(it_args.eval_prompts, len(test)))))
        ]

    def config_snapshot(self) -> dict:
        """The settings a resumed run must share with the saved one (``iterations`` may grow)."""
        snapshot = {k: v for k, v in asdict(self.args).items() if k not in ("resume", "report_dir", "iterations")}
        snapshot.update(base=self.base, max_steps=self.training_args.max_steps, seed=self.seed)
        return snapshot

    # ---- the policy --------------------------------------------------------------------------------------------
    def _train_policy(self, state: dict, folder: Path, k: int) -> tuple[str, bool | None, dict]:
        """GRPO against RM_{k-1}, policy and reference both starting from policy_{k-1}.

        Returns policy_k's folder, whether the reference started as the policy, and the training rewards.
        """
        work = folder / "policy.tmp"
        trainer = build_policy_trainer(
            state["policy"],
            state["reward_model"],
            self.reward_model_type,
            self.task,
            self.train_dataset,
            self.training_args,
            work,
            log_verifier_reward=self.args.log_verifier_reward,
            seed=self.seed + k,
        )
        reference_reset = reference_matches_policy(trainer)
        if reference_reset is False:
            raise RuntimeError("the reference model does not start from the current policy")
        trainer.train()
        trainer.save_model(str(work))
        trainer.processing_class.save_pretrained(str(work))
        summary = training_reward_summary(trainer.state.log_history, trainer.reward_func_names[0])
        del trainer
        gc.collect()
        policy_dir = folder / "policy"
        replace_folder(work, policy_dir)
        return str(policy_dir), reference_reset, summary

    def _load_policy(self, path: str):
        from grpo_ext.evaluation.backends import load_model_and_tokenizer

        return load_model_and_tokenizer(path, device="cpu")

    def _sample(self, model, tokenizer, prompts, n: int, seed: int):
        from grpo_ext.evaluation.sampling import sample_completions

        return sample_completions(
            model,
            tokenizer,
            list(prompts),
            n,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.args.sampling_batch_size,
            seed=seed,
            progress=False,
        )

    def _policy_samples(self, model, tokenizer, k: int) -> tuple[list[dict], list[dict]]:
        """Verifier-labelled RM training data (train prompts) and held-out RM evaluation data (test prompts)."""
        n_prompts = min(self.args.rm_prompts, len(self.train_dataset))
        rng = random.Random(f"{self.seed}/rm-prompts/{k}")
        rows = self.train_dataset.select(sorted(rng.sample(range(len(self.train_dataset)), n_prompts)))
        held = self.rm_eval_set
        completions = self._sample(
            model, tokenizer, rows["prompt"], self.args.rm_samples_per_prompt, self.seed * 1000 + 2 * k
        )
        held_completions = self._sample(
            model, tokenizer, held["prompt"], self.args.rm_eval_samples_per_prompt, self.seed * 1000 + 2 * k + 1
        )
        new = label_samples(
            self.task, self.reward_model_type, rows["prompt"], rows["answer"], completions, f"it{k}/train", k
        )
        held_out = label_samples(
            self.task, self.reward_model_type, held["prompt"], held["answer"], held_completions, f"it{k}/heldout", k
        )
        return new, held_out

    def _evaluate_policy(self, model, tokenizer, path: str) -> dict:
        """pass@1, pass@k and maj@k on the test problems, through the evaluation harness (cached)."""
        from grpo_ext.evaluation.backends import TransformersBackend, model_fingerprint
        from grpo_ext.evaluation.harness import evaluate_model
        from grpo_ext.evaluation.sampling import SamplingParams

        k = self.args.eval_samples
        params = SamplingParams(
            n=k,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
            batch_size=self.args.sampling_batch_size,
        )
        backend = TransformersBackend(model, tokenizer, name=path, fingerprint=model_fingerprint(path))
        result = evaluate_model(
            backend,
            self.task,
            params,
            sorted({1, k}),
            problems=self.eval_problems,
            cache_path=self.run_dir / "eval_samples.jsonl",
            progress=False,
        )
        return {
            "pass@1": result["pass@k"]["1"],
            f"pass@{k}": result["pass@k"][str(k)],
            f"maj@{k}": result["maj@k"][str(k)],
        }

    # ---- the reward model --------------------------------------------------------------------------------------
    def _rm_metrics(self, model, tokenizer, records, when: str) -> dict:
        metrics = evaluate_reward_model(self.reward_model_type, model, tokenizer, records, self.separator)
        out = {
            f"rm_accuracy_{when}": metrics["accuracy"],
            f"rm_auc_{when}": metrics["auc"],
            f"rm_mean_score_{when}": metrics.get("mean_score"),
            "heldout_positive_rate": metrics["positive_rate"],
        }
        if "outcome_accuracy" in metrics:  # a process RM's verdict on whole completions
            out[f"rm_outcome_accuracy_{when}"] = metrics["outcome_accuracy"]
        return out

    def _history(self, state: dict) -> list[dict]:
        """Every earlier iteration's RM records (what the replay draws from)."""
        return [record for name in state["buffer"] for record in read_records(self.run_dir / name)]

    # ---- one iteration -----------------------------------------------------------------------------------------
    def run_iteration(self, state: dict, k: int) -> dict:
        """Iteration ``k`` on top of ``state`` (iteration k - 1 finished); returns the state after it.

        (a) k >= 1: GRPO of policy_{k-1} against RM_{k-1} -> policy_k (iteration 0 keeps the base policy);
        (b) fresh samples of the policy, labelled by the verifier; its pass@1 / maj@k;
        (c) RM data = the new samples + a replay of ``replay_ratio`` x (new set size) historical records;
        (d) RM_{k-1} (iteration 0: a new RM on the base policy's weights) trained on it -> RM_k, its accuracy on
            held-out samples reported before and after.
        """
        start = time.perf_counter()
        folder = iteration_dir(self.run_dir, k)
        folder.mkdir(parents=True, exist_ok=True)
        policy, training_rewards = self.base, {}
        row = {"iteration": k, "policy": policy}
        if k > 0:  # (a)
            policy, reference_reset, training_rewards = self._train_policy(state, folder, k)
            row.update(policy=policy, reference=state["policy"], reference_reset=reference_reset)
        # (b)
        model, tokenizer = self._load_policy(policy)
        new, held_out = self._policy_samples(model, tokenizer, k)
        policy_eval = self._evaluate_policy(model, tokenizer, policy)
        del model
        # (c)
        records, replay = mix_with_replay(new, self._history(state), self.args.replay_ratio, seed=self.seed + k)
        # (d)
        if state["reward_model"] is None:
            rm, rm_tokenizer = init_reward_model(self.reward_model_type, self.base)
        else:
            rm, rm_tokenizer = load_reward_model(self.reward_model_type, state["reward_model"])
        row.update(self._rm_metrics(rm, rm_tokenizer, held_out, "before"))
        rm_dir = folder / "reward_model"
        rm_fit = train_reward_model(
            self.reward_model_type,
            rm,
            rm_tokenizer,
            records,
            rm_dir,
            separator=self.separator,
            epochs=self.args.rm_epochs,
            learning_rate=self.args.rm_learning_rate,
            batch_size=self.args.rm_batch_size,
            seed=self.seed + k,
        )
        row.update(self._rm_metrics(rm, rm_tokenizer, held_out, "after"))
        row.update(policy_eval)
        row.update(
            policy_sample_accuracy=sum(r["label"] for r in new) / len(new),
            **replay,
            **training_rewards,
            rm_train_loss=rm_fit["train_loss"],
            seconds=round(time.perf_counter() - start, 1),
        )
        write_records(folder / RM_DATA_FILE, new)
        state.update(
            iteration=k,
            policy=policy,
            reward_model=str(rm_dir),
            reference=policy if k > 0 else None,  # the next iteration's reference (none before any GRPO)
            buffer=[*state["buffer"], f"{folder.name}/{RM_DATA_FILE}"],
            history=[*state["history"], row],
        )
        return state

    def run(self) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = resume_or_start(self.run_dir, self.config_snapshot(), self.base, self.args.resume)
        for k in range(state["iteration"] + 1, self.args.iterations + 1):
            if k == 0:
                print("[iterative] iteration 0: initial reward model on the base policy's samples")
            else:
                print(f"[iterative] iteration {k}/{self.args.iterations}")
            state = self.run_iteration(state, k)
            save_state(self.run_dir, state)
            write_report(state, self.report_dir, self.args.eval_samples)
        write_report(state, self.report_dir, self.args.eval_samples)
        return state


def run_iterative(it_args: IterativeArguments, training_args, model_args) -> dict:
    """Run (or resume) the loop; returns the final state (its ``history`` holds one report row per iteration)."""
    return IterativeLoop(it_args, training_args, model_args).run()
