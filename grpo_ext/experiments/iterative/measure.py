"""What an iteration measures: fresh policy samples, the RM against the verifier on them, the policy's pass@1/maj@k.

:class:`Setting` holds one seed's fixed inputs (the task, the RL prompt pool, the RM measurement prompts, the test
problems); its methods draw and score, each draw seeded by ``(seed, what, iteration)`` so every arm of a seed sees
the same prompts and sampling seeds at the same iteration.
"""

from __future__ import annotations

import random
from pathlib import Path

from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_K
from grpo_ext.experiments.iterative.labels import check_verifier, label_samples
from grpo_ext.experiments.iterative.rm_training import evaluate_reward_model
from grpo_ext.sampler.sampling import derive_seed

__all__ = ["RM_EVAL_SETS", "Setting", "compact_result", "rm_metrics"]

#: The RM's measurement sets: fresh samples on pool prompts (what GRPO is rewarded on), on held-out prompts.
RM_EVAL_SETS = ("pool", "heldout")


def rm_metrics(reward_model_type: str, model, tokenizer, eval_sets: dict, separator, when: str) -> dict:
    """The RM against the verifier on each measurement set: ``rm_auc_<when>`` / ``rm_accuracy_<when>`` (pool),
    ``rm_heldout_auc_<when>`` / ... (held-out); for a process RM these are per step, and ``rm_outcome_auc_<when>``
    is its minimum step score against the outcome."""
    out = {}
    for name, records in eval_sets.items():
        prefix = "rm" if name == "pool" else f"rm_{name}"
        m = evaluate_reward_model(reward_model_type, model, tokenizer, records, separator)
        out.update({f"{prefix}_auc_{when}": m["auc"], f"{prefix}_accuracy_{when}": m["accuracy"]})
        out[f"{prefix}_mean_score_{when}"] = m.get("mean_score")
        if "outcome_auc" in m:
            out[f"{prefix}_outcome_auc_{when}"] = m["outcome_auc"]
        out[f"{prefix}_positive_rate"] = m["positive_rate"]
    return out


#: What a row keeps of each test problem's harness record: enough for the study's paired intervals, its per-slice
#: expectations and the harness's anatomy (grpo_ext.experiments.study.stats / expectations, evaluation.failures).
_PROBLEM_FIELDS = ("problem_id", "attributes", "n_correct", "n_extracted", "n_strict", MAJ_AT_K.name, "anatomy")


def compact_result(result: dict) -> dict:
    """A harness result as the study's statistics read it (``n`` and each problem's record), without the prompts,
    answers and answer lists: a row of the loop's state stays small."""
    per_problem = [{key: p[key] for key in _PROBLEM_FIELDS if key in p} for p in result["per_problem"]]
    return {"n": int(result["n"]), "per_problem": per_problem}


