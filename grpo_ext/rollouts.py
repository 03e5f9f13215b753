"""GRPO's completions from grpo-ext's continuous-batching sampler (`generation_backend: sampler`).

TRL generates a batch with transformers' `generate`: every row is prefilled (a prompt once per sample of its group)
and decoded until the longest row stops. The harness's sampler (:mod:`grpo_ext.sampler.continuous`) prefills a
prompt once for its group, refills slots as samples end, and on a GPU replays the decode step as CUDA graphs. Here
it stands in for `generate` behind TRL's `_generate_single_turn`, returning what TRL returns there: each row's new
token ids up to and including its first EOS, at most `max_new_tokens` of them.

Stop strings (`GRPOExtConfig.stop_strings`, this backend only): a row also ends at the token that completes a stop
string, and its ids are kept up to and including that token, with no EOS after it: what transformers' `generate`
with `stop_strings` keeps (it stops the row there; the reward functions see the stop string at the end of the text,
as TRL decodes the ids). TRL 1.16's own `generate` call passes no tokenizer, which transformers needs to read stop
strings, so the config refuses them with `generation_backend: trl` rather than fail at the first step.

Pure plumbing between TRL's generation settings and the sampler: :func:`sampler_settings` reads TRL's resolved
generation kwargs once (refusing what the sampler cannot honour), :func:`sample_completions` draws one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from grpo_ext.config_checks import STOP_STRINGS_NEED_SAMPLER
from grpo_ext.errors import UserError
from grpo_ext.sampler.continuous import ContinuousUnsupported, continuous_sample
from grpo_ext.sampler.sampling import derive_seed, max_slots, sample_seed
from grpo_ext.sampler.static_step import DECODE_MODES
from grpo_ext.sampler.stops import StopChecker, check_stop

__all__ = ["SamplerSettings", "rollout_seed", "sample_completions", "sampler_settings", "sampler_settings_of"]

#: TRL's generation kwargs the sampler honours as they are (`max_new_tokens` and the token ids are read too).
HONOURED = ("temperature", "top_p", "top_k", "min_p")
#: Entries that do not change what is drawn: the sampler keeps its own cache and always samples (or is greedy at
#: temperature 0); a BOS is never generated.
NO_EFFECT = ("do_sample", "cache_implementation", "bos_token_id", "pad_token_id", "eos_token_id", "max_new_tokens")


@dataclass(frozen=True)
class SamplerSettings:
    """How the sampler draws a GRPO batch (from TRL's generation kwargs, :func:`sampler_settings`)."""

    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float | None
    eos_ids: tuple[int, ...]
    pad_id: int
    decode: str
    #: None: no stop strings (EOS and the length budget end a row, TRL's behaviour)
    stop: StopChecker | None = field(default=None, compare=False)
    #: How a PEFT LoRA policy computes while it samples (grpo_ext.sampler.lora_sampling.LoraSampling): its product in
    #: the base weights' dtype (``base_dtype``), or PEFT's own forward (``peft``). The loss's log-probs are PEFT's
    #: either way.
    lora: str = "base_dtype"


def _token_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


def sampler_settings(
    generation_kwargs: dict,
    decode: str,
    eos_ids: Sequence[int],
    pad_id: int,
    *,
    stop_strings: Sequence[str] | None = None,
    tokenizer=None,
) -> SamplerSettings:
    """The sampler's settings from TRL's resolved generation kwargs (its fields merged with the config's
    `generation_kwargs`), or a `UserError` naming every entry it cannot honour. ``stop_strings`` (read with
    ``tokenizer``) end a row at the token that completes one (module docstring)."""
    try:
        stop_strings = check_stop(stop_strings, "stop_strings")
    except ValueError as err:
        raise UserError(str(err)) from None
    if stop_strings and tokenizer is None:
        raise ValueError("sampler_settings: stop_strings need the tokenizer that reads them")
    for stop in stop_strings or ():
        _check_writable(stop, tokenizer)
    if decode not in DECODE_MODES:
        raise UserError(f"sampler_decode: unknown value {decode!r}; expected one of {', '.join(DECODE_MODES)}")
    kwargs = dict(generation_kwargs)
    penalty = kwargs.pop("repetition_penalty", None)
    if penalty not in (None, 1.0):
        raise UserError(
            f"repetition_penalty: {penalty} cannot be honoured by generation_backend `sampler` (its draws depend on "
            "the sample's own tokens only through the model); use 1.0 or generation_backend `trl`"
        )
    unknown = sorted(k for k in kwargs if k not in HONOURED and k not in NO_EFFECT and kwargs[k] is not None)
    if unknown:
        raise UserError(
            f"generation_kwargs: {', '.join(unknown)} cannot be honoured by generation_backend `sampler` (it honours "
            f"{', '.join(HONOURED)}); remove them or use generation_backend `trl`"
        )
    greedy = kwargs.get("do_sample") is False
    values = _sampling_values(kwargs, greedy)
    return SamplerSettings(
        max_new_tokens=int(kwargs["max_new_tokens"]),
        **values,
        eos_ids=tuple(eos_ids) or _token_ids(kwargs.get("eos_token_id")),
        pad_id=int(pad_id),
        decode=decode,
        stop=StopChecker(tokenizer, stop_strings) if stop_strings else None,
    )


def _check_writable(stop: str, tokenizer) -> None:
    """A stop string the model can write: one that its tokenizer encodes with its unknown token (a character outside
    the vocabulary, e.g. `Question:` for the embedded model's digits-and-signs vocabulary) would never end a sample,
    so it is refused rather than taken without effect."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None:
        return
    ids = tokenizer(stop, add_special_tokens=False)["input_ids"]
    if unk in ids:
        raise UserError(
            f"stop_strings: {stop!r} holds characters this model's tokenizer cannot write (it encodes them as its "
            "unknown token): it would never end a sample"
        )


def _sampling_values(kwargs: dict, greedy: bool) -> dict:
    """temperature, top_p, top_k and min_p as the sampler reads them, each the value transformers' `generate` (TRL's
    path) reads from the same kwargs, or a `UserError` naming the entry where the two would draw differently: an unset
    (None) top_p / temperature is transformers' default (1.0), an unset min_p is off; top_p 0 (greedy there, not
    "off"), an unset top_k (transformers' 50 or the model's, not "off"), temperature 0 while sampling, a negative
    top_k and a min_p outside [0, 1] have no common reading. (`grpo_ext.validation` refuses them in the config; this
    holds for generation kwargs changed after it.)"""
    from grpo_ext.validation import check_number

    temperature, top_p, top_k, min_p = (kwargs.get(name) for name in HONOURED)
    if greedy:  # do_sample False: transformers takes the most likely token and reads none of them
        return {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": None}
    if top_k is None:
        raise UserError(
            "generation_kwargs.top_k: None is transformers' default top-k (50, or the model's) on TRL's path but no "
            "top-k for generation_backend `sampler`; give 0 (no top-k) or a number"
        )
    check_number("generation_kwargs.top_k", top_k, low=0, integer=True)
    check_number("generation_kwargs.top_p", 1.0 if top_p is None else top_p, low=0, high=1, low_open=True)
    check_number("generation_kwargs.min_p", 0.0 if min_p is None else min_p, low=0, high=1)
    check_number("generation_kwargs.temperature", 1.0 if temperature is None else temperature, low=0, low_open=True)
    return {
        "temperature": float(1.0 if temperature is None else temperature),
        "top_p": float(1.0 if top_p is None else top_p),
        "top_k": int(top_k),
        "min_p": None if min_p is None else float(min_p),
    }


def sampler_settings_of(trainer) -> SamplerSettings | None:
    """A built GRPO trainer's sampler settings when its `generation_backend` is `sampler` (None otherwise), checked
    before any step: plain text completions only (no tools, vision-language models or rollout_func)."""
    if trainer.args.generation_backend != "sampler":
        if trainer.args.stop_strings:  # checked in the config too; the args may have changed since
            raise UserError(STOP_STRINGS_NEED_SAMPLER)
        return None
    unsupported = [
        what for what, used in (("tools", trainer.tools), ("vision-language models", trainer._is_vlm)) if used
    ]
    if unsupported or trainer.rollout_func is not None:
        raise UserError(
            f"generation_backend: `sampler` generates plain text completions; not with "
            f"{' or '.join(unsupported) or 'a rollout_func'} (use `trl`)"
        )
    tokenizer = trainer._tokenizer
    pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    return sampler_settings(
        trainer.generation_kwargs,
        trainer.args.sampler_decode,
        trainer.eos_token_ids,
        pad,
        stop_strings=trainer.args.stop_strings,
        tokenizer=tokenizer,
    )


def rollout_seed(seed: int, rollout: int, process: int) -> int:
    """The seed of generation round ``rollout`` on process ``process`` of a run seeded ``seed`` (a process's prompts
    can repeat another's: a group may span processes, so each process draws from its own seed)."""
    return derive_seed(seed, "grpo-rollout", rollout, process)


def sample_completions(
    model, prompt_ids: Sequence[Sequence[int]], prompts: Sequence, seed: int, settings: SamplerSettings
) -> list[list[int]]:
    """One completion (new token ids, the EOS kept; or up to the token that completes a stop string of
    ``settings.stop``, kept) per row: rows of the same prompt share its prefill, and the
    ``i``-th row of a prompt is its sample ``i`` seeded as the harness seeds it (``sample_seed(seed, prompt, i)``), so
    ``grpo_ext.sampler.sampling.sample`` with that seed draws the same completions. ``prompts`` are the rows'
    prompts (strings or conversations), ``prompt_ids`` their token ids."""
    if len(prompt_ids) != len(prompts):
        raise ValueError(f"sample_completions: {len(prompt_ids)} rows of ids for {len(prompts)} prompts")
    first_row: dict[str, int] = {}  # prompt key -> its index among the distinct prompts
    distinct, seeds, where = [], [], []
    for ids, prompt in zip(prompt_ids, prompts, strict=True):
        j = first_row.setdefault(str(prompt), len(distinct))
        if j == len(distinct):
            distinct.append(list(ids))
            seeds.append([])
        where.append((j, len(seeds[j])))
        seeds[j].append(sample_seed(seed, prompt, len(seeds[j])))
    drawn: list[list[list[int]] | None] = [None] * len(distinct)
    try:
        for j, samples in continuous_sample(
            model,
            distinct,
            seeds,
            max_new_tokens=settings.max_new_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k,
            min_p=settings.min_p,
            slots=min(len(prompt_ids), max_slots(next(model.parameters()).device)),
            prefill_batch=len(distinct),
            eos_ids=settings.eos_ids,
            pad_id=settings.pad_id,
            decode=settings.decode,
            stop=settings.stop,
            lora=settings.lora,
        ):
            drawn[j] = samples
    except ContinuousUnsupported as why:
        raise UserError(f"generation_backend: `sampler` cannot decode this model ({why}); use `trl`") from None
    return [drawn[j][i] for j, i in where]
