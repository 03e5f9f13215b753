"""Range checks for the numbers of a training config: TRL's and transformers' fields that they accept unchecked
(a negative learning rate trains uphill, a temperature of 0 divides by zero, a negative seed fails deep in NumPy, a
negative DPO beta prefers the rejected answers) and grpo-ext's own. Each failure is a `UserError` naming the field,
the expected range and the value. GRPO, DPO and SFT configs are checked, each for the fields it has.

`check_training_ranges(config)` runs in `GRPOExtConfig.__post_init__` and again when `GRPOExtTrainer` starts (a
config object can be changed after it was built); a plain `GRPOConfig` passes through the second check too. What
depends on the trainer a config is for (its `loss_type` values, whether `beta` must be > 0) is told by the caller
that knows it: `GRPOExtConfig` and `GRPOExtTrainer` (GRPO's loss types, `grpo_ext.batching.GRPO_LOSS_TYPES`), a
method of the paradigm (its `grpo_ext.methods.paradigm.Method` entry); this module tells no TRL config class from
another.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence

from grpo_ext.batching import KEPT_NORMALISER, ZERO_STD_STRATEGIES, ZeroStdStrategy, get_zero_std_strategy
from grpo_ext.errors import UserError
from grpo_ext.kl_control import KLControllerSpec, get_kl_controller

__all__ = ["check_number", "check_training_ranges", "context_overflow"]

SCALE_REWARDS = ("group", "batch", "none")


def check_number(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    allowed: tuple = (),
) -> None:
    """`value` is a finite number in the interval (closed unless `*_open`), or one of `allowed`, else a `UserError`."""
    if value in allowed and not isinstance(value, bool):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise UserError(f"{name}: expected {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value):
        raise UserError(f"{name}: must be a finite number, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "(-inf" if low is None else f"{'(' if low_open else '['}{low:g}"
        right = "inf)" if high is None else f"{high}{')' if high_open else ']'}"
        interval = f"{left}, {right}"
        also = f" or {', '.join(repr(a) for a in allowed)}" if allowed else ""
        raise UserError(f"{name}: must be in {interval}{also}, got {value}")


def _rules(config, beta_positive: bool = False) -> dict[str, dict]:
    """Field name -> `check_number` keywords, for the fields `config` has (`beta_positive`: its trainer reads a beta
    that must be > 0)."""
    rules = {
        # transformers.TrainingArguments
        "learning_rate": dict(low=0),
        "per_device_train_batch_size": dict(low=1, integer=True),
        "gradient_accumulation_steps": dict(low=1, integer=True),
        "max_steps": dict(low=1, integer=True, allowed=(-1,)),
        "num_train_epochs": dict(low=0, low_open=True),
        "max_grad_norm": dict(low=0),
        "weight_decay": dict(low=0),
        "warmup_steps": dict(low=0),
        "seed": dict(low=0, high=2**32 - 1, integer=True),
        # trl.GRPOConfig
        "beta": dict(low=0),
        "temperature": dict(low=0, low_open=True),
        "top_p": dict(low=0, high=1, low_open=True),
        "top_k": dict(low=0, integer=True, allowed=(None,)),  # None: as trl.GRPOConfig takes it
        "min_p": dict(low=0, high=1, allowed=(None,)),
        "repetition_penalty": dict(low=0, low_open=True),
        "num_generations": dict(low=2, integer=True),
        "num_iterations": dict(low=1, integer=True),
        "steps_per_generation": dict(low=1, integer=True, allowed=(None,)),
        "max_completion_length": dict(low=1, integer=True, allowed=(None,)),
        "epsilon": dict(low=0),
        "epsilon_high": dict(low=0, allowed=(None,)),
        "delta": dict(low=0, low_open=True, allowed=(None,)),
        "top_entropy_quantile": dict(low=0, high=1, low_open=True),
        # trl.SFTConfig / DPOConfig
        "max_length": dict(low=1, integer=True, allowed=(None,)),
        # grpo-ext
        "max_refill_rounds": dict(low=0, integer=True),
        "process_reward_model_batch_size": dict(low=1, integer=True),
    }
    if beta_positive:  # e.g. DPO's beta scales the preference margin: 0 learns nothing, below 0 learns the reverse
        rules["beta"] = dict(low=0, low_open=True)
    if config.logging_strategy == "steps":
        rules["logging_steps"] = dict(low=0, low_open=True)
    if config.save_strategy == "steps":
        rules["save_steps"] = dict(low=0, low_open=True)
    rules |= _kl_controller(config).ranges(config)  # the fields the config's KL controller reads
    return {name: kwargs for name, kwargs in rules.items() if hasattr(config, name)}


def _kl_controller(config) -> KLControllerSpec:
    """The registry entry of the config's `kl_controller` (a config without one, DPO's or SFT's: the fixed beta)."""
    try:
        return get_kl_controller(getattr(config, "kl_controller", "fixed"))
    except ValueError as err:  # a name changed after the config checked it
        raise UserError(str(err)) from None