class Setting:
    """One seed's task, prompts and sampling settings (see the module docstring)."""

    def __init__(self, it_args, training_args, seed: int, policy_dtype: str | None = None):
        from grpo_ext.tasks import get_task
        from grpo_ext.tasks.base import require_prompt_column

        self.args, self.seed = it_args, seed
        # the dtype the policy is sampled in (None: float32); a LoRA policy on a bf16 base is sampled as it trains
        self.policy_dtype = policy_dtype
        self.task = get_task(it_args.task, **it_args.task_kwargs)
        self.reward_model_type = it_args.reward_model_type
        self.pool = require_prompt_column(it_args.train_prompts(self.task), f"task {self.task.name!r}")
        check_verifier(self.task, self.reward_model_type, self.pool)
        self.separator = training_args.step_separator or self.task.step_separator
        self.max_new_tokens = int(training_args.max_completion_length)
        self.temperature = float(training_args.temperature)
        # the samples the RM is trained and measured on, and the test's, end where GRPO's samples end
        self.stop = tuple(getattr(training_args, "stop_strings", None) or ())
        n_eval = it_args.rm_eval_prompts
        rng = random.Random(f"{seed}/rm-eval-prompts")
        self.pool_eval = self.pool.select(sorted(rng.sample(range(len(self.pool)), min(n_eval, len(self.pool)))))
        n_heldout = it_args.rm_heldout_prompts
        self.heldout_eval = self.task.load("validation", n_heldout) if n_heldout else None
        test = self.task.load("test", it_args.eval_prompts)
        self.eval_problems = [
            {"problem_id": str(i), "prompt": row["prompt"], "answer": row["answer"]} for i, row in enumerate(test)
        ]

    def iteration_prompts(self, k: int, drawn: int | None):
        """Iteration ``k``'s (from 1) GRPO prompts: the ``k``-th slice of ``drawn`` pool rows, so no prompt is
        trained on twice in a run (the whole pool for a run sized in epochs). `Experiment` checks the pool holds
        every iteration's slice."""
        if drawn is None:
            return self.pool
        return self.pool.select(range((k - 1) * drawn, k * drawn))

    # ---- sampling --------------------------------------------------------------------------------------------
    def sample(self, model, tokenizer, prompts, n: int, seed: int) -> list[list[str]]:
        from grpo_ext.sampler.sampling import SamplingParams, sample

        params = SamplingParams(
            n=n,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.args.sampling_batch_size,
            seed=seed,
            stop=self.stop,
        )
        return sample(model, tokenizer, list(prompts), params, progress=False)

    def _labelled(self, model, tokenizer, rows, n: int, tag: str, iteration: int, what: str) -> list[dict]:
        completions = self.sample(model, tokenizer, rows["prompt"], n, derive_seed(self.seed, what, iteration))
        return label_samples(
            self.task, self.reward_model_type, rows["prompt"], rows["answer"], completions, tag, iteration
        )

    def rm_data(self, model, tokenizer, iteration: int, tag: str) -> list[dict]:
        """Verifier-labelled RM training records: ``rm_prompts`` pool prompts x ``rm_samples_per_prompt``."""
        n_prompts = min(self.args.rm_prompts, len(self.pool))
        rng = random.Random(f"{self.seed}/rm-prompts/{iteration}")
        rows = self.pool.select(sorted(rng.sample(range(len(self.pool)), n_prompts)))
        return self._labelled(model, tokenizer, rows, self.args.rm_samples_per_prompt, tag, iteration, "rm-data")

    def eval_sets(self, model, tokenizer, iteration: int, tag: str) -> dict[str, list[dict]]:
        """Fresh labelled samples (their own sampling seeds: never RM training data) on pool and held-out
        prompts, ``rm_eval_samples_per_prompt`` each."""
        n = self.args.rm_eval_samples_per_prompt
        sets = {"pool": self._labelled(model, tokenizer, self.pool_eval, n, f"{tag}/pool", iteration, "rm-eval")}
        if self.heldout_eval is not None:
            sets["heldout"] = self._labelled(
                model, tokenizer, self.heldout_eval, n, f"{tag}/heldout", iteration, "rm-heldout"
            )
        return sets

    # ---- the policy ------------------------------------------------------------------------------------------
    def evaluate_policy(self, model, tokenizer, path: str, cache_path: Path) -> dict:
        """pass@1, pass@k and maj@k on the test problems through the evaluation harness (cached), with each
        problem's right count and maj@k (the report's intervals resample problems)."""
        from grpo_ext.evaluation.backends import TransformersBackend, model_fingerprint
        from grpo_ext.evaluation.harness import evaluate_model
        from grpo_ext.evaluation.results import EvalResult
        from grpo_ext.sampler.sampling import SamplingParams

        k = self.args.eval_samples
        params = SamplingParams(
            n=k,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
            batch_size=self.args.sampling_batch_size,
            stop=self.stop,
        )
        backend = TransformersBackend(model, tokenizer, name=path, fingerprint=model_fingerprint(path))
        result = evaluate_model(
            backend,
            self.task,
            params,
            sorted({1, k}),
            problems=self.eval_problems,
            cache_path=cache_path,
            progress=False,
        )
        read, pass_at, maj_at = EvalResult.of(result), PASS_AT_K, MAJ_AT_K
        return {
            **{name: read.value(name) for name in (pass_at.at(1), pass_at.at(k), maj_at.at(k))},  # the report's names
            "test_n_correct": [int(p["n_correct"]) for p in result["per_problem"]],
            f"test_{maj_at.at(k)}": [float(p[maj_at.name][str(k)]) for p in result["per_problem"]],
            "test_result": compact_result(result),
        }
