"""GRPOExtConfig: TRL's GRPOConfig plus the grpo-ext fields (documented in its class docstring). Every default keeps
TRL's behaviour."""

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
    r"""
    Configuration class for [`~grpo_ext.trainer.GRPOExtTrainer`]: TRL's [`~trl.GRPOConfig`] plus the fields below.

    Every default keeps TRL's behaviour, so a `GRPOExtConfig` with only TRL's fields set trains exactly as
    `GRPOConfig`. Each field is validated in `__post_init__` with a message naming it. Like `GRPOConfig`, it is parsed
    from YAML and the command line by `trl.TrlParser`.

    Parameters:
        > Parameters that control the advantages (the gradient coefficient, DeepSeekMath 4.1.2-4.1.3 and 5.2.1)

        advantage_mode (`str`, *optional*, defaults to `"outcome"`):
            Gradient coefficient: a name in the registry `grpo_ext.advantages.GRADIENT_COEFFICIENTS`. `"outcome"` is
            TRL's GRPO (its advantages are kept as computed), `"process"` gives per-token advantages from step
            rewards (DeepSeekMath 4.1.3), `"online_rft"` gives 1 to a correct sample and 0 otherwise; any name added
            with `register_gradient_coefficient` is accepted. A coefficient that needs step rewards needs
            `process_reward_funcs` or `process_reward_model`.
        process_reward_funcs (`list[str]` or `None`, *optional*, defaults to `None`):
            Process reward functions as dotted import paths (`"step"`, the task's step verifier, when the trainer is
            built by `grpo_ext.assembly.build_grpo_trainer`). Each has TRL's reward signature and returns, for
            every completion, one score per reasoning step (as many as `step_separator` splits it into).
        process_reward_model (`str` or `None`, *optional*, defaults to `None`):
            Path of a process reward model folder in TRL's PRM format (`AutoModelForTokenClassification`), scored
            at each step's last token; added to `process_reward_funcs`.
        step_separator (`str` or `None`, *optional*, defaults to `None`):
            Separator between reasoning steps in a completion. When unset: the task's separator when the trainer is
            built by `build_grpo_trainer`, else a newline. Must be non-empty when set.
        process_include_outcome (`bool`, *optional*, defaults to `False`):
            With step rewards, add each completion's outcome reward as one more step ending at its last token.

        > Parameters that control groups whose rewards are all equal (DAPO's dynamic sampling)

        zero_std_groups (`str`, *optional*, defaults to `"keep"`):
            What to do with groups whose rewards are all equal (no learning signal): `"keep"` (TRL), `"skip"` (drop
            them from the loss, the normaliser corrected) or `"refill"` (generate further groups until the batch
            has signal). `"refill"` needs `per_device_train_batch_size * steps_per_generation` to be a multiple of
            `num_generations`; `"skip"`/`"refill"` with a per-sequence `loss_type` cannot be combined with an entropy
            bonus or a router auxiliary loss.
        max_refill_rounds (`int`, *optional*, defaults to `3`):
            With `"refill"`: extra generation rounds per batch at most (>= 0); groups still without signal are
            then skipped.

        > Parameters that control the KL coefficient β (Ziegler et al. 2019)

        kl_controller (`str`, *optional*, defaults to `"fixed"`):
            `"fixed"` (TRL: `beta` stays constant) or `"adaptive"` (`beta` is the initial value, > 0, and moves each
            optimizer step so the logged per-token `kl` tracks `target_kl`).
        target_kl (`float`, *optional*, defaults to `0.05`):
            Adaptive controller: the KL to steer towards, in the units TRL logs `kl` (mean per-token KL), > 0.
        kl_horizon (`float`, *optional*, defaults to `10000`):
            Adaptive controller: time constant in samples, > 0; one update changes β by a factor of at most
            `1 ± 0.2 * samples / kl_horizon`.
        beta_min (`float`, *optional*, defaults to `1e-6`):
            Adaptive controller: lower clamp of β, > 0 so that the reference log-probs are always computed.
        beta_max (`float` or `None`, *optional*, defaults to `None`):
            Adaptive controller: upper clamp of β (>= `beta_min`); `None` means no upper clamp.
    """

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
            "help": "Process reward functions (dotted import paths; `step` is the task's step verifier when the "
            "trainer is built by grpo_ext.assembly.build_grpo_trainer): TRL's reward signature, returning one "
            "score per reasoning step for each completion."
        },
    )
    process_reward_model: str | None = field(
        default=None,
        metadata={"help": "Path of an AutoModelForTokenClassification PRM (TRL's PRM format) scored at step ends."},
    )
    step_separator: str | None = field(
        default=None,
        metadata={
            "help": "Separator between reasoning steps; unset: the task's separator when the trainer is built by "
            "grpo_ext.assembly.build_grpo_trainer, else a newline."
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
