"""The policy step of an iteration: GRPO against the arm's reward source, the reference reset to the policy.

Next to the reward that trains the policy, the verifier's rewards are logged with weight 0 (they never train it), so
every logged window of a run holds both views of the same training samples: the hacking gap is their difference.
Logged reward names (TRL's ``rewards/<name>/mean``):

- ``rm_outcome``: the RM's verdict on a whole completion (an outcome RM's score; a process RM's minimum step score);
- ``rm_steps``: a process RM's mean step score per completion (over the steps the step verifier checks, when the task
  has one: the verifier gives a step with nothing to check no score);
- ``outcome_reward``: the task's verifier (1 right, 0 wrong);
- ``verifier_steps``: the step verifier's mean step score per completion (tasks with a step verifier).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from grpo_ext.advantages import get_gradient_coefficient
from grpo_ext.errors import UserError
from grpo_ext.rewards.orm import RMRewardFunction
from grpo_ext.rewards.prm import ProcessRewardModel
from grpo_ext.tasks.base import completion_text

__all__ = [
    "PROCESS_SUPERVISION",
    "LastCallCache",
    "StepMean",
    "RewardLog",
    "build_policy_trainer",
    "gap_of",
    "is_lora_policy",
    "merge_adapter",
    "policy_model_args",
    "reference_matches_policy",
    "training_curve",
    "training_reward_summary",
]

# The gradient coefficient step scores feed when the configured one reads no step rewards (DeepSeekMath 4.1.3).
PROCESS_SUPERVISION = "process"
#: Logged metric -> the name a training curve gives it.
CURVE_METRICS = {
    "rewards/rm_outcome/mean": "rm_outcome",
    "rewards/rm_steps/mean": "rm_steps",
    "rewards/outcome_reward/mean": "verifier_outcome",
    "rewards/verifier_steps/mean": "verifier_steps",
    "kl": "kl",
}


class LastCallCache:
    """A step scorer that remembers its last answer: the PRM scores a batch once, however many reward functions
    (the advantages' step scores, the logged minimum and mean) read it."""

    def __init__(self, scorer):
        self.scorer, self._key, self._value = scorer, None, None
        self.__name__ = getattr(scorer, "__name__", "prm")

    def __call__(self, prompts: list, completions: list, **kwargs) -> list[list[float]]:
        key = (tuple(map(completion_text, prompts)), tuple(map(completion_text, completions)))
        if key != self._key:
            self._key, self._value = key, self.scorer(prompts=prompts, completions=completions, **kwargs)
        return self._value


class StepMean:
    """A reward function (TRL's signature): a step scorer's scores reduced to one per completion, the mean by
    default, over the steps it scored (a NaN score: nothing to check there); ``empty`` for a completion without a
    scored step (None, i.e. not counted, by default). With ``checked`` (another step scorer, the same steps), only
    the steps it scores count: a PRM's mean over the steps the verifier checks, so the two means share their steps."""

    def __init__(self, scorer, name: str, reduce=None, empty: float | None = None, checked=None):
        self.scorer, self.__name__, self.empty, self.checked = scorer, name, empty, checked
        self.reduce = reduce or (lambda steps: sum(steps) / len(steps))

    def __call__(self, prompts: list, completions: list, **kwargs) -> list[float | None]:
        rows = self.scorer(prompts=prompts, completions=completions, **kwargs)
        masks = rows if self.checked is None else self.checked(prompts=prompts, completions=completions, **kwargs)
        scored = [
            [s for s, m in zip(steps, mask, strict=True) if not math.isnan(m) and not math.isnan(s)]
            for steps, mask in zip(rows, masks, strict=True)
        ]
        return [float(self.reduce(steps)) if steps else self.empty for steps in scored]


def _verifier_funcs(task, outcome: bool = True) -> list:
    """The verifier's logged rewards: its outcome (``rewards/outcome_reward/mean``, unless it trains already) and,
    with a step verifier, its mean step score."""
    funcs = [task.outcome_reward] if outcome else []
    if task.has_step_verifier:
        funcs.append(StepMean(task.step_reward, "verifier_steps"))
    return funcs


def build_policy_trainer(
    policy_dir,
    reward_source,
    reward_model_type: str,
    task,
    train_dataset,
    training_args,
    output_dir,
    *,
    log_verifier_reward: bool = True,
    seed: int | None = None,
    callbacks=None,
    model_args=None,
    rm_dtype: str = "float32",
):
    """A GRPOExtTrainer for one iteration: the policy *and* its reference start from ``policy_dir`` (the reset:
    TRL rebuilds the reference from ``model.config._name_or_path``). With a LoRA ``model_args`` (``use_peft``) the
    policy is a fresh adapter on ``policy_dir`` loaded in ``model_args.dtype``, and the reference is that folder
    (TRL's adapter-disabled model): the reset holds by construction (:func:`merge_adapter` makes the next folder).

    ``reward_source``: an RM folder (outcome: :class:`RMRewardFunction`; process: :class:`ProcessRewardModel`'s
    step scores feed the advantages) or ``"verifier"`` (the task's verifier; for a process RM type, its step
    verifier). ``training_args`` is copied, never changed."""
    from grpo_ext.assembly import build_grpo_trainer

    args = copy.deepcopy(training_args)
    args.output_dir = str(output_dir)
    if seed is not None:
        args.seed = seed
    args.save_strategy = "no"
    process = reward_model_type == "process"
    if process:
        args.step_separator = args.step_separator or task.step_separator
        # Refused, not switched: the report prints the config's advantage_mode, so it must be the mode that ran.
        if not get_gradient_coefficient(args.advantage_mode).needs_step_rewards:
            raise UserError(
                f"advantage_mode: reward_model_type process feeds step scores to the advantages, but "
                f"`{args.advantage_mode}` reads none; set a mode that reads step rewards (e.g. {PROCESS_SUPERVISION})"
            )
    process_reward_funcs = None  # the config's, as in any GRPO run
    verifier = reward_source == "verifier"
    logged = _verifier_funcs(task, outcome=not verifier) if log_verifier_reward else []
    if verifier:
        reward_funcs = [task.outcome_reward]
        if process:
            process_reward_funcs = [task.step_reward]
    elif not process:
        reward_funcs = [RMRewardFunction(reward_source, name="rm_outcome")]
    else:
        # scored in the dtype it was trained and saved in (a bf16 RM: 4.7x faster matmuls than float32 on this CPU)
        prm = ProcessRewardModel(str(reward_source), args.step_separator, batch_size=64, dtype=_torch_dtype(rm_dtype))
        prm = LastCallCache(prm)
        process_reward_funcs = [prm]
        # rm_steps is logged beside verifier_steps: over the steps the verifier checks, so their gap is like for like
        same_steps = task.has_step_verifier and args.step_separator == task.step_separator
        checked = task.step_reward if same_steps else None
        reward_funcs = [StepMean(prm, "rm_outcome", reduce=min, empty=0.0), StepMean(prm, "rm_steps", checked=checked)]
        logged = [reward_funcs.pop(), *logged]  # rm_steps only logs
    args.reward_weights = [1.0] * len(reward_funcs) + [0.0] * len(logged)
    lora = is_lora_policy(model_args)
    return build_grpo_trainer(
        task,
        args,
        model=None if lora else str(policy_dir),
        model_args=policy_model_args(model_args, policy_dir) if lora else None,
        reward_funcs=reward_funcs + logged,
        process_reward_funcs=process_reward_funcs,
        train_dataset=train_dataset,
        callbacks=callbacks,
    )


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def is_lora_policy(model_args) -> bool:
    return bool(model_args is not None and getattr(model_args, "use_peft", False))


def policy_model_args(model_args, policy_dir):
    """``model_args`` (a LoRA policy's ModelConfig) with the iteration's policy folder as its model: a fresh
    adapter on it each iteration. A copy: the experiment's own is never changed."""
    out = copy.deepcopy(model_args)
    out.model_name_or_path = str(policy_dir)
    return out


def merge_adapter(adapter_dir, out, base_dir, dtype: str | None) -> dict:
    """The LoRA adapter in ``adapter_dir`` merged into the model of ``base_dir`` (loaded in float32, merged there,
    rounded once to ``dtype``: the dtype the next iteration loads it in), saved as a plain safetensors folder ``out``
    with the adapter's tokenizer. Returns what the rounding kept of the update: ``update_norm`` (the float32 merge's
    change of the weights), ``rounding_error`` (the rounded weights' distance from the float32 merge, relative to
    the update: near 1 means a bf16 policy cannot hold the step GRPO made) and ``dtype``."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _torch_dtype(dtype) if dtype and dtype != "auto" else torch.float32
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32, use_safetensors=True)
    before = {name: p.detach().clone() for name, p in base.named_parameters()}
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    update = error = 0.0
    with torch.no_grad():
        for name, p in merged.named_parameters():
            delta = p - before[name]
            if bool(delta.any()):
                update += float(delta.double().pow(2).sum())
                error += float((p.to(target).to(p.dtype) - p).double().pow(2).sum())
    del before
    merged = merged.to(target)
    merged.save_pretrained(str(out), safe_serialization=True)
    # the tokenizer the run saved beside its adapter (the trainer's), else the base's
    source = adapter_dir if (Path(adapter_dir) / "tokenizer_config.json").is_file() else base_dir
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(out))
    return {
        "dtype": str(target).removeprefix("torch."),
        "update_norm": update**0.5,
        "rounding_error": (error**0.5 / update**0.5) if update > 0 else 0.0,
    }


def gap_of(point: dict) -> float | None:
    """The hacking gap of one logged window: the RM's reward minus the verifier's on the same training samples,
    at the step level when both step means were logged (a process RM), else at the outcome level; None when
    neither pair was logged. Positive: the RM rates the policy's samples better than they are."""
    if "rm_steps" in point and "verifier_steps" in point:
        return point["rm_steps"] - point["verifier_steps"]
    if "rm_outcome" in point and "verifier_outcome" in point:
        return point["rm_outcome"] - point["verifier_outcome"]
    return None


class RewardLog(TrainerCallback):
    """One line per logged window instead of Trainer's full log dicts: the RM's and the verifier's rewards side
    by side, the hacking gap and the KL (:meth:`install` swaps it in for the printer / progress bar)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def install(self, trainer):
        for callback in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(callback)
        trainer.add_callback(self)
        return trainer

    def on_log(self, args, state, control, logs=None, **kwargs):
        point = _logged(logs or {})
        if point:
            gap = gap_of(point)
            parts = [f"{name} {value:.3f}" for name, value in point.items()]
            parts += [f"gap {gap:+.3f}"] if gap is not None else []
            print(f"{self.prefix} step {state.global_step}/{state.max_steps}: {', '.join(parts)}", flush=True)


def reference_matches_policy(trainer) -> bool | None:
    """True when the trainer's reference model has the policy's weights (None: no reference, beta == 0). A LoRA
    policy's reference is its adapter-disabled model: the reset holds when the fresh adapter changes nothing yet
    (every ``lora_B`` zero, PEFT's initialisation)."""
    import torch

    model = trainer.accelerator.unwrap_model(trainer.model)
    if trainer.ref_model is None and hasattr(model, "peft_config"):
        if trainer.beta == 0.0:
            return None
        return all(not bool(p.any()) for name, p in model.named_parameters() if "lora_B" in name)
    if trainer.ref_model is None:
        return None
    policy = dict(trainer.accelerator.unwrap_model(trainer.model).named_parameters())
    for name, ref_param in trainer.ref_model.named_parameters():
        if name not in policy or not torch.equal(policy[name].detach().cpu(), ref_param.detach().cpu()):
            return False
    return True


def _logged(row: dict) -> dict:
    """The :data:`CURVE_METRICS` of one logged window; one logged as None (a mean over no scored sample: e.g. no line
    the step verifier checks in the window) is left out, not a number."""
    return {name: float(row[key]) for key, name in CURVE_METRICS.items() if row.get(key) is not None}


def training_curve(log_history: list[dict]) -> list[dict]:
    """The logged windows of a GRPO run: ``step`` and each of :data:`CURVE_METRICS` that was logged."""
    curve = []
    for row in log_history:
        point = _logged(row)
        if point:
            curve.append({"step": int(row["step"]), **point})
    return curve


def training_reward_summary(curve: list[dict]) -> dict:
    """Per curve metric: the first, the last and the mean over the logged windows (``train_<name>_first`` ...)."""
    out = {}
    for name in CURVE_METRICS.values():
        values = [p[name] for p in curve if name in p]
        if values:
            out[f"train_{name}_first"] = values[0]
            out[f"train_{name}_last"] = values[-1]
            out[f"train_{name}_mean"] = sum(values) / len(values)
    return out