def _zero_std(config) -> ZeroStdStrategy:
    """The registry entry of the config's `zero_std_groups` (a config without one, DPO's or SFT's: the default, the
    first registered: every group kept)."""
    try:
        return get_zero_std_strategy(getattr(config, "zero_std_groups", next(iter(ZERO_STD_STRATEGIES))))
    except ValueError as err:  # a name changed after the config checked it
        raise UserError(str(err)) from None


def _check_loss_type(config, loss_types: Sequence[str]) -> None:
    """Each of the config's `loss_type` values (DPO's is a list) is one of `loss_types`; none given: unchecked."""
    if not loss_types or not hasattr(config, "loss_type"):
        return
    values = config.loss_type if isinstance(config.loss_type, list) else [config.loss_type]
    unknown = [t for t in values if t not in loss_types]
    if unknown:
        raise UserError(f"loss_type: unknown value {unknown[0]!r}; expected one of {', '.join(loss_types)}")


def check_training_ranges(config, *, loss_types: Sequence[str] = (), beta_positive: bool = False) -> None:
    """Every numeric field of a training config (`GRPOConfig` / `GRPOExtConfig`, `DPOConfig`, `SFTConfig`, or plain
    `TrainingArguments`) in its range; the reward weights finite; the string choices TRL only checks when it first
    uses them (`scale_rewards`; `loss_type` among `loss_types`, the values its trainer takes, when given).

    `beta_positive`: the config's trainer needs beta > 0 (DPO); otherwise beta >= 0 (GRPO's KL coefficient may be 0).
    """
    for name, kwargs in _rules(config, beta_positive).items():
        check_number(name, getattr(config, name), **kwargs)
    for i, weight in enumerate(getattr(config, "reward_weights", None) or []):
        check_number(f"reward_weights[{i}]", weight)
    _check_sampling(config)
    scale = getattr(config, "scale_rewards", "group")
    if scale not in SCALE_REWARDS:
        raise UserError(f"scale_rewards: unknown value {scale!r}; expected one of {', '.join(SCALE_REWARDS)}")
    for message in (_kl_controller(config).check(config), _zero_std(config).check(config)):
        if message:
            raise UserError(message)
    _check_loss_type(config, loss_types)


# The sampling knobs `generation_kwargs` may override (TRL merges it over the config's fields): the fields' ranges.
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")

