"""The iterative experiment's own arguments (the policy's GRPO settings are GRPOExtConfig's)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from grpo_ext.errors import UserError
from grpo_ext.experiments.iterative.arms import ARMS, parse_arms, parse_seeds
from grpo_ext.experiments.iterative.replay import check_replay_ratio
from grpo_ext.experiments.iterative.rm_training import REWARD_MODEL_TYPES, RM_INITS, check_reward_model_type
from grpo_ext.script_args import TaskFields

__all__ = ["IterativeArguments"]

_POSITIVE_INTS = (
    "rm_prompts",
    "rm_samples_per_prompt",
    "rm_batch_size",
    "rm_eval_prompts",
    "rm_eval_samples_per_prompt",
    "eval_prompts",
    "eval_samples",
    "sampling_batch_size",
    "workers",
)


@dataclass
class IterativeArguments(TaskFields):
    """The iterative-RL experiment: task, arms, seeds, iterations, reward model, replay, evaluation and guard.

    The task fields are `TaskFields`' (the task needs a verifier; ``train_size`` is the RL prompt pool: the train
    prompts GRPO trains on and the RM's data is sampled on).

    The policy's GRPO settings are GRPOExtConfig's (``max_steps`` = GRPO steps per iteration, ``output_dir`` =
    the run folder; its ``seed`` is replaced by each of ``seeds``) and the base policy is ModelConfig's
    ``model_name_or_path``.
    """

    arms: str = field(
        default="iterative",
        metadata={
            "help": f"Comma-separated arms, some of {', '.join(ARMS)}: the RM retrained every iteration, the "
            "iteration-0 RM throughout, the rule-based verifier (grpo_ext.experiments.iterative.arms)."
        },
    )
    seeds: str | None = field(
        default=None,
        metadata={"help": "Comma-separated seeds, one run of every arm each (default: the training seed)."},
    )
    workers: int = field(
        default=1, metadata={"help": "Runs (arm x seed) at a time, each in its own process (one per core)."}
    )
    iterations: int = field(default=2, metadata={"help": "Iterations of (train policy, resample, retrain RM); >= 1."})
    reward_model_type: str = field(
        default="process",
        metadata={
            "help": "`process`: token-classification PRM (TRL's PRM format) trained on the step verifier's labels, "
            "scored at step ends, with advantage_mode process; `outcome`: sequence-classification RM, one logit, "
            "trained on the verifier's verdicts, used as a reward function.",
            "choices": list(REWARD_MODEL_TYPES),
        },
    )
    rm_init: str = field(
        default="policy",
        metadata={
            "help": "The RM's weights at iteration 0: `policy` (the base policy's body, a new head) or `scratch` "
            "(the policy's architecture, random weights).",
            "choices": list(RM_INITS),
        },
    )
    replay_ratio: float = field(
        default=0.1,
        metadata={"help": "Historical records replayed per new RM record (a fraction of the new set), in [0, 1]."},
    )
    rm_prompts: int = field(default=512, metadata={"help": "Pool prompts sampled per iteration for RM data."})
    rm_samples_per_prompt: int = field(default=8, metadata={"help": "Policy samples per prompt for RM data."})
    rm_epochs: float = field(default=2.0, metadata={"help": "RM training epochs over each later iteration's set."})
    rm_initial_epochs: float | None = field(
        default=None, metadata={"help": "RM epochs at iteration 0, from its initial weights (default rm_epochs)."}
    )
    rm_learning_rate: float = field(default=5e-4, metadata={"help": "RM learning rate (AdamW, linear decay)."})
    rm_lora_r: int = field(
        default=0,
        metadata={
            "help": "0: the RM's every weight is trained (float32). > 0: a LoRA adapter of this rank on every linear "
            "layer of the RM's body and its whole new head, the body frozen in rm_dtype; merged after each update, "
            "so the saved RM is a plain token/sequence-classification folder the reward sources load as they are."
        },
    )
    rm_lora_alpha: int = field(default=32, metadata={"help": "The RM adapter's LoRA alpha (with rm_lora_r > 0)."})
    rm_dtype: str = field(
        default="float32",
        metadata={
            "help": "The RM's weights (its frozen body with rm_lora_r > 0) as trained, saved and scored: `float32`, "
            "or `bfloat16` (4.7x faster matmuls on CPUs with native bf16; needs rm_lora_r > 0: bf16 weights are "
            "never trained with Adam directly).",
            "choices": ["float32", "bfloat16"],
        },
    )
    rm_batch_size: int = field(default=64, metadata={"help": "RM training batch size."})
    rm_eval_prompts: int = field(
        default=256,
        metadata={
            "help": "Pool prompts of the RM's measurement set: fresh samples of the current policy, never trained "
            "on, on the prompts GRPO is rewarded on."
        },
    )
    rm_heldout_prompts: int = field(
        default=256,
        metadata={"help": "Validation prompts of the RM's held-out measurement set (0: none, for tasks without one)."},
    )
    rm_eval_samples_per_prompt: int = field(default=2, metadata={"help": "Fresh policy samples per RM eval prompt."})
    eval_prompts: int = field(default=200, metadata={"help": "Test prompts for the policy's pass@1 / maj@k."})
    eval_samples: int = field(default=16, metadata={"help": "Samples per test prompt (k of maj@k); >= 1."})
    sampling_batch_size: int = field(default=16, metadata={"help": "Prompts per sampling batch."})
    log_verifier_reward: bool = field(
        default=True,
        metadata={
            "help": "Also log the verifier's rewards during GRPO (weight 0: they never train the policy): the "
            "outcome verifier and, with a step verifier, its mean step score. The hacking gap is read from them."
        },
    )
    collapse_guard_margin: float | None = field(
        default=None,
        metadata={
            "help": "Off when unset. Stop an iteration's GRPO early when the verifier reward (each logged value: a "
            "mean over logging_steps steps) falls more than this below its first logged value of the iteration; "
            "the policy of that step is kept and the next iteration starts from it."
        },
    )
    start_sha256: str | None = field(
        default=None,
        metadata={
            "help": "The sha256 of the policy start's weights (a study start's `model_sha256` in its start.json, over "
            "the folder's safetensors files): another model at model_name_or_path is refused before any job."
        },
    )
    expectations: dict | str | None = field(
        default=None,
        metadata={
            "help": "What the experiment is expected to show, judged on test (written before the run): a mapping of "
            "name -> {arm, against (an arm or `base`: the policy start), metric, text, min_difference, slices}, "
            "as a study's expectations (grpo_ext.experiments.study.expectations), on each arm's last iteration."
        },
    )
    budget: dict | str | None = field(
        default=None,
        metadata={
            "help": "Planning rates and the limit of `scripts/iterative.py --estimate` "
            "(grpo_ext.experiments.iterative.budget): core_hours, grpo_seconds_per_sequence, rm_seconds_per_record, "
            "rm_scores_per_second, sampling_seconds_per_prompt, sampling_seconds_per_sample."
        },
    )
    resume: bool = field(default=True, metadata={"help": "Resume from output_dir's state when there is one."})
    report_dir: str | None = field(
        default=None, metadata={"help": "Where the report goes (default <output_dir>/report)."}
    )

    def __post_init__(self):
        super().__post_init__()
        check_reward_model_type(self.reward_model_type)
        if self.rm_init not in RM_INITS:
            raise UserError(f"rm_init: unknown value {self.rm_init!r}; expected one of {', '.join(RM_INITS)}")
        self.arm_list = parse_arms(self.arms)
        self.seed_list = parse_seeds(self.seeds) if self.seeds is not None else None
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise UserError(f"iterations: must be an integer >= 1, got {self.iterations!r}")
        check_replay_ratio(self.replay_ratio)
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name}: must be an integer >= 1, got {value!r}")
        for name in ("rm_epochs", "rm_initial_epochs", "rm_learning_rate"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise UserError(f"{name}: must be > 0, got {value}")
        if isinstance(self.rm_heldout_prompts, bool) or self.rm_heldout_prompts < 0:
            raise UserError(f"rm_heldout_prompts: must be an integer >= 0, got {self.rm_heldout_prompts!r}")
        if isinstance(self.rm_lora_r, bool) or not isinstance(self.rm_lora_r, int) or self.rm_lora_r < 0:
            raise UserError(f"rm_lora_r: must be an integer >= 0 (0: no LoRA), got {self.rm_lora_r!r}")
        if self.rm_dtype not in ("float32", "bfloat16"):
            raise UserError(f"rm_dtype: expected float32 or bfloat16, got {self.rm_dtype!r}")
        if self.rm_dtype == "bfloat16" and self.rm_lora_r == 0:
            raise UserError("rm_dtype: bfloat16 needs rm_lora_r > 0 (a full fine-tune would train bf16 weights)")
        sha = self.start_sha256
        if sha is not None and not (isinstance(sha, str) and len(sha) == 64 and set(sha) <= set("0123456789abcdef")):
            raise UserError(f"start_sha256: expected 64 lowercase hex digits (start.json's model_sha256), got {sha!r}")
        for name in ("expectations", "budget"):  # a mapping in YAML, a JSON object on the command line
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    raise UserError(f"{name}: expected a JSON object, got {value!r}") from None
            if value is not None and not isinstance(value, dict):
                raise UserError(f"{name}: expected a mapping, got {value!r}")
            setattr(self, name, value)
        margin = self.collapse_guard_margin
        if margin is not None:
            if not (margin > 0 and math.isfinite(margin)):
                raise UserError(f"collapse_guard_margin: must be > 0 (a drop in verifier reward), got {margin}")
            if not self.log_verifier_reward:
                raise UserError("collapse_guard_margin: the guard watches the verifier reward; set log_verifier_reward")
