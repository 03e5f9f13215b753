"""What `GRPOExtTrainer` keeps from step to step, and what a checkpoint saves of it: the β controller (fed the measured
KL once per optimizer step), the refill draws, the sampler's rollouts and the completions scored so far (a command
line fails a run that scored none). Split off `grpo_ext.trainer` by job: no TRL hook is overridden here, and every
name is the trainer's (its logger too).
"""

from __future__ import annotations

import logging

import torch

from grpo_ext.batching import RefillPrompts, get_zero_std_strategy
from grpo_ext.checkpoints import CHECKPOINT_STATE_FILE, new_kl_controller, restore_kl_controller
from grpo_ext.errors import UserError
from grpo_ext.kl_control import get_kl_controller

__all__ = ["TrainingStateMixin"]

logger = logging.getLogger("grpo_ext.trainer")


class TrainingStateMixin:
    """The state half of `GRPOExtTrainer` (which sets ``_rollouts`` with its sampler); saved whole by
    `grpo_ext.checkpoints.StagedCheckpointsMixin` through `extension_state` / `restore_extension_state`."""

    def _init_extension_state(self, config, refill_pool) -> None:
        self.kl_spec = get_kl_controller(config.kl_controller)  # its registry entry: whether it moves beta
        self.kl_control = new_kl_controller(config)
        self._kl_window: list[tuple[float, float]] = []  # (KL x tokens, tokens) per micro-batch
        self.zero_std = get_zero_std_strategy(config.zero_std_groups)  # its registry entry: what leaves the loss
        self._refill = RefillPrompts(refill_pool, config.seed)  # its draw count is checkpointed
        # Completions of this process with a reward (or a step score, in process mode) the gradient can use: a run
        # that scores none learns nothing from rewards and must not end like one that did. None: unknown (resumed
        # from a checkpoint that did not count).
        self._scored_completions: int | None = 0

    # ---- β ---------------------------------------------------------------------------------------------------------
    def _update_beta(self, inputs) -> None:
        """Once per optimizer step: the window's token-weighted mean KL (as TRL logs it) updates β. A controller that
        does not move β (TRL's fixed one) is fed nothing: no reduction across processes for it."""
        moves_beta = self.kl_spec.moves_beta
        if moves_beta and self.beta != 0.0 and self._metrics["train"]["kl"]:
            # TRL appended this micro-batch's global per-token KL mean; weight it by its global token count, so
            # a micro-batch whose rows were all skipped (no tokens, KL reported as 0) does not pull β down.
            tokens = self.accelerator.reduce(inputs["completion_mask"].sum().float(), reduction="sum").item()
            self._kl_window.append((self._metrics["train"]["kl"][-1] * tokens, tokens))
        if not self.accelerator.sync_gradients:
            return
        total_tokens = sum(t for _, t in self._kl_window)
        if total_tokens > 0:
            n_samples = (
                self.args.per_device_train_batch_size
                * self.current_gradient_accumulation_steps
                * self.accelerator.num_processes
            )
            self.kl_control.update(sum(k for k, _ in self._kl_window) / total_tokens, n_samples)
            self.beta = self.kl_control.beta
        self._kl_window = []
        if moves_beta:  # a constant beta is not logged, as TRL does not: with the extensions off the logs are TRL's
            self._metrics["train"]["beta"].append(self.beta)

    # ---- completions scored ----------------------------------------------------------------------------------------
    def _count_scored(self, scored_rows: torch.Tensor) -> None:
        if self._scored_completions is not None:
            self._scored_completions += int(scored_rows.sum().item())

    def rewards_were_scored(self) -> bool:
        """Whether some completion of the run got a usable reward (a step score in process mode); True when unknown
        (no step yet, or resumed from a checkpoint that did not count)."""
        if self._scored_completions is None or self.state.global_step == 0:
            return True
        local = torch.tensor(float(self._scored_completions), device=self.accelerator.device)
        return self.accelerator.reduce(local, reduction="sum").item() > 0

    def check_rewards_were_scored(self) -> None:
        """For command lines (scripts/train.py, the method runners): a run in which no completion got a usable reward
        learned nothing from its rewards, so it fails (recorded `failed`) instead of saving a model like a run that
        did. The Python API keeps TRL's contract: `train()` only warns."""
        if not self.rewards_were_scored():
            raise UserError(self._unscored_message())

    def _unscored_message(self) -> str:
        if self.gradient_coefficient.needs_step_rewards:
            what = "process_reward_funcs: no step of any completion was scored"
        else:
            what = "reward_funcs: no completion was scored (every weighted reward function returned None or NaN)"
        return (
            f"{what} in {self.state.global_step} steps, so the run learned nothing from rewards; check that the "
            "reward functions read the dataset's columns and the task's completion format"
        )

    # ---- checkpoints (saved whole by StagedCheckpointsMixin) -------------------------------------------------------
    def extension_state(self) -> dict:
        """What a checkpoint keeps of grpo-ext, as JSON: the β controller, the refill draws, the scored count."""
        return {
            "kl_controller": self.kl_control.state_dict(),
            "refill_draws": self._refill.draws,
            "scored_completions": self._scored_completions,
            "sampler_rollouts": self._rollouts,
        }

    def restore_extension_state(self, state: dict | None, checkpoint: str) -> None:
        """Resume from `extension_state()`'s record (None: a checkpoint without one, saved by TRL's GRPOTrainer)."""
        if state is None:
            self._resume_without_state(checkpoint)
            return
        if not isinstance(state.get("kl_controller"), dict):
            raise UserError(f"resume_from_checkpoint: {checkpoint}/{CHECKPOINT_STATE_FILE} has no kl_controller")
        self.kl_control, notes = restore_kl_controller(self.args, state["kl_controller"])
        for note in notes:
            logger.warning("resuming from %s: %s", checkpoint, note)
        self.beta = self.kl_control.beta
        self._refill.draws = int(state.get("refill_draws", 0))
        self._rollouts = int(state.get("sampler_rollouts", 0))
        self._scored_completions = state.get("scored_completions")

    def _resume_without_state(self, checkpoint: str) -> None:
        """Everything TRL needs is in a TRL checkpoint; what only grpo-ext keeps starts from the config, said out loud
        when it matters."""
        self._scored_completions = None  # what the first part of the run scored is unknown
        lost = []
        if self.kl_spec.moves_beta:
            lost.append(f"the {self.kl_spec.name} beta starts again at the config's beta={self.kl_control.beta}")
        if self.zero_std.draws_prompts:
            lost.append(f"{self.zero_std.name} draws start again from the first")
        if lost:
            logger.warning(
                "resuming from %s, which has no %s (a TRL checkpoint?): %s",
                checkpoint,
                CHECKPOINT_STATE_FILE,
                "; ".join(lost),
            )
