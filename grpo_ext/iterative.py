"""Iterative RL with GRPO (DeepSeekMath 4.1.4): the reward model is retrained on the current policy's samples.

As the policy improves, a fixed reward model stops supervising it well. The loop:

0. sample the base policy on train prompts, label the samples with the task's verifier (the ground truth the RM
   is meant to approximate) and train the initial RM, initialised from the policy's weights;
1. for each iteration k = 1..N:
   a. train the policy for ``max_steps`` GRPO steps against RM_{k-1}, starting from policy_{k-1}, which is also
      the reference model: starting the trainer from policy_{k-1}'s folder is the reference reset (TRL rebuilds
      its reference from ``model.config._name_or_path``);
   b. sample policy_k on train prompts and label the samples with the verifier;
   c. RM training set = the new samples + a replay of ``replay_ratio`` x (new set size) historical records;
   d. continue training RM_{k-1} on it -> RM_k;
   e. report RM accuracy/AUC on held-out fresh samples of policy_k (test prompts) before and after the update,
      the policy's pass@1 / maj@k (evaluation harness) and the replay actually used.

State (``iterative_state.json``: finished iteration, policy/RM/reference folders, replay-buffer files, report
rows) is written atomically at the end of each iteration, so a killed run resumes at the last finished one; a
half-done iteration's folder is discarded and redone.
"""

from __future__ import annotations

import copy
import gc
import json
import logging
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_ext.io import atomic_write_bytes, atomic_write_text
from grpo_ext.rewards.replay import check_replay_ratio, mix_with_replay
from grpo_ext.rewards.reward_models import (
    RM_KINDS,
    PRMOutcomeReward,
    RMRewardFunction,
    evaluate_reward_model,
    init_reward_model,
    load_reward_model,
    train_reward_model,
)
from grpo_ext.script_args import parse_task_kwargs

logger = logging.getLogger(__name__)

STATE_FILE = "iterative_state.json"
STATE_VERSION = 1
REPORT_MD, REPORT_JSON, REPORT_PNG = "report.md", "report.json", "iterative.png"

__all__ = [
    "IterativeArguments",
    "build_policy_trainer",
    "check_verifier",
    "label_samples",
    "load_state",
    "run_iterative",
    "write_report",
]


