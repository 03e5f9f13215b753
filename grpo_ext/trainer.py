"""GRPOExtTrainer: TRL's GRPOTrainer with process-supervision advantages, zero-std groups and an adaptive β.

Plumbing only: the math is in `grpo_ext.advantages` and `grpo_ext.kl_control`. Three TRL hooks are wrapped,
each calling `super()` first:

- `_calculate_rewards` tells every reward function which samples the length cap cut off (`completion_truncated`),
  keeps the gathered outcome rewards and scores each local completion's steps;
- `_generate_and_score_completions` replaces the advantages (process / online RFT; per-token advantages are capped
  so that no wrong or cut-off sample outranks a finished right one of its group, `cap_to_right_samples`), decides
  which groups have no signal, refills or masks them;
- `_compute_loss` replaces TRL's micro-batch normaliser by the generation batch's kept rows (skipped groups) and
  feeds the KL to the β controller;
- `_get_per_token_logps_and_entropies` / `_prepare_inputs` forward each group's prompt once and keep groups whole in
  micro-batches (`share_prompt_forward`, `grpo_ext.shared_prompt`);
- `_generate` / `_generate_single_turn` draw the completions with grpo-ext's sampler (`generation_backend: sampler`,
  `grpo_ext.rollouts`) instead of transformers' `generate`.

Checkpoints are saved whole, with grpo-ext's state (`grpo_ext.trainer_state`: the β controller, refill draws, scored
completions), by `grpo_ext.checkpoints.StagedCheckpointsMixin`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import is_async_callable

from grpo_ext.advantages import cap_to_right_samples, get_gradient_coefficient, zero_std_mask
from grpo_ext.batching import GRPO_LOSS_TYPES, KEPT_NORMALISER
from grpo_ext.checkpoints import CHECKPOINT_STATE_FILE, StagedCheckpointsMixin
from grpo_ext.config import GRPOExtConfig
from grpo_ext.errors import user_input
from grpo_ext.model_files import check_weights
from grpo_ext.policy_loading import prepare_quantized_policy
from grpo_ext.rewards import load_callable
from grpo_ext.rewards.checked import check_reward_weights, checked_reward_func
from grpo_ext.rewards.process import build_step_rewards, score_steps
from grpo_ext.rollouts import rollout_seed, sample_completions, sampler_settings_of
from grpo_ext.shared_prompt import SharedPromptForwardMixin
from grpo_ext.tasks.base import TRUNCATED, completion_text, truncated_at_cap
from grpo_ext.trainer_state import TrainingStateMixin
from grpo_ext.validation import check_combinations, check_training_ranges, context_overflow

__all__ = ["CHECKPOINT_STATE_FILE", "KEPT_NORMALISER", "GRPOExtTrainer"]

logger = logging.getLogger(__name__)


def _own_process_state(config) -> None:
    """Make the trainer set accelerate's process-wide state up from `config` itself.

    `TrainingArguments._setup_devices` is a cached property that also initialises accelerate's `PartialState`, one
    per process and shared by every trainer in it. A config copied after its device was read (`copy.deepcopy`, or
    pickled to a worker process, as the iterative loop and the study do) carries the cached device but not the state:
    the trainer's `Accelerator` then initialises the state afresh on the default device (cuda:0 on a GPU machine)
    while the model goes to the cached one (the CPU under `use_cpu`), and generation fails on the mismatch. The
    cached value is dropped and computed again here, before `Trainer.__init__` makes its `Accelerator` (which it does
    before reading the device itself), as it is for a freshly made config.
    """
    config.__dict__.pop("_setup_devices", None)
    config._setup_devices  # noqa: B018 - the property's side effect (the process state) is the point


def _as_ext_config(config, model) -> GRPOExtConfig:
    """The trainer's config as a `GRPOExtConfig`: TRL's default when there is none (`GRPOConfig("<model>-GRPO")`), a
    plain `trl.GRPOConfig` with every extension at its default (TRL's behaviour), checked before the model loads."""
    if isinstance(config, GRPOExtConfig):
        return config
    if config is None:
        from trl.trainer.utils import get_config_model_id

        name = model if isinstance(model, str) else get_config_model_id(model.config)
        return GRPOExtConfig(f"{name.split('/')[-1]}-GRPO")
    if isinstance(config, GRPOConfig):
        return GRPOExtConfig.from_grpo_config(config)
    raise TypeError(f"GRPOExtTrainer: args must be a GRPOConfig or GRPOExtConfig, got {type(config).__name__}")


class GRPOExtTrainer(SharedPromptForwardMixin, StagedCheckpointsMixin, TrainingStateMixin, GRPOTrainer):
    """GRPOTrainer plus `GRPOExtConfig`'s extensions; with them off it trains exactly as GRPOTrainer.

    `process_reward_funcs`: callables with TRL's reward signature returning one score per step for each
    completion (or dotted paths); when None, `args.process_reward_funcs` (dotted paths) is used.
    `refill_dataset`: the prompts refill rounds draw from (default: the training dataset); give rows the run does not
    otherwise read (`grpo_ext.assembly` does) so that no prompt is trained on twice.
    """

    #: How many more completions this process may generate, read before each refill round (None: no limit beyond
    #: `max_refill_rounds`). A run at a sample budget sets it (`grpo_ext.methods`) so that refills never pass it.
    refill_allowance: Callable[[], int] | None = None

    def __init__(self, *args, process_reward_funcs: list[Callable | str] | None = None, refill_dataset=None, **kwargs):
        model = kwargs.get("model", args[0] if args else None)
        # A drop-in for GRPOTrainer: no config, or a plain trl.GRPOConfig, trains as TRL does (extensions off).
        config = _as_ext_config(kwargs.get("args", args[2] if len(args) > 2 else None), model)
        if len(args) > 2:
            args = (*args[:2], config, *args[3:])
        else:
            kwargs["args"] = config
        check_training_ranges(config, loss_types=GRPO_LOSS_TYPES)  # bad numbers fail here, before any model loads
        _own_process_state(config)
        if isinstance(model, str) and os.path.isdir(model):
            check_weights(model, "model_name_or_path")  # a torn or missing weights file, named
        if kwargs.get("reward_funcs") is not None:  # plain sync callables get their output checked by name
            funcs = kwargs["reward_funcs"]
            funcs = funcs if isinstance(funcs, list) else [funcs]
            check_reward_weights(funcs, config.reward_weights)  # TRL's own check is a bare ValueError
            kwargs["reward_funcs"] = [
                f if isinstance(f, (str, torch.nn.Module)) or is_async_callable(f) else checked_reward_func(f)
                for f in funcs
            ]
        super().__init__(*args, **kwargs)
        config = self.args
        self.gradient_coefficient = get_gradient_coefficient(config.advantage_mode)
        self.step_separator = config.step_separator or "\n"
        self.process_reward_funcs = self._resolve_process_rewards(process_reward_funcs)
        check_combinations(self)
        overflow = context_overflow(self)
        if overflow:  # TRL takes it; scripts/train.py refuses it
            logger.warning("%s", overflow)
        self._init_extension_state(config, self.train_dataset if refill_dataset is None else refill_dataset)
        # What `_calculate_rewards` scored for the batch being built, read back in `_score_batch`: the gathered
        # `rewards_per_func` and, with process rewards, this process's `steps` (one ScoredSteps per completion).
        self._batch_rewards: dict[str, Any] = {}
        # CPU 4-bit: keep LoRA gradients right after eval-mode passes (bitsandbytes repacks), LoRA in fp32.
        prepare_quantized_policy(self.model)
        self._sampler = sampler_settings_of(self)  # None: TRL's own generation
        self._rollouts = 0  # generation rounds drawn by the sampler (each gets its own seed); checkpointed
        self._prompts_in_generation: list | None = None
        self._init_shared_prompt(config)

    def _resolve_process_rewards(self, funcs: list[Callable | str] | None) -> list[Callable]:
        config = self.args
        funcs = list(funcs if funcs is not None else config.process_reward_funcs or [])
        resolved = [f if callable(f) else load_callable(f, "process_reward_funcs") for f in funcs]
        if config.process_reward_model:  # any PRM format, on this process's device (one copy per process)
            from grpo_ext.rewards.prm import process_reward_model_from_config

            with user_input("process_reward_model"):  # a folder that is no PRM: one line naming it
                resolved.append(process_reward_model_from_config(config, self.accelerator))
        return resolved

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL writes README.md on checkpoint saves and push_to_hub: the grpo-ext card instead."""
        if not self.is_world_process_zero():
            return
        from grpo_ext.hub.card import trainer_model_card  # here: the card's report stack only when a card is written

        card = trainer_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags)
        card.save(os.path.join(self.args.output_dir, "README.md"))

    # ---- rewards ----------------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Every reward function is told which samples the length cap cut off (`completion_truncated`): the task's
        # rewards give them no answer and their cut line no step score (grpo_ext.tasks.base.TRUNCATED).
        end_ids = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        truncated = [
            truncated_at_cap(
                ids,
                completion_text(c),
                max_length=self.max_completion_length,
                end_ids=end_ids,
                stop_strings=self.args.stop_strings or (),
            )
            for ids, c in zip(completion_ids_list, completions, strict=True)
        ]
        inputs = [{**x, TRUNCATED: t} for x, t in zip(inputs, truncated, strict=True)]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._batch_rewards = {"rewards_per_func": rewards_per_func, "truncated": truncated}
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

    # ---- generation ------------------------------------------------------------------------------------------
    def _generate(self, prompts):
        self._prompts_in_generation = prompts  # the sampler seeds each sample by its prompt, as the harness does
        try:
            return super()._generate(prompts)
        finally:
            self._prompts_in_generation = None

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self._sampler is None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        seed = rollout_seed(self.args.seed, self._rollouts, self.accelerator.process_index)
        self._rollouts += 1
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            was_training = model.training
            model.eval()  # no dropout while sampling, as in the harness (and vLLM)
            try:
                completion_ids = sample_completions(model, prompt_ids, self._prompts_in_generation, seed, self._sampler)
            finally:
                model.train(was_training)
        return completion_ids, None  # no sampling log-probs: TRL computes the old ones itself, as after generate

    # ---- advantages and zero-std groups -------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        output = self._score_batch(super()._generate_and_score_completions(inputs))
        if not self.model.training or not self.zero_std.drops_groups:
            return output
        metrics, group = self._metrics["train"], self.num_generations
        no_signal_rows = output.pop("_no_signal_rows")  # this process's rows of the groups without signal
        metrics["zero_std/frac_groups"].append(self._global_mean(no_signal_rows))
        if self.zero_std.fill is not None:  # the strategy's own (refill: fresh groups replace groups without signal)
            output, no_signal = self.zero_std.fill(self, output, no_signal_rows.view(-1, group)[:, 0].clone())
            no_signal_rows = no_signal.repeat_interleave(group)
        # What still has no signal leaves the loss: its rows are masked and the token count recomputed.
        keep_rows = ~no_signal_rows.to(output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * keep_rows.unsqueeze(1).to(
            output["completion_mask"].dtype
        )
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        output["zero_std_keep"] = keep_rows.float()
        # Kept rows of the whole generation batch (every process): the normaliser every micro-batch's loss uses.
        output["zero_std_kept_rows"] = self.accelerator.gather(keep_rows.sum().reshape(1)).sum().float()
        skipped_rows = self.accelerator.gather(no_signal_rows.sum().reshape(1).to(self.accelerator.device)).sum()
        metrics["zero_std/groups_skipped"].append(skipped_rows.item() / group)
        return output

    def _score_batch(self, output: dict) -> dict:
        """Replace TRL's advantages by the configured gradient coefficient; flag the rows of no-signal groups."""
        mode = "train" if self.model.training else "eval"
        filtering = mode == "train" and self.zero_std.drops_groups
        keeps_trl = self.gradient_coefficient.keeps_trl_advantages
        rewards_per_func = self._batch_rewards["rewards_per_func"]  # gathered, (N, reward functions)
        n_local = output["completion_ids"].shape[0]
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)
        if mode == "train" and "steps" not in self._batch_rewards:
            trains = self.reward_weights.to(rewards_per_func.device) != 0  # a weight-0 (logged) reward trains nothing
            self._count_scored(~torch.isnan(rewards_per_func[local][:, trains]).all(dim=1))
        if keeps_trl and "steps" not in self._batch_rewards and not filtering:
            return output  # TRL's own batch, untouched: nothing to add on this path
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._outcome_rewards(rewards_per_func)  # gathered, (N,)

        step_rewards, width = None, output["completion_ids"].shape[1]
        if "steps" in self._batch_rewards:
            local_steps = build_step_rewards(
                self._batch_rewards["steps"],
                output["completion_mask"],
                outcome=rewards[local] if self.args.process_include_outcome else None,
            )
            if mode == "train":
                self._count_scored(~torch.isnan(local_steps).all(dim=1))
            padded = self.accelerator.pad_across_processes(local_steps, dim=1, pad_index=float("nan"))
            step_rewards = self.accelerator.gather(padded)  # (N, T_max): group statistics over all processes
            self._log_step_metrics(local_steps, mode)

        advantages = None
        if not keeps_trl:  # outcome: keep TRL's own advantages, bit for bit
            advantages = self.gradient_coefficient(
                rewards=rewards, step_rewards=step_rewards, group_size=group, scale=self.scale_rewards != "none"
            )
            if step_rewards is not None and advantages.dim() == 2:
                advantages = self._cap_to_right_samples(advantages, rewards, group)
            local_advantages = advantages[local]
            output["advantages"] = local_advantages[:, :width] if local_advantages.dim() == 2 else local_advantages

        if filtering:
            output["_no_signal_rows"] = (
                self._no_signal_groups(rewards, advantages, group).repeat_interleave(group)[local].cpu()
            )
        return output

    def _cap_to_right_samples(self, advantages: torch.Tensor, rewards: torch.Tensor, group: int) -> torch.Tensor:
        """Per-token advantages where no wrong or cut-off sample outranks a finished right one of its group
        (`cap_to_right_samples`); right: outcome reward > 0 (online RFT's rule for 0/1 verifiers) and not cut off."""
        device = advantages.device
        local_cut = torch.tensor(self._batch_rewards["truncated"], dtype=torch.bool, device=self.accelerator.device)
        local_lengths = torch.tensor(
            [s.length for s in self._batch_rewards["steps"]], dtype=torch.long, device=self.accelerator.device
        )
        cut = self.accelerator.gather(local_cut).to(device)
        lengths = self.accelerator.gather(local_lengths).to(device)
        right = (rewards.to(device) > 0) & ~cut  # NaN > 0 is False: an unscored sample is not right
        return cap_to_right_samples(advantages, right, lengths, group)

    def _no_signal_groups(self, rewards: torch.Tensor, advantages: torch.Tensor | None, group: int) -> torch.Tensor:
        """`(N // group,)` True where every gradient coefficient of the group is 0: nothing to learn from it.

        For TRL's own advantages (outcome), the groups whose rewards are all equal (`zero_std_mask`: exactly the
        groups TRL gives 0, without its rounding noise); with `normalize_then_sum`, the groups where every reward
        function is constant. For a gradient coefficient of ours, read off the coefficients themselves: for process
        supervision that is again "all step rewards equal", but online RFT gives a group whose samples are all correct
        a coefficient of 1 each, so only an all-wrong group has no signal there.
        """
        if advantages is not None:
            return (advantages == 0).reshape(advantages.shape[0] // group, -1).all(dim=1)
        if self.multi_objective_aggregation == "normalize_then_sum":
            per_func = self._batch_rewards["rewards_per_func"]
            return torch.stack([zero_std_mask(per_func[:, i], group) for i in range(per_func.shape[1])]).all(dim=0)
        return zero_std_mask(rewards, group)

    def _log_step_metrics(self, local_steps: torch.Tensor, mode: str) -> None:
        present = ~torch.isnan(local_steps)
        stats = torch.stack(
            [
                present.sum().float(),
                torch.nan_to_num(local_steps).sum(),
                local_steps.new_tensor(float(len(local_steps))),
            ]
        )
        total = self.accelerator.reduce(stats.to(self.accelerator.device), reduction="sum")
        self._metrics[mode]["process/steps_per_completion"].append((total[0] / total[2].clamp(min=1)).item())
        self._metrics[mode]["process/step_reward_mean"].append((total[1] / total[0].clamp(min=1)).item())

    def _refill_round(self) -> tuple[dict, torch.Tensor]:
        """One refill round (`batching.refill_groups`): a fresh generation batch, scored, and its groups without
        signal (`(local groups,)` bool)."""
        fresh = self._score_batch(super()._generate_and_score_completions(self._draw_refill_inputs()))
        return fresh, fresh.pop("_no_signal_rows").view(-1, self.num_generations)[:, 0]

    def _refill_wanted(self, no_signal: torch.Tensor) -> bool:
        """Whether another refill round is drawn: some group of some process lacks signal and the round fits the
        budget (the same answer on every process)."""
        return self._global_any(no_signal) and self._refill_fits()

    def _draw_refill_inputs(self) -> list[dict]:
        """A fresh generation batch laid out like TRL's RepeatSampler: same draw on every process, own slice."""
        prompts = self._refill.next_prompts(self.args.generation_batch_size // self.num_generations)
        rows = [prompt for prompt in prompts for _ in range(self.num_generations)]
        n_local = len(rows) // self.accelerator.num_processes
        rank = self.accelerator.process_index
        return rows[rank * n_local : (rank + 1) * n_local]

    def _refill_fits(self) -> bool:
        """Whether one more refill round stays within `refill_allowance` on every process (the same answer on all)."""
        if self.refill_allowance is None:
            return True
        per_round = self.args.generation_batch_size // self.accelerator.num_processes
        short = torch.tensor([float(self.refill_allowance() < per_round)], device=self.accelerator.device)
        return not self._global_any(short)

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
        if "zero_std_keep" in inputs:
            loss = loss * self._kept_rescale(inputs)
        if self.model.training:
            self._update_beta(inputs)
        return loss

    def _kept_rescale(self, inputs) -> torch.Tensor | float:
        """The factor that turns TRL's micro-batch normaliser into the generation batch's kept rows (tokens).

        TRL divides a micro-batch's summed row losses by its B rows and by the gradient-accumulation steps GA (bnpo:
        by its tokens and GA). With skipped rows the step's gradient must be TRL's on the batch without them: every
        kept row weighs 1 / (the kept rows of a window, over every micro-batch and process). A window holds
        GA / steps_per_generation of the generation batch's K kept rows, split over P processes whose gradients DDP
        averages, so each micro-batch divides by K * GA / (steps_per_generation * P): the factor is
        B * P * steps_per_generation / K. Without skipped rows K = B * P * steps_per_generation and it is 1.
        """
        unit = KEPT_NORMALISER.get(self.loss_type)
        if unit is None:
            return 1.0
        if unit == "rows":
            local, kept = float(inputs["zero_std_keep"].numel()), inputs["zero_std_kept_rows"]
        else:
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            local, kept = mask.sum().clamp(min=1.0), inputs["num_items_in_batch"]
        slots = self.accelerator.num_processes * self.args.steps_per_generation
        if kept <= 0:
            return 0.0  # nothing kept anywhere: every row is masked, the loss is 0 times TRL's (finite) value
        return local * slots / kept.to(torch.float32)

    # ---- the run as a whole ---------------------------------------------------------------------------------
    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        if not self.rewards_were_scored():  # as TRL: a warning (TRL's own per batch), the run ends normally
            logger.warning("%s", self._unscored_message())
        return output
