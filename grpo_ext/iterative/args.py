"""The iterative loop's own arguments (the policy's GRPO settings are GRPOExtConfig's)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from grpo_ext.errors import UserError
from grpo_ext.iterative.replay import check_replay_ratio
from grpo_ext.iterative.rm_training import REWARD_MODEL_TYPES, check_reward_model_type
from grpo_ext.script_args import parse_task_kwargs

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
)


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
            "choices": list(REWARD_MODEL_TYPES),
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
        check_reward_model_type(self.reward_model_type)
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise UserError(f"iterations: must be an integer >= 1, got {self.iterations!r}")
        check_replay_ratio(self.replay_ratio)
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name}: must be an integer >= 1, got {value!r}")
        if not (self.rm_epochs > 0 and math.isfinite(self.rm_epochs)):
            raise UserError(f"rm_epochs: must be > 0, got {self.rm_epochs}")
        if not (self.rm_learning_rate > 0 and math.isfinite(self.rm_learning_rate)):
            raise UserError(f"rm_learning_rate: must be > 0, got {self.rm_learning_rate}")
        if self.train_size is not None and self.train_size < 1:
            raise UserError(f"train_size: must be >= 1, got {self.train_size}")