@dataclass
class IterativeArguments:
    """The iterative-RL loop: task, iterations, reward model, replay and evaluation sizes.

    The policy's GRPO settings are GRPOExtConfig's (``max_steps`` = GRPO steps per iteration, ``output_dir`` =
    the run folder) and the base policy is ModelConfig's ``model_name_or_path``.
    """

    task: str = field(
        default="arithmetic", metadata={"help": "Task name (see grpo_ext.tasks.TASKS); needs a verifier."}
    )
    task_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Task knobs, e.g. {max_operands: 3} in YAML or a JSON string."}
    )
    train_size: int | None = field(default=None, metadata={"help": "Number of training prompts (task default)."})
    iterations: int = field(default=2, metadata={"help": "Iterations of (train policy, resample, retrain RM); >= 1."})
    reward_model_type: str = field(
        default="outcome",
        metadata={
            "help": "`outcome`: sequence-classification RM, one logit, used as a reward function; `process`: "
            "token-classification PRM (TRL's PRM format) scored at step ends, trained with advantage_mode process.",
            "choices": list(RM_KINDS),
        },
    )
    replay_ratio: float = field(
        default=0.1,
        metadata={"help": "Historical records replayed per new RM record (a fraction of the new set), in [0, 1]."},
    )
    rm_prompts: int = field(default=512, metadata={"help": "Train prompts sampled per iteration for RM data."})
    rm_samples_per_prompt: int = field(default=8, metadata={"help": "Policy samples per prompt for RM data."})
    rm_epochs: float = field(default=2.0, metadata={"help": "RM training epochs over each iteration's set."})
    rm_learning_rate: float = field(default=5e-4, metadata={"help": "RM learning rate (AdamW, linear decay)."})
    rm_batch_size: int = field(default=64, metadata={"help": "RM training batch size."})
    rm_eval_prompts: int = field(default=200, metadata={"help": "Held-out (test-split) prompts for RM accuracy."})
    rm_eval_samples_per_prompt: int = field(default=4, metadata={"help": "Fresh policy samples per held-out prompt."})
    eval_prompts: int = field(default=200, metadata={"help": "Test prompts for the policy's pass@1 / maj@k."})
    eval_samples: int = field(default=16, metadata={"help": "Samples per test prompt (k of maj@k); >= 1."})
    sampling_batch_size: int = field(default=16, metadata={"help": "Prompts per sampling batch."})
    log_verifier_reward: bool = field(
        default=True,
        metadata={"help": "Also log the verifier's reward during GRPO (weight 0: it never trains the policy)."},
    )
    resume: bool = field(default=True, metadata={"help": "Resume from output_dir's state when there is one."})
    report_dir: str | None = field(
        default=None, metadata={"help": "Where the report goes (default <output_dir>/report)."}
    )

    def __post_init__(self):
        self.task_kwargs = parse_task_kwargs(self.task_kwargs)
        if self.reward_model_type not in RM_KINDS:
            raise ValueError(
                f"reward_model_type: unknown value {self.reward_model_type!r}; expected one of {', '.join(RM_KINDS)}"
            )
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise ValueError(f"iterations: must be an integer >= 1, got {self.iterations!r}")
        check_replay_ratio(self.replay_ratio)
        for name in (
            "rm_prompts",
            "rm_samples_per_prompt",
            "rm_batch_size",
            "rm_eval_prompts",
            "rm_eval_samples_per_prompt",
            "eval_prompts",
            "eval_samples",
            "sampling_batch_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        if not (self.rm_epochs > 0 and math.isfinite(self.rm_epochs)):
            raise ValueError(f"rm_epochs: must be > 0, got {self.rm_epochs}")
        if not (self.rm_learning_rate > 0 and math.isfinite(self.rm_learning_rate)):
            raise ValueError(f"rm_learning_rate: must be > 0, got {self.rm_learning_rate}")
        if self.train_size is not None and self.train_size < 1:
            raise ValueError(f"train_size: must be >= 1, got {self.train_size}")


# ---- verifier and labels ---------------------------------------------------------------------------------------
def check_verifier(task, kind: str, train_dataset) -> None:
    """The loop needs ground truth: reference answers (outcome) and, for a process RM, a step verifier."""
    if "answer" not in train_dataset.column_names:
        raise ValueError(
            f"task {task.name!r} has no verifier: its data has no 'answer' column to check samples against "
            "(iterative RL labels the RM's data with the verifier)"
        )
    if kind == "process" and not callable(getattr(task, "verify_steps", None)):
        raise ValueError(
            f"reward_model_type: `process` needs a step verifier, and task {task.name!r} has none (verify_steps); "
            "use reward_model_type: outcome"
        )
    if not task.step_separator and kind == "process":
        raise ValueError(f"reward_model_type: `process` needs task {task.name!r} to define a step separator")


def label_samples(task, kind: str, prompts, answers, completions, tag: str, iteration: int) -> list[dict]:
    """Verifier-labelled records, one per completion (``completions[i]`` are the samples of ``prompts[i]``)."""
    records = []
    for i, (prompt, answer, samples) in enumerate(zip(prompts, answers, completions, strict=True)):
        for j, completion in enumerate(samples):
            record = {
                "id": f"{tag}/{i}/{j}",
                "iteration": iteration,
                "prompt": prompt,
                "completion": completion,
                "label": int(task.is_correct(completion, answer)),
            }
            if kind == "process":
                record["step_labels"] = [float(s) for s in task.verify_steps(prompt, completion)]
            records.append(record)
    return records


# ---- state ---------------------------------------------------------------------------------------------------
def _write_json(path: Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def _write_jsonl(path: Path, records: list[dict]) -> None:
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_state(run_dir: str | Path) -> dict | None:
    """The loop's state in ``run_dir`` (None when there is none)."""
    path = Path(run_dir) / STATE_FILE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err}); delete it to start over") from None
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"{path}: state version {state.get('version')!r}, expected {STATE_VERSION}")
    return state


def _save_folder(src: Path, dst: Path) -> None:
    """Rename a finished folder into place (the previous content, if any, is dropped)."""
    if dst.exists():
        shutil.rmtree(dst)
    src.replace(dst)


