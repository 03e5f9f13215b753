"""GRPOExtTrainer: TRL's GRPOTrainer with process-supervision advantages, zero-std groups and an adaptive β.

Plumbing only: the math is in `grpo_ext.advantages` and `grpo_ext.kl_control`. Three TRL hooks are wrapped,
each calling `super()` first:

- `_calculate_rewards` keeps the gathered outcome rewards and scores each local completion's steps;
- `_generate_and_score_completions` replaces the advantages (process / online RFT), decides which groups have
  no signal, refills or masks them;
- `_compute_loss` corrects the per-sequence normaliser for masked rows and feeds the KL to the β controller.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import is_async_callable

from grpo_ext.advantages import get_gradient_coefficient, zero_std_mask
from grpo_ext.batching import replace_rows
from grpo_ext.config import PER_SEQUENCE_LOSS_TYPES, GRPOExtConfig
from grpo_ext.hub import trainer_model_card
from grpo_ext.io import atomic_write_json
from grpo_ext.kl_control import AdaptiveKLController, FixedKLController
from grpo_ext.modeling import prepare_quantized_policy
from grpo_ext.rewards import load_callable
from grpo_ext.rewards.checked import checked_reward_func
from grpo_ext.rewards.process import build_step_rewards, score_steps

#: grpo-ext's own trainer state, written into every checkpoint folder next to TRL's files (β controller, refill draws).
CHECKPOINT_STATE_FILE = "grpo_ext_state.json"


class GRPOExtTrainer(GRPOTrainer):
    """GRPOTrainer plus `GRPOExtConfig`'s extensions; with them off it trains exactly as GRPOTrainer.

    `process_reward_funcs`: callables with TRL's reward signature returning one score per step for each
    completion (or dotted paths); when None, `args.process_reward_funcs` (dotted paths) is used.
    """

    def __init__(self, *args, process_reward_funcs: list[Callable | str] | None = None, **kwargs):
        if kwargs.get("reward_funcs") is not None:  # plain sync callables get their output checked by name
            funcs = kwargs["reward_funcs"]
            funcs = funcs if isinstance(funcs, list) else [funcs]
            kwargs["reward_funcs"] = [
                f if isinstance(f, (str, torch.nn.Module)) or is_async_callable(f) else checked_reward_func(f)
                for f in funcs
            ]
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, GRPOExtConfig):
            raise TypeError(f"GRPOExtTrainer needs a GRPOExtConfig, got {type(self.args).__name__}")
        config = self.args
        self.gradient_coefficient = get_gradient_coefficient(config.advantage_mode)
        self.step_separator = config.step_separator or "\n"
        self.process_reward_funcs = self._resolve_process_rewards(process_reward_funcs)
        if self.gradient_coefficient.needs_step_rewards and not self.process_reward_funcs:
            raise ValueError(
                f"advantage_mode: `{config.advantage_mode}` needs step rewards: set process_reward_funcs or "
                "process_reward_model"
            )
        if (
            config.zero_std_groups != "keep"
            and self.loss_type in PER_SEQUENCE_LOSS_TYPES
            and (self._entropy_bonus_enabled or self.aux_loss_enabled)
        ):
            raise ValueError(
                f"zero_std_groups: `{config.zero_std_groups}` with loss_type `{self.loss_type}` cannot be combined "
                "with an entropy bonus or router aux loss (their token-mean terms would be rescaled)"
            )
        if config.zero_std_groups == "refill" and self._is_vlm:
            raise ValueError("zero_std_groups: `refill` does not support vision-language models")
        if config.kl_controller == "adaptive":
            self.kl_control = AdaptiveKLController(
                config.beta,
                config.target_kl,
                config.kl_horizon,
                beta_min=config.beta_min,
                beta_max=config.beta_max if config.beta_max is not None else math.inf,
            )
        else:
            self.kl_control = FixedKLController(config.beta)
        self._kl_window: list[tuple[float, float]] = []  # (KL x tokens, tokens) per micro-batch
        self._refill_draws = 0  # refill prompt draws so far: saved in checkpoints so a resumed run draws the same
        # What `_calculate_rewards` scored for the batch being built, read back in `_score_batch`: the gathered
        # `rewards_per_func` and, with process rewards, this process's `steps` (one ScoredSteps per completion).
        self._batch_rewards: dict[str, Any] = {}
        # CPU 4-bit: keep LoRA gradients right after eval-mode passes (bitsandbytes repacks), LoRA in fp32.
        prepare_quantized_policy(self.model)

    def _resolve_process_rewards(self, funcs: list[Callable | str] | None) -> list[Callable]:
        config = self.args
        funcs = list(funcs if funcs is not None else config.process_reward_funcs or [])
        resolved = [f if callable(f) else load_callable(f, "process_reward_funcs") for f in funcs]
        if config.process_reward_model:
            from grpo_ext.rewards.prm import ProcessRewardModel

            resolved.append(ProcessRewardModel(config.process_reward_model, config.step_separator or "\n"))
        return resolved

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL writes README.md on checkpoint saves and push_to_hub: the grpo-ext card instead."""
        if not self.is_world_process_zero():
            return
        card = trainer_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags)
        card.save(os.path.join(self.args.output_dir, "README.md"))

    # ---- rewards ----------------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._batch_rewards = {"rewards_per_func": rewards_per_func}
        if self.process_reward_funcs:
            reward_kwargs = {
                k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")
            }
            reward_kwargs.update(
                trainer_state=self.state, log_extra=self._log_completion_extra, log_metric=self._log_metric
            )
            self._batch_rewards["steps"] = score_steps(
                self.process_reward_funcs,
                self._tokenizer,
                self.step_separator,
                prompts,
                completions,
                completion_ids_list,
                reward_kwargs,
            )
        return rewards_per_func

    def _outcome_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """The weighted sum TRL normalises (NaN where every reward function returned None)."""
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return rewards

    # ---- advantages and zero-std groups -------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        output = self._score_batch(super()._generate_and_score_completions(inputs))
        if not self.model.training or self.args.zero_std_groups == "keep":
            return output
        metrics, group = self._metrics["train"], self.num_generations
        no_signal_rows = output.pop("_no_signal_rows")  # this process's rows of the groups without signal
        metrics["zero_std/frac_groups"].append(self._global_mean(no_signal_rows))
        if self.args.zero_std_groups == "refill":  # local batches hold whole groups (checked in the config)
            rounds, no_signal = 0, no_signal_rows.view(-1, group)[:, 0].clone()
            while rounds < self.args.max_refill_rounds and self._global_any(no_signal):
                rounds += 1
                fresh = self._score_batch(super()._generate_and_score_completions(self._draw_refill_inputs()))
                fresh_signal = (~fresh.pop("_no_signal_rows").view(-1, group)[:, 0]).nonzero().flatten().tolist()
                missing = no_signal.nonzero().flatten().tolist()
                n = min(len(missing), len(fresh_signal))
                if n:
                    dst = [g * group + j for g in missing[:n] for j in range(group)]
                    src = [g * group + j for g in fresh_signal[:n] for j in range(group)]
                    output = replace_rows(output, fresh, dst, src, pad_token_id=self._tokenizer.pad_token_id)
                    no_signal[missing[:n]] = False
            no_signal_rows = no_signal.repeat_interleave(group)
            metrics["zero_std/refill_rounds"].append(float(rounds))
        # What still has no signal leaves the loss: its rows are masked and the token count recomputed.
        keep_rows = ~no_signal_rows.to(output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * keep_rows.unsqueeze(1).to(
            output["completion_mask"].dtype
        )
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        output["zero_std_keep"] = keep_rows.float()
        skipped_rows = self.accelerator.gather(no_signal_rows.sum().reshape(1).to(self.accelerator.device)).sum()
        metrics["zero_std/groups_skipped"].append(skipped_rows.item() / group)
        return output

    def _score_batch(self, output: dict) -> dict:
        """Replace TRL's advantages by the configured gradient coefficient; flag the rows of no-signal groups."""
        mode = "train" if self.model.training else "eval"
        filtering = mode == "train" and self.args.zero_std_groups != "keep"
        keeps_trl = self.gradient_coefficient.keeps_trl_advantages
        if keeps_trl and "steps" not in self._batch_rewards and not filtering:
            return output  # TRL's own batch, untouched: nothing to add on this path
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._outcome_rewards(self._batch_rewards["rewards_per_func"])  # gathered, (N,)
        n_local = output["completion_ids"].shape[0]
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)

        step_rewards, width = None, output["completion_ids"].shape[1]
        if "steps" in self._batch_rewards:
            local_steps = build_step_rewards(
                self._batch_rewards["steps"],
                output["completion_mask"],
                outcome=rewards[local] if self.args.process_include_outcome else None,
            )
            padded = self.accelerator.pad_across_processes(local_steps, dim=1, pad_index=float("nan"))
            step_rewards = self.accelerator.gather(padded)  # (N, T_max): group statistics over all processes
            self._log_step_metrics(local_steps, mode)

        if not keeps_trl:  # outcome: keep TRL's own advantages, bit for bit
            advantages = self.gradient_coefficient(
                rewards=rewards, step_rewards=step_rewards, group_size=group, scale=self.scale_rewards != "none"
            )
            advantages = advantages[local]
            output["advantages"] = advantages[:, :width] if advantages.dim() == 2 else advantages

        if filtering:
            signal_source = step_rewards if self.gradient_coefficient.needs_step_rewards else rewards
            no_signal = zero_std_mask(signal_source, group)  # (N // group,), over all processes
            output["_no_signal_rows"] = no_signal.repeat_interleave(group)[local].cpu()
        return output

    def _log_step_metrics(self, local_steps: torch.Tensor, mode: str) -> None:
        present = ~torch.isnan(local_steps)
        stats = torch.stack(
            [present.sum().float(), torch.nan_to_num(local_steps).sum(), torch.tensor(float(len(local_steps)))]
        )
        total = self.accelerator.reduce(stats.to(self.accelerator.device), reduction="sum")
        self._metrics[mode]["process/steps_per_completion"].append((total[0] / total[2].clamp(min=1)).item())
        self._metrics[mode]["process/step_reward_mean"].append((total[1] / total[0].clamp(min=1)).item())

    def _draw_refill_inputs(self) -> list[dict]:
        """A fresh generation batch laid out like TRL's RepeatSampler: same draw on every process, own slice."""
        generator = torch.Generator().manual_seed(self.args.seed * 1_000_003 + self._refill_draws)
        self._refill_draws += 1
        n_prompts = self.args.generation_batch_size // self.num_generations
        indices = torch.randperm(len(self.train_dataset), generator=generator)[:n_prompts].tolist()
        rows = [self.train_dataset[i] for i in indices for _ in range(self.num_generations)]
        n_local = len(rows) // self.accelerator.num_processes
        rank = self.accelerator.process_index
        return rows[rank * n_local : (rank + 1) * n_local]

    def _global_any(self, flags: torch.Tensor) -> bool:
        """Same answer on every process, so every process runs the same number of refill rounds."""
        count = flags.sum().reshape(1).to(self.accelerator.device)
        return bool(self.accelerator.gather(count).sum().item() > 0)

    def _global_mean(self, flags: torch.Tensor) -> float:
        stats = torch.tensor([flags.sum().item(), flags.numel()], dtype=torch.float32, device=self.accelerator.device)
        total = self.accelerator.reduce(stats, reduction="sum")
        return (total[0] / total[1].clamp(min=1)).item()

    # ---- loss and β --------------------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        keep = inputs.get("zero_std_keep")
        if keep is not None and self.loss_type in PER_SEQUENCE_LOSS_TYPES:
            # grpo/sapo/luspo average over the B rows and dr_grpo divides by B * L: masked rows still count in
            # B, so rescale to the mean over the kept rows (a micro-batch with none kept contributes 0).
            kept = keep.sum()
            loss = loss * (keep.numel() / kept) if kept > 0 else loss * 0.0
        if self.model.training:
            self._update_beta(inputs)
        return loss

    def _update_beta(self, inputs) -> None:
        """Once per optimizer step: the window's token-weighted mean KL (as TRL logs it) updates β."""
        adaptive = isinstance(self.kl_control, AdaptiveKLController)
        if adaptive and self.beta != 0.0 and self._metrics["train"]["kl"]:
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
        self._metrics["train"]["beta"].append(self.beta)

    # ---- checkpoints -------------------------------------------------------------------------------------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if not self.args.should_save:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        state = {"kl_controller": self.kl_control.state_dict(), "refill_draws": self._refill_draws}
        # Atomic: never a torn state file next to a checkpoint.
        atomic_write_json(os.path.join(folder, CHECKPOINT_STATE_FILE), state)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, CHECKPOINT_STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"resume_from_checkpoint: {checkpoint} has no {CHECKPOINT_STATE_FILE} (not a grpo-ext checkpoint?)"
            )
        with open(path) as f:
            state = json.load(f)
        self.kl_control.load_state_dict(state["kl_controller"])
        self.beta = self.kl_control.beta
        self._refill_draws = int(state["refill_draws"])
