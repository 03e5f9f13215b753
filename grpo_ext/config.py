"""GRPOExtConfig: TRL's GRPOConfig plus the grpo-ext fields (documented in its class docstring). Every default keeps
TRL's behaviour."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from trl import GRPOConfig

from grpo_ext.advantages import get_gradient_coefficient
from grpo_ext.batching import GRPO_LOSS_TYPES, ZERO_STD_STRATEGIES, get_zero_std_strategy
from grpo_ext.config_checks import check_process_reward_model, check_stop_strings, choice
from grpo_ext.errors import UserError
from grpo_ext.kl_control import get_kl_controller
from grpo_ext.validation import check_training_ranges

GENERATION_BACKENDS = ("trl", "sampler")
CPU_BF16 = ("off", "auto", "on")
# The sampler's decode steps: grpo_ext.sampler.static_step.DECODE_MODES, a floor above this one (a test keeps the
# two equal). Checked whatever the backend: a typo is refused even where the value is not read yet.
SAMPLER_DECODES = ("auto", "eager", "static", "compiled")


@dataclass
class GRPOExtConfig(GRPOConfig):
    r"""
    Configuration class for [`~grpo_ext.trainer.GRPOExtTrainer`]: TRL's [`~trl.GRPOConfig`] plus the fields below.

    Every default keeps TRL's behaviour, so a `GRPOExtConfig` with only TRL's fields set trains exactly as
    `GRPOConfig`. Each field is validated in `__post_init__` with a message naming it. Like `GRPOConfig`, it is parsed
    from YAML and the command line by `trl.TrlParser`. A rejected value raises `grpo_ext.errors.UserError`; the
    numeric ranges of TRL's fields and ours are checked too (`grpo_ext.validation.check_training_ranges`).

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
            Path of a process reward model folder (safetensors weights), loaded by
            `grpo_ext.rewards.prm.load_process_reward_model` on each process's device and added to
            `process_reward_funcs`: one score per step, the steps re-joined in the PRM's own input format.
        process_reward_model_format (`str` or `None`, *optional*, defaults to `None`):
            Format of `process_reward_model`: `"token_classification"` (TRL's PRM format), `"step_tag"`
            (Math-Shepherd: a causal LM scored at a tag after each step) or `"qwen_prm"` (Qwen2.5-Math-PRM, loaded
            without remote code). `None` detects it from the folder's config.json.
        process_reward_model_step_tag (`str` or `None`, *optional*, defaults to `None`):
            `"step_tag"` format: the tag written after each step, at which the step is scored. `None`: `"ки"`
            (Math-Shepherd's).
        process_reward_model_good_token (`str` or `None`, *optional*, defaults to `None`):
            `"step_tag"` format: the token whose probability (softmax over the good and bad tokens' logits at the
            tag) is the step's score. `None`: `"+"`.
        process_reward_model_bad_token (`str` or `None`, *optional*, defaults to `None`):
            `"step_tag"` format: the other token of that softmax. `None`: `"-"`.
        process_reward_model_load_in_4bit (`bool`, *optional*, defaults to `False`):
            Load the process reward model in 4-bit (bitsandbytes nf4, double quantisation), e.g. a 7B PRM next to
            a QLoRA policy on one GPU. Otherwise it loads in bf16 on a GPU and float32 on the CPU.
        process_reward_model_batch_size (`int`, *optional*, defaults to `16`):
            Completions per forward pass of the process reward model (>= 1).
        step_separator (`str` or `None`, *optional*, defaults to `None`):
            How a completion splits into reasoning steps (`grpo_ext.reasoning_steps`): `"newline"`, `"blank_line"`,
            `"step_k"` (steps start at lines `Step <k>:`) or a literal separator string. When unset: the task's rule
            when the trainer is built by `build_grpo_trainer`, else a literal newline. Must be non-empty when set.
        process_include_outcome (`bool`, *optional*, defaults to `False`):
            With step rewards, add each completion's outcome reward as one more step ending at its last token.

        > Parameters that control groups whose rewards are all equal (DAPO's dynamic sampling)

        zero_std_groups (`str`, *optional*, defaults to `"keep"`):
            What to do with groups that have no learning signal: a name in the registry
            `grpo_ext.batching.ZERO_STD_STRATEGIES`. `"keep"` (TRL), `"skip"` (drop them from the loss) or `"refill"`
            (generate further groups until the batch has signal); any name added with `register_zero_std_strategy` is
            accepted. "No signal" means all rewards of the
            group equal for `advantage_mode` `"outcome"` (TRL's advantages), and all gradient coefficients of the
            group 0 for the other modes (`"online_rft"`: all samples wrong). The kept rows are normalised over the
            whole generation batch for every `loss_type` (its kept rows or kept tokens, as the loss type reduces).
            `"refill"` needs `per_device_train_batch_size * steps_per_generation` to be a multiple of
            `num_generations`; its prompts are drawn at random from a map-style dataset, and an `IterableDataset`
            is read on from where the previous refill stopped. `"skip"`/`"refill"` with a `loss_type` whose
            normaliser is the micro-batch's own (`grpo`, `sapo`, `luspo`, `dr_grpo`, `bnpo`) cannot be combined with
            an entropy bonus or a router auxiliary loss.
        max_refill_rounds (`int`, *optional*, defaults to `3`):
            With `"refill"`: extra generation rounds per batch at most (>= 0); groups still without signal are
            then skipped.

        > Parameters that control the KL coefficient β (Ziegler et al. 2019)

        kl_controller (`str`, *optional*, defaults to `"fixed"`):
            β controller: a name in the registry `grpo_ext.kl_control.KL_CONTROLLERS`. `"fixed"` (TRL: `beta` stays
            constant) or `"adaptive"` (`beta` is the initial value, > 0, and moves each optimizer step so the logged
            per-token `kl` tracks `target_kl`); any name added with `register_kl_controller` is accepted.
        target_kl (`float`, *optional*, defaults to `0.05`):
            Adaptive controller: the KL to steer towards, in the units TRL logs `kl` (mean per-token KL), > 0.
        kl_horizon (`float`, *optional*, defaults to `10000`):
            Adaptive controller: time constant in samples, > 0; one update changes β by a factor of at most
            `1 ± 0.2 * samples / kl_horizon`.
        beta_min (`float`, *optional*, defaults to `1e-6`):
            Adaptive controller: lower clamp of β, > 0 so that the reference log-probs are always computed.
        beta_max (`float` or `None`, *optional*, defaults to `None`):
            Adaptive controller: upper clamp of β (>= `beta_min`); `None` means no upper clamp.

        > Parameters that control how the policy's completions are generated

        generation_backend (`str`, *optional*, defaults to `"trl"`):
            `"trl"`: TRL's own generation (transformers `generate`, or vLLM with `use_vllm`). `"sampler"`: grpo-ext's
            continuous-batching sampler (`grpo_ext.sampler.continuous`: each prompt prefilled once for its group,
            slots refilled as samples end, the decode step compiled with CUDA graphs on a GPU, `sampler_decode`), for
            full, LoRA and QLoRA policies. The completions keep TRL's form (ids up to and including the first EOS,
            at most `max_completion_length`); `temperature`, `top_p`, `top_k` and `min_p` are honoured, and a
            `repetition_penalty` other than 1 or a `generation_kwargs` entry the sampler cannot honour is an error.
            Sample `i` of a prompt is drawn as the harness draws it (`grpo_ext.sampler.sampling.sample_seed`)
            with a seed derived from `seed`, the generation round and the process. Not with `use_vllm`, tools or
            vision-language models.
        sampler_decode (`str`, *optional*, defaults to `"auto"`):
            With `generation_backend: sampler`, the decode step: `"auto"` (compiled on CUDA, eager elsewhere),
            `"eager"`, `"static"` (fixed shapes, not compiled) or `"compiled"`; the samples do not depend on it.
        stop_strings (`list[str]` or `None`, *optional*, defaults to `None`):
            With `generation_backend: sampler`, strings that end a completion (e.g. `["Question:"]`: a base model
            answers, then invents the next question): a completion ends at the token that completes one, and keeps
            its ids up to and including that token (what transformers' `generate` with `stop_strings` keeps; no EOS
            is added), so reward functions see the stop string at the end of the text. `None`: EOS and
            `max_completion_length` only (TRL's behaviour). TRL's own generation cannot honour them (TRL 1.16 passes
            no tokenizer to `generate`), so they are an error with `generation_backend: trl`, in `generation_kwargs`,
            and with `mask_truncated_completions` (a completion ended by a stop string has no EOS and would be
            masked as truncated).

        > Parameters that control the precision on a CPU

        cpu_bf16 (`str`, *optional*, defaults to `"off"`):
            The dtype of the frozen base weights when training on a CPU with LoRA (`use_peft`), in place of the model's
            `dtype`: `"off"` (TRL: `dtype` as given), `"auto"` (bfloat16 where the CPU multiplies bf16 natively,
            i.e. `/proc/cpuinfo` lists `avx512_bf16`, `amx_bf16` or Arm's `bf16`, float32 elsewhere, where bf16 is
            emulated and slower) or `"on"` (bfloat16 always). The LoRA weights and the optimizer state stay float32
            (PEFT upcasts adapters of a bf16 base: `autocast_adapter_dtype`). What was chosen, and why, is logged
            when the policy is loaded (`grpo_ext.policy_loading.policy_init`) and recorded as the run's `dtype`.
            Ignored on a GPU (set `dtype` and `bf16` there); not with a 4-bit/8-bit base or without `use_peft` (a full
            fine-tune would keep bf16 weights and bf16 AdamW state).

        > Parameters that control the loss's forward

        share_prompt_forward (`bool`, *optional*, defaults to `False`):
            Compute each group's prompt once in the loss's forward and backward (`grpo_ext.shared_prompt`): the
            distinct prompt rows of a micro-batch go through the model once with a KV cache, which the group's rows'
            completions attend to; positions and masks are TRL's, so the log-probs, entropies and gradients are
            TRL's up to float rounding, and the prompt's share of the compute is divided by `num_generations`.
            Generation batches are then shuffled group by group (whole groups per micro-batch, so a micro-batch
            shares as much as it can), which leaves the optimizer step's gradient unchanged for every `loss_type`
            but `bnpo` (normalised by the micro-batch's own token count) and without `top_entropy_quantile` < 1 or
            an entropy bonus (per-micro-batch statistics); with those TRL's row shuffle is kept (logged). Needs
            `activation_checkpointing` off (a recomputed layer cannot rebuild the shared cache); forwards with
            image inputs, a mixture-of-experts aux loss or DistributedDataParallel fall back to TRL's (logged).
            With `lora_dropout` > 0 a group's rows share the prompt's dropout mask.
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
        metadata={"help": "Path of a process reward model folder (see process_reward_model_format), scored per step."},
    )
    process_reward_model_format: str | None = field(
        default=None,
        metadata={
            "help": "Format of process_reward_model: `token_classification` (TRL's PRM format), `step_tag` "
            "(Math-Shepherd), `qwen_prm` (Qwen2.5-Math-PRM); unset: detected from the folder's config.json."
        },
    )
    process_reward_model_step_tag: str | None = field(
        default=None, metadata={"help": "`step_tag` format: the tag after each step (unset: `ки`, Math-Shepherd's)."}
    )
    process_reward_model_good_token: str | None = field(
        default=None, metadata={"help": "`step_tag` format: the good token scored at each tag (unset: `+`)."}
    )
    process_reward_model_bad_token: str | None = field(
        default=None, metadata={"help": "`step_tag` format: the bad token scored at each tag (unset: `-`)."}
    )
    process_reward_model_load_in_4bit: bool = field(
        default=False,
        metadata={"help": "Load the process reward model in 4-bit (nf4); else bf16 on a GPU, float32 on the CPU."},
    )
    process_reward_model_batch_size: int = field(
        default=16, metadata={"help": "Completions per forward pass of the process reward model."}
    )
    step_separator: str | None = field(
        default=None,
        metadata={
            "help": "How completions split into reasoning steps: `newline`, `blank_line`, `step_k` (lines starting "
            "`Step <k>:`) or a literal separator; unset: the task's rule when the trainer is built by "
            "grpo_ext.assembly.build_grpo_trainer, else a literal newline."
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
            "help": "Groups without learning signal (outcome: all rewards equal; other advantage modes: all gradient "
            "coefficients 0, e.g. online_rft: all wrong), a name in grpo_ext.batching.ZERO_STD_STRATEGIES: `keep` "
            "(TRL), `skip` (drop them from the loss; the kept rows are normalised over the whole generation batch), "
            "`refill` (generate further groups until the batch has signal; an IterableDataset is read on), or any "
            "name added with register_zero_std_strategy.",
            # the registry itself, not a copy: argparse only asks `in` of it, so a strategy registered after this
            # class was defined is a valid command-line value too
            "choices": ZERO_STD_STRATEGIES,
        },
    )
    max_refill_rounds: int = field(
        default=3, metadata={"help": "With `refill`: extra generation rounds at most; what is missing then is skipped."}
    )
    # --- KL coefficient (Ziegler et al. 2019) ---
    kl_controller: str = field(
        default="fixed",
        metadata={
            "help": "KL controller, a name in grpo_ext.kl_control.KL_CONTROLLERS: `fixed` (TRL: constant beta), "
            "`adaptive` (beta tracks target_kl), or any name added with register_kl_controller.",
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
    # --- generation ---
    generation_backend: str = field(
        default="trl",
        metadata={
            "help": "`trl` (TRL's generate, or vLLM with use_vllm) or `sampler` (grpo-ext's continuous-batching "
            "sampler: shared prefill, slots, the decode step compiled on CUDA).",
            "choices": list(GENERATION_BACKENDS),
        },
    )
    sampler_decode: str = field(
        default="auto",
        metadata={
            "help": "generation_backend `sampler`: auto (compiled on CUDA), eager, static or compiled.",
            "choices": list(SAMPLER_DECODES),
        },
    )
    stop_strings: list[str] | None = field(
        default=None,
        metadata={
            "help": "generation_backend `sampler`: strings that end a completion (its ids kept up to the token that "
            "completes one, as transformers' generate keeps them); unset: EOS and max_completion_length only (TRL)."
        },
    )

    # --- precision on a CPU ---
    cpu_bf16: str = field(
        default="off",
        metadata={
            "help": "LoRA on a CPU: the base weights' dtype. `off` (dtype as given), `auto` (bfloat16 where the CPU "
            "has native bf16, avx512_bf16 / amx_bf16 / Arm bf16, else float32) or `on` (bfloat16); LoRA weights and "
            "optimizer state stay float32. Ignored on a GPU.",
            "choices": list(CPU_BF16),
        },
    )

    # --- the loss's forward ---
    share_prompt_forward: bool = field(
        default=False,
        metadata={
            "help": "Compute each group's prompt once in the loss's forward and backward (a KV cache shared by its "
            "num_generations rows; grpo_ext.shared_prompt): the same log-probs and gradients up to float rounding, "
            "the prompt's share of the compute divided by the group size. Generation batches are then shuffled "
            "group by group (whole groups per micro-batch) where that leaves the step's gradient unchanged (not for "
            "loss_type bnpo, top_entropy_quantile < 1 or an entropy bonus: TRL's row shuffle, logged). Needs "
            "activation_checkpointing off (a recomputed layer cannot rebuild the shared cache); text-only models.",
        },
    )

    def __post_init__(self):
        super().__post_init__()
        self._check_extensions()

    @classmethod
    def from_grpo_config(cls, config: GRPOConfig) -> GRPOExtConfig:
        """A plain `trl.GRPOConfig` as a `GRPOExtConfig` with every grpo-ext field at its default (TRL's behaviour).
        Its values are taken as TRL resolved them (`__post_init__` is not run again: it is not idempotent, e.g. it
        refuses both generation_batch_size and steps_per_generation, which its first run set)."""
        ext = cls.__new__(cls)
        ext.__dict__.update(config.__dict__)
        for f in fields(cls):
            if f.name not in ext.__dict__:
                setattr(ext, f.name, f.default_factory() if f.default_factory is not MISSING else f.default)
        ext._check_extensions()
        return ext

    def _check_extensions(self) -> None:
        try:  # the registry is the list of modes; its error names the field
            get_gradient_coefficient(self.advantage_mode)
        except ValueError as err:
            raise UserError(str(err)) from None
        try:  # the registries are the lists of strategies and controllers; their errors name the field
            get_zero_std_strategy(self.zero_std_groups)
            controller = get_kl_controller(self.kl_controller)
        except ValueError as err:
            raise UserError(str(err)) from None
        choice("generation_backend", self.generation_backend, GENERATION_BACKENDS)
        choice("cpu_bf16", self.cpu_bf16, CPU_BF16)
        choice("sampler_decode", self.sampler_decode, SAMPLER_DECODES)
        if self.generation_backend == "sampler" and self.use_vllm:
            raise UserError("generation_backend: `sampler` and use_vllm both generate the completions; pick one")
        check_stop_strings(self)
        if self.step_separator == "":
            raise UserError("step_separator: must be a non-empty string")
        check_process_reward_model(self)
        if self.share_prompt_forward and (
            getattr(self, "activation_checkpointing", False) or getattr(self, "gradient_checkpointing", False)
        ):
            raise UserError(
                "share_prompt_forward: needs activation_checkpointing off (the prompt's KV cache is shared across "
                "rows and a checkpointed layer's recompute does not rebuild it)"
            )
        # The numeric ranges (target_kl, kl_horizon, beta_min, beta_max, max_refill_rounds, ...) and the checks of the
        # KL controller's and the zero-std strategy's entries are validation.py's: check_training_ranges below. What
        # stays here is why beta == 0 cannot start a controller that moves beta.
        if controller.moves_beta and self.beta == 0.0:
            raise UserError(
                f"kl_controller: `{self.kl_controller}` needs beta > 0 as its initial value (with beta == 0 TRL builds "
                "no reference model, so there is no KL to control)"
            )
        # TRL's numbers too; GRPOExtTrainer checks again (a config can change after this)
        check_training_ranges(self, loss_types=GRPO_LOSS_TYPES)