# ---- the policy step -------------------------------------------------------------------------------------------
def build_policy_trainer(
    policy_dir,
    reward_model_dir,
    kind,
    task,
    train_dataset,
    training_args,
    output_dir,
    *,
    log_verifier_reward: bool = True,
    seed: int | None = None,
):
    """A GRPOExtTrainer for one iteration: the policy *and* its reference start from ``policy_dir`` (the reset),
    the reward is the RM in ``reward_model_dir`` (outcome: RMRewardFunction; process: the PRM's step scores)."""
    from grpo_ext.rewards.prm import ProcessRewardModel
    from grpo_ext.trainer import GRPOExtTrainer

    args = copy.deepcopy(training_args)
    args.output_dir = str(output_dir)
    if seed is not None:
        args.seed = seed
    args.save_strategy = "no"
    process_funcs = None
    if kind == "outcome":
        reward_funcs = [RMRewardFunction(reward_model_dir, name="orm")]
    else:
        separator = args.step_separator or task.step_separator
        args.step_separator = separator
        args.advantage_mode = "process"
        prm = ProcessRewardModel(str(reward_model_dir), separator)
        process_funcs = [prm]
        reward_funcs = [PRMOutcomeReward(prm)]
    if log_verifier_reward:
        reward_funcs.append(task.outcome_reward)  # logged as rewards/outcome_reward/mean, weight 0
        args.reward_weights = [1.0] * (len(reward_funcs) - 1) + [0.0]
    else:
        args.reward_weights = None
    return GRPOExtTrainer(
        model=str(policy_dir),
        reward_funcs=reward_funcs,
        process_reward_funcs=process_funcs,
        args=args,
        train_dataset=train_dataset,
    )


def _reference_matches_policy(trainer) -> bool | None:
    """True when the trainer's reference model has the policy's weights (None: no reference, beta == 0)."""
    import torch

    if trainer.ref_model is None:
        return None
    policy = dict(trainer.accelerator.unwrap_model(trainer.model).named_parameters())
    for name, ref_param in trainer.ref_model.named_parameters():
        if name not in policy or not torch.equal(policy[name].detach().cpu(), ref_param.detach().cpu()):
            return False
    return True


def _train_summary(log_history: list[dict], rm_metric: str) -> dict:
    """First and last logged training rewards (RM score, and the verifier's when logged)."""
    rows = [r for r in log_history if "reward" in r]
    out = {}
    for key, name in ((f"rewards/{rm_metric}/mean", "rm_reward"), ("rewards/outcome_reward/mean", "verifier_reward")):
        values = [r[key] for r in rows if key in r]
        if values:
            out[f"train_{name}_first"] = float(values[0])
            out[f"train_{name}_last"] = float(values[-1])
    return out