_EVERY = ("trl", "sampler", "vllm")
#: The one allow-list of `generation_kwargs`: entry -> (the generators that read it, its `check_number` range; None:
#: the range of the config field of the same name). `trl` is transformers' `generate` (TRL's path: its
#: `GenerationConfig` and logits processors, whose own ranges these are), `sampler` is `generation_backend: sampler`
#: (`grpo_ext.rollouts.HONOURED`, and do_sample), `vllm` is vLLM's `SamplingParams` (`use_vllm`). Anything else is
#: refused, naming the entry: transformers and vLLM take an unknown key (a typo) without a word.
GENERATION_KWARGS: dict[str, tuple[tuple[str, ...], dict | None]] = {
    "temperature": (_EVERY, None),
    "top_p": (_EVERY, None),
    "top_k": (_EVERY, None),
    "min_p": (_EVERY, None),
    "repetition_penalty": (_EVERY, None),  # the sampler refuses a value other than 1 (grpo_ext.rollouts)
    "do_sample": (("trl", "sampler"), {}),  # true only: false is greedy (below)
    "typical_p": (("trl",), dict(low=0, high=1, low_open=True)),
    "epsilon_cutoff": (("trl",), dict(low=0, high=1, high_open=True)),
    "eta_cutoff": (("trl",), dict(low=0, high=1, high_open=True)),
    "no_repeat_ngram_size": (("trl",), dict(low=0, integer=True)),
    "min_new_tokens": (("trl",), dict(low=0, integer=True)),  # at most max_completion_length (below)
    "presence_penalty": (("vllm",), dict(low=-2, high=2)),
    "frequency_penalty": (("vllm",), dict(low=-2, high=2)),
    "min_tokens": (("vllm",), dict(low=0, integer=True)),  # at most max_completion_length (below)
    "stop": (("vllm",), {}),  # non-empty strings (below)
}
#: Entries that TRL sets itself from a field or the tokenizer, and what to set instead: an override here would change
#: what is generated but not what TRL's loss and masks read (or, for num_return_sequences / n, break its batch).
GENERATION_KWARGS_SET_BY_TRL = {
    "max_new_tokens": "set max_completion_length instead (TRL's masks and the dr_grpo loss read it too)",
    "max_length": "set max_completion_length instead (TRL's masks and the dr_grpo loss read it too)",
    "max_tokens": "set max_completion_length instead (TRL's masks and the dr_grpo loss read it too)",
    "num_return_sequences": "set num_generations instead (TRL repeats each prompt num_generations times itself)",
    "n": "set num_generations instead (TRL repeats each prompt num_generations times itself)",
    "cache_implementation": "set the cache_implementation field instead",
    "eos_token_id": "TRL ends and masks completions at the tokenizer's and the model generation config's EOS ids, "
    "which it sets here itself: another id would end generation where the mask does not (change the model's "
    "generation_config.eos_token_id instead)",
    "pad_token_id": "TRL pads with the tokenizer's pad id, which it sets here itself (change the tokenizer's pad token "
    "instead)",
    "bos_token_id": "TRL sets the tokenizer's BOS id here itself (change the tokenizer's instead)",
}


def _generator(config) -> str:
    if getattr(config, "use_vllm", False):
        return "vllm"
    return "sampler" if getattr(config, "generation_backend", "trl") == "sampler" else "trl"


def _check_sampling(config) -> None:
    """`generation_kwargs` holds only the entries of `GENERATION_KWARGS` that the config's generator reads, each in
    its range; it overrides the sampling fields, so their values get the fields' ranges: top_p 0 (greedy on TRL's
    path, full sampling on the sampler's), temperature 0 (every group zero-std), top_k < 0 and min_p > 1 (a traceback
    at step 0) are refused, naming the entry. An entry TRL sets itself (`max_new_tokens`, the token ids,
    `num_return_sequences`, ...) is refused naming the field to set instead. A `None` top_k (transformers then uses
    its own default: 50) is refused with generation_backend `sampler`, which would read it as "off"."""
    rules = _rules(config)
    extra = getattr(config, "generation_kwargs", None)
    extra = extra if isinstance(extra, dict) else {}
    generator = _generator(config)
    sampler = generator == "sampler"
    for name in extra:
        if name in GENERATION_KWARGS_SET_BY_TRL:
            raise UserError(f"generation_kwargs.{name}: {GENERATION_KWARGS_SET_BY_TRL[name]}")
        readers, _ = GENERATION_KWARGS.get(name, ((), None))
        if generator not in readers:
            accepted = [k for k, (r, _) in GENERATION_KWARGS.items() if generator in r]
            known = [*GENERATION_KWARGS, *GENERATION_KWARGS_SET_BY_TRL]
            close = [] if name in known else difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            if sampler:  # the words of the sampler's own check at the first step (grpo_ext.rollouts)
                trl = " or use generation_backend `trl`" if "trl" in readers else ""
                raise UserError(
                    f"generation_kwargs: {name} cannot be honoured by generation_backend `sampler`{hint} (it honours "
                    f"{', '.join(accepted)}); remove it{trl}"
                )
            where = "with use_vllm" if generator == "vllm" else f"with generation_backend `{generator}`"
            what = "not read" if name in GENERATION_KWARGS else "not a generation setting grpo-ext accepts"
            raise UserError(f"generation_kwargs.{name}: {what} {where}{hint}; accepted: {', '.join(accepted)}")
    if extra.get("do_sample", True) not in (True, False):
        raise UserError(f"generation_kwargs.do_sample: expected true, got {extra['do_sample']!r}")
    if extra.get("do_sample") is False and hasattr(config, "num_generations"):  # greedy: a group is one answer
        raise UserError(
            "generation_kwargs.do_sample: false draws every completion of a group alike (greedy), so every group has "
            "zero reward variance and GRPO learns nothing; remove it (temperature sets how much samples vary)"
        )
    for name, value in extra.items():
        rule = GENERATION_KWARGS[name][1]
        if name in SAMPLING_FIELDS:
            check_number(f"generation_kwargs.{name}", value, **{**rules.get(name, {}), "allowed": ()})
        elif name == "stop":
            stops = [value] if isinstance(value, str) else value
            if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
                raise UserError(f"generation_kwargs.stop: expected a non-empty string or a list of them, got {value!r}")
        elif rule:
            high = getattr(config, "max_completion_length", None) if name in ("min_new_tokens", "min_tokens") else None
            check_number(f"generation_kwargs.{name}", value, **({**rule, "high": high} if high else rule))
    if sampler and "top_k" not in extra and getattr(config, "top_k", 0) is None:
        raise UserError(
            "top_k: None means transformers' default top-k (50, or the model's generation config) on TRL's path "
            "but no top-k on generation_backend `sampler`; give 0 (no top-k) or a number"
        )


