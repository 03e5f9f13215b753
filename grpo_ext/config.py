"""GRPOExtConfig: TRL's GRPOConfig plus the grpo-ext fields. Every default keeps TRL's behaviour."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig

from grpo_ext.advantages import get_gradient_coefficient

ZERO_STD_GROUPS = ("keep", "skip", "refill")
KL_CONTROLLERS = ("fixed", "adaptive")
# Loss types whose reduction averages over sequences (or a fixed B x L): skipping rows needs a B / B_kept factor.
PER_SEQUENCE_LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "luspo")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: unknown value {value!r}; expected one of {', '.join(allowed)}")


@dataclass
class GRPOExtConfig(GRPOConfig):
    """GRPOConfig with process-supervision advantages, zero-std group handling and an adaptive KL coefficient."""

    # --- advantages (DeepSeekMath 4.1.2-4.1.3, 5.2.1) ---
    advantage_mode: str = field(
        default="outcome",
        metadata={
            "help": "Gradient coefficient, a name in grpo_ext.advantages.GRADIENT_COEFFICIENTS: `outcome` (TRL's "
            "GRPO), `process` (per-token advantages from step rewards, DeepSeekMath 4.1.3), `online_rft` (1 for a "
            "correct sample, 0 otherwise), or any name added with register_gradient_coefficient.",
        },
    )
    process_reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Process reward functions (dotted import paths; `step` in scripts/train.py is the task's step "
            "verifier): TRL's reward signature, returning one score per reasoning step for each completion."
        },
    )
    process_reward_model: str | None = field(
        default=None,
        metadata={"help": "Path of an AutoModelForTokenClassification PRM (TRL's PRM format) scored at step ends."},
    )
    step_separator: str | None = field(
        default=None,
        metadata={
            "help": "Separator between reasoning steps; unset: the task's separator in scripts/train.py, "
            "else a newline."
        },
    )
    process_include_outcome: bool = field(
        default=False,
        metadata={"help": "In process mode, add the outcome reward as a last step at the completion's last token."},
    )
    # --- zero-std groups (DAPO's dynamic sampling) ---
    zero_std_groups: str = field(
        default="keep",
        metadata={
            "help": "Groups whose rewards are all equal: `keep` (TRL), `skip` (drop them from the loss, with the "
            "normaliser corrected) or `refill` (generate further groups until the batch has signal).",
            "choices": list(ZERO_STD_GROUPS),
        },
    )
    max_refill_rounds: int = field(
        default=3, metadata={"help": "With `refill`: extra generation rounds at most; what is missing then is skipped."}
    )
    # --- KL coefficient (Ziegler et al. 2019) ---
    kl_controller: str = field(
        default="fixed",
        metadata={
            "help": "`fixed` (TRL: constant beta) or `adaptive` (beta tracks target_kl).",
            "choices": list(KL_CONTROLLERS),
        },
    )
    target_kl: float = field(
        default=0.05, metadata={"help": "Adaptive KL target, in the units TRL logs `kl` (mean per-token KL)."}
    )
    kl_horizon: float = field(default=10_000, metadata={"help": "Adaptive KL horizon, in samples."})
    beta_min: float = field(
        default=1e-6,
        metadata={"help": "Lower clamp of the adaptive beta; > 0 so the reference log-probs are always computed."},
    )
    beta_max: float | None = field(default=None, metadata={"help": "Upper clamp of the adaptive beta (none if unset)."})

    def __post_init__(self):
        super().__post_init__()
        get_gradient_coefficient(self.advantage_mode)  # the registry is the list of modes; its error names the field
        _choice("zero_std_groups", self.zero_std_groups, ZERO_STD_GROUPS)
        _choice("kl_controller", self.kl_controller, KL_CONTROLLERS)
        if self.step_separator == "":
            raise ValueError("step_separator: must be a non-empty string")
        if self.max_refill_rounds < 0:
            raise ValueError(f"max_refill_rounds: must be >= 0, got {self.max_refill_rounds}")
        if self.kl_controller == "adaptive":
            if self.beta == 0.0:
                raise ValueError(
                    "kl_controller: `adaptive` needs beta > 0 as its initial value (with beta == 0 TRL builds no "
                    "reference model, so there is no KL to control)"
                )
            if not (self.target_kl > 0 and math.isfinite(self.target_kl)):
                raise ValueError(f"target_kl: must be a positive number, got {self.target_kl}")
            if not (self.kl_horizon > 0 and math.isfinite(self.kl_horizon)):
                raise ValueError(f"kl_horizon: must be a positive number, got {self.kl_horizon}")
            if not self.beta_min > 0:
                raise ValueError(f"beta_min: must be > 0 with the adaptive controller, got {self.beta_min}")
            if self.beta_max is not None and self.beta_max < self.beta_min:
                raise ValueError(f"beta_max: must be >= beta_min ({self.beta_min}), got {self.beta_max}")
        if self.zero_std_groups == "refill":
            local = self.per_device_train_batch_size * self.steps_per_generation
            if local % self.num_generations != 0:
                raise ValueError(
                    "zero_std_groups: `refill` replaces whole groups on each process, so per_device_train_batch_size "
                    f"x steps_per_generation ({local}) must be a multiple of num_generations ({self.num_generations})"
                )