# ---- the loop --------------------------------------------------------------------------------------------------
class _Loop:
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
        self.args, self.model_args = it_args, model_args
        self.task = get_task(it_args.task, **it_args.task_kwargs)
        self.kind = it_args.reward_model_type
        self.train_dataset = require_prompt_column(
            self.task.load("train", it_args.train_size), f"task {self.task.name!r}"
        )
        check_verifier(self.task, self.kind, self.train_dataset)
        if training_args.step_separator is None and self.task.step_separator is not None:
            training_args.step_separator = self.task.step_separator
        self.separator = training_args.step_separator
        if self.kind == "outcome" and training_args.advantage_mode == "process":
            raise ValueError("advantage_mode: `process` needs reward_model_type: process in the iterative loop")
        base_id, _, _ = policy_init(model_args, training_args)
        if not Path(base_id).is_dir():
            raise FileNotFoundError(f"model_name_or_path: the iterative loop needs a local model folder, got {base_id}")
        self.base = str(Path(base_id).resolve())
        self.training_args = training_args
        self.run_dir = Path(training_args.output_dir).resolve()
        self.report_dir = Path(it_args.report_dir).resolve() if it_args.report_dir else self.run_dir / "report"
        self.seed = int(training_args.seed)
        self.max_new_tokens = int(training_args.max_completion_length)
        self.temperature = float(training_args.temperature)
        n_test = max(it_args.rm_eval_prompts, it_args.eval_prompts)
        test = self.task.load("test", n_test)
        self.rm_eval_set = test.select(range(min(it_args.rm_eval_prompts, len(test))))
        self.eval_problems = [
            {"problem_id": str(i), "prompt": row["prompt"], "answer": row["answer"]}
            for i, row in enumerate(test.select(range(min(it_args.eval_prompts, len(test)))))
        ]

    # -- state --
    def _config_snapshot(self) -> dict:
        snapshot = {k: v for k, v in asdict(self.args).items() if k not in ("resume", "report_dir", "iterations")}
        snapshot.update(base=self.base, max_steps=self.training_args.max_steps, seed=self.seed)
        return snapshot

    def _load_or_start(self) -> dict:
        state = load_state(self.run_dir) if self.args.resume else None
        if state is not None:
            if state["config"] != self._config_snapshot():
                changed = sorted(
                    k
                    for k in set(state["config"]) | set(self._config_snapshot())
                    if state["config"].get(k) != self._config_snapshot().get(k)
                )
                raise ValueError(
                    f"output_dir {self.run_dir} holds a run with other settings ({', '.join(changed)}); "
                    "use another output_dir or --resume false"
                )
            logger.info("resuming after iteration %d", state["iteration"])
            print(f"[iterative] resuming {self.run_dir} after iteration {state['iteration']}")
        else:
            state = {
                "version": STATE_VERSION,
                "iteration": -1,
                "config": self._config_snapshot(),
                "buffer": [],
                "policy": self.base,
                "reward_model": None,
                "reference": None,
                "history": [],
            }
        # a half-done iteration left a folder behind: discard it (it is redone from the saved state)
        if self.run_dir.is_dir():
            for folder in self.run_dir.glob("iter_*"):
                number = folder.name.removeprefix("iter_")
                if folder.is_dir() and number.isdigit() and int(number) > state["iteration"]:
                    shutil.rmtree(folder)
        return state

    def _save_state(self, state: dict) -> None:
        _write_json(self.run_dir / STATE_FILE, state)

    # -- pieces --
    def _load_policy(self, path):
        from grpo_ext.evaluation.backends import load_model_and_tokenizer

        return load_model_and_tokenizer(path, device="cpu")

    def _sample(self, model, tokenizer, prompts, n, seed):
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

    def _policy_samples(self, model, tokenizer, iteration: int):
        """RM training data (train prompts) and held-out RM evaluation data (test prompts) of this policy."""
        a = self.args
        rng = random.Random(f"{self.seed}/rm-prompts/{iteration}")
        indices = sorted(rng.sample(range(len(self.train_dataset)), min(a.rm_prompts, len(self.train_dataset))))
        rows = self.train_dataset.select(indices)
        completions = self._sample(
            model, tokenizer, rows["prompt"], a.rm_samples_per_prompt, self.seed * 1000 + 2 * iteration
        )
        new = label_samples(
            self.task, self.kind, rows["prompt"], rows["answer"], completions, f"it{iteration}/train", iteration
        )
        held = self._sample(
            model,
            tokenizer,
            self.rm_eval_set["prompt"],
            a.rm_eval_samples_per_prompt,
            self.seed * 1000 + 2 * iteration + 1,
        )
        held_out = label_samples(
            self.task,
            self.kind,
            self.rm_eval_set["prompt"],
            self.rm_eval_set["answer"],
            held,
            f"it{iteration}/heldout",
            iteration,
        )
        return new, held_out

    def _evaluate_policy(self, model, tokenizer, path) -> dict:
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
        backend = TransformersBackend(model, tokenizer, name=str(path), fingerprint=model_fingerprint(path))
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

    def _rm_metrics(self, model, tokenizer, records, prefix: str) -> dict:
        metrics = evaluate_reward_model(self.kind, model, tokenizer, records, self.separator)
        out = {
            f"rm_accuracy_{prefix}": metrics["accuracy"],
            f"rm_auc_{prefix}": metrics["auc"],
            f"rm_mean_score_{prefix}": metrics.get("mean_score"),
            "heldout_positive_rate": metrics["positive_rate"],
        }
        if self.kind == "process":
            out[f"rm_outcome_accuracy_{prefix}"] = metrics["outcome_accuracy"]
        return out

    def _train_rm(self, model, tokenizer, records, out_dir: Path, iteration: int) -> dict:
        a = self.args
        return train_reward_model(
            self.kind,
            model,
            tokenizer,
            records,
            out_dir,
            separator=self.separator,
            epochs=a.rm_epochs,
            learning_rate=a.rm_learning_rate,
            batch_size=a.rm_batch_size,
            seed=self.seed + iteration,
        )

    def _history(self, state) -> list[dict]:
        records = []
        for name in state["buffer"]:
            records.extend(_read_jsonl(self.run_dir / name))
        return records

    # -- iterations --
    def iteration_zero(self, state: dict) -> dict:
        start = time.perf_counter()
        folder = self.run_dir / "iter_0"
        folder.mkdir(parents=True, exist_ok=True)
        model, tokenizer = self._load_policy(self.base)
        new, held_out = self._policy_samples(model, tokenizer, 0)
        policy_eval = self._evaluate_policy(model, tokenizer, self.base)
        del model
        rm, rm_tokenizer = init_reward_model(self.kind, self.base)
        row = {"iteration": 0, "policy": self.base}
        row.update(self._rm_metrics(rm, rm_tokenizer, held_out, "before"))
        rm_train = self._train_rm(rm, rm_tokenizer, new, folder / "reward_model", 0)
        row.update(self._rm_metrics(rm, rm_tokenizer, held_out, "after"))
        row.update(policy_eval)
        row.update(
            policy_sample_accuracy=sum(r["label"] for r in new) / len(new),
            n_new=len(new),
            n_replay=0,
            replay_ratio_used=0.0,
            replay_fraction=0.0,
            rm_train_loss=rm_train["train_loss"],
            seconds=round(time.perf_counter() - start, 1),
        )
        _write_jsonl(folder / "rm_data.jsonl", new)
        state.update(
            iteration=0,
            reward_model=str(folder / "reward_model"),
            policy=self.base,
            reference=None,
            buffer=["iter_0/rm_data.jsonl"],
            history=[row],
        )
        return state

    def iteration(self, state: dict, k: int) -> dict:
        start = time.perf_counter()
        folder = self.run_dir / f"iter_{k}"
        folder.mkdir(parents=True, exist_ok=True)
        previous_policy, rm_dir = state["policy"], state["reward_model"]
        # (a) GRPO against RM_{k-1}; policy and reference both start from policy_{k-1}
        work = folder / "policy.tmp"
        trainer = build_policy_trainer(
            previous_policy,
            rm_dir,
            self.kind,
            self.task,
            self.train_dataset,
            self.training_args,
            work,
            log_verifier_reward=self.args.log_verifier_reward,
            seed=self.seed + k,
        )
        reference_reset = _reference_matches_policy(trainer)
        if reference_reset is False:
            raise RuntimeError("the reference model does not start from the current policy")
        trainer.train()
        trainer.save_model(str(work))
        trainer.processing_class.save_pretrained(str(work))
        rm_metric = trainer.reward_func_names[0]
        summary = _train_summary(trainer.state.log_history, rm_metric)
        del trainer
        gc.collect()
        policy_dir = folder / "policy"
        _save_folder(work, policy_dir)
        # (b) fresh samples of policy_k, labelled by the verifier
        model, tokenizer = self._load_policy(str(policy_dir))
        new, held_out = self._policy_samples(model, tokenizer, k)
        policy_eval = self._evaluate_policy(model, tokenizer, policy_dir)
        del model
        # (c) new + replay of history, (d) continue training the RM
        records, replay = mix_with_replay(new, self._history(state), self.args.replay_ratio, seed=self.seed + k)
        rm, rm_tokenizer = load_reward_model(self.kind, rm_dir)
        row = {
            "iteration": k,
            "policy": str(policy_dir),
            "reference": previous_policy,
            "reference_reset": reference_reset,
        }
        row.update(self._rm_metrics(rm, rm_tokenizer, held_out, "before"))
        rm_train = self._train_rm(rm, rm_tokenizer, records, folder / "reward_model", k)
        row.update(self._rm_metrics(rm, rm_tokenizer, held_out, "after"))
        row.update(policy_eval)
        row.update(
            policy_sample_accuracy=sum(r["label"] for r in new) / len(new),
            **replay,
            **summary,
            rm_train_loss=rm_train["train_loss"],
            seconds=round(time.perf_counter() - start, 1),
        )
        _write_jsonl(folder / "rm_data.jsonl", new)
        # (e) the next iteration's policy and reference are policy_k
        state.update(
            iteration=k,
            policy=str(policy_dir),
            reward_model=str(folder / "reward_model"),
            reference=str(policy_dir),
            buffer=[*state["buffer"], f"iter_{k}/rm_data.jsonl"],
            history=[*state["history"], row],
        )
        return state

    def run(self) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = self._load_or_start()
        if state["iteration"] < 0:
            print("[iterative] iteration 0: initial reward model on the base policy's samples")
            state = self.iteration_zero(state)
            self._save_state(state)
            write_report(state, self.report_dir, self.args.eval_samples)
        for k in range(state["iteration"] + 1, self.args.iterations + 1):
            print(f"[iterative] iteration {k}/{self.args.iterations}")
            state = self.iteration(state, k)
            self._save_state(state)
            write_report(state, self.report_dir, self.args.eval_samples)
        write_report(state, self.report_dir, self.args.eval_samples)
        return state