def check_combinations(trainer) -> None:
    """Settings of a built `GRPOExtTrainer` that TRL and grpo-ext each accept but that do not work together: one line
    naming the field. Reads what TRL resolved at `__init__` (loss type, reward scaling, entropy bonus, ...)."""
    config, coefficient = trainer.args, trainer.gradient_coefficient
    if coefficient.needs_step_rewards and not trainer.process_reward_funcs:
        raise UserError(
            f"advantage_mode: `{config.advantage_mode}` needs step rewards: set process_reward_funcs or "
            "process_reward_model"
        )
    if not coefficient.keeps_trl_advantages:  # our coefficients normalise per group (or not at all)
        if trainer.scale_rewards == "batch":
            raise UserError(
                f"scale_rewards: `batch` is not supported with advantage_mode `{config.advantage_mode}` (its "
                "rewards are normalised per group, or not at all); use `group` or `none`"
            )
        if trainer.multi_objective_aggregation != "sum_then_normalize":
            raise UserError(
                f"multi_objective_aggregation: `{trainer.multi_objective_aggregation}` is not supported with "
                f"advantage_mode `{config.advantage_mode}` (it reads the weighted sum of the rewards); use "
                "`sum_then_normalize`"
            )
    zero_std = _zero_std(config)
    if (
        zero_std.drops_groups
        and trainer.loss_type in KEPT_NORMALISER
        and (trainer._entropy_bonus_enabled or trainer.aux_loss_enabled)
    ):
        raise UserError(
            f"zero_std_groups: `{config.zero_std_groups}` with loss_type `{trainer.loss_type}` cannot be combined "
            "with an entropy bonus or router aux loss (their token-mean terms would be rescaled)"
        )
    if zero_std.draws_prompts and trainer._is_vlm:
        raise UserError(f"zero_std_groups: `{config.zero_std_groups}` does not support vision-language models")


def context_overflow(trainer) -> str | None:
    """What a built trainer's completions cannot fit in, as a message naming the field (None when they fit): a
    `max_completion_length` beyond the model's positions (`max_position_embeddings`: 128 for the embedded model)
    runs past what the model was trained on. TRL takes it; `GRPOExtTrainer` warns, scripts/train.py refuses it."""
    config = getattr(trainer.model, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    length = trainer.args.max_completion_length
    if isinstance(positions, int) and isinstance(length, int) and length > positions:
        return (
            f"max_completion_length: {length} is more than the model's {positions} positions "
            "(max_position_embeddings): the completions would run past its context"
        )
    return None