def run_iterative(it_args: IterativeArguments, training_args, model_args) -> dict:
    """Run (or resume) the loop; returns the final state (its ``history`` holds one report row per iteration)."""
    return _Loop(it_args, training_args, model_args).run()


# ---- report ----------------------------------------------------------------------------------------------------
def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def render_report(state: dict, k: int) -> str:
    rows = state["history"]
    kind = state["config"]["reward_model_type"]
    lines = [
        f"# Iterative RL: {kind} reward model retrained on policy samples (DeepSeekMath 4.1.4)",
        "",
        f"Task `{state['config']['task']}` {state['config']['task_kwargs'] or ''}, base `{state['config']['base']}`, "
        f"{state['config']['max_steps']} GRPO steps per iteration, replay_ratio {state['config']['replay_ratio']}.",
        "",
        "RM accuracy / AUC: on fresh samples of the iteration's policy on held-out (test) prompts, against the "
        "verifier, before the RM update (the RM the policy was trained against) and after it; the held-out right "
        "rate is the verifier's, so max(rate, 1 - rate) is what a constant RM would score. Iteration 0: the base "
        "policy; `before` is the untrained RM. Policy metrics: evaluation harness on test prompts at the sampling "
        "temperature.",
        "",
        f"| iteration | held-out right rate | RM acc before | RM acc after | RM AUC before | RM AUC after | "
        f"policy pass@1 | maj@{k} | "
        f"pass@{k} | policy acc on RM-data samples | RM data: new + replay (ratio used) | "
        "RM reward in training (first → last) | verifier reward in training (first → last) | seconds |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rows:
        rm_reward = (
            f"{_fmt(r.get('train_rm_reward_first'))} → {_fmt(r.get('train_rm_reward_last'))}"
            if "train_rm_reward_first" in r
            else "–"
        )
        verifier = (
            f"{_fmt(r.get('train_verifier_reward_first'))} → {_fmt(r.get('train_verifier_reward_last'))}"
            if "train_verifier_reward_first" in r
            else "–"
        )
        lines.append(
            f"| {r['iteration']} | {_fmt(r.get('heldout_positive_rate'))} | {_fmt(r['rm_accuracy_before'])} | "
            f"{_fmt(r['rm_accuracy_after'])} | "
            f"{_fmt(r['rm_auc_before'])} | {_fmt(r['rm_auc_after'])} | {_fmt(r['pass@1'])} | {_fmt(r[f'maj@{k}'])} | "
            f"{_fmt(r[f'pass@{k}'])} | {_fmt(r['policy_sample_accuracy'])} | "
            f"{r['n_new']} + {r['n_replay']} ({_fmt(r['replay_ratio_used'])}) | "
            f"{rm_reward} | {verifier} | {r['seconds']:.0f} |"
        )
    lines.append("")
    return "\n".join(lines)


def plot_report(state: dict, k: int) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = state["history"]
    x = [r["iteration"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(x, [r["rm_accuracy_before"] for r in rows], "o--", label="before update")
    left.plot(x, [r["rm_accuracy_after"] for r in rows], "o-", label="after update")
    left.set(title="RM accuracy vs verifier (fresh held-out samples)", xlabel="iteration", ylabel="accuracy")
    left.legend()
    right.plot(x, [r["pass@1"] for r in rows], "o-", label="pass@1")
    right.plot(x, [r[f"maj@{k}"] for r in rows], "s--", label=f"maj@{k}")
    right.set(title="policy accuracy (test prompts)", xlabel="iteration", ylabel="accuracy")
    right.legend()
    for ax in (left, right):
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_report(state: dict, report_dir: str | Path, k: int) -> Path:
    """``report.md`` (table), ``report.json`` (rows) and ``iterative.png`` (RM and policy accuracy per iteration)."""
    report_dir = Path(report_dir)
    atomic_write_text(report_dir / REPORT_MD, render_report(state, k))
    _write_json(report_dir / REPORT_JSON, {"config": state["config"], "rows": state["history"]})
    atomic_write_bytes(report_dir / REPORT_PNG, plot_report(state, k))
    return report_dir
