"""The checks of GRPOExtConfig's grouped fields (stop strings, the process reward model) and the choice check every
enumerated field uses: each error names the field and what was expected. The PRM formats and the options each reads
are the registry's (`grpo_ext.rewards.prm.PRM_FORMATS`), not a list of this file."""

from __future__ import annotations

from dataclasses import fields

from grpo_ext.errors import UserError

__all__ = ["STOP_STRINGS_NEED_SAMPLER", "check_process_reward_model", "check_stop_strings", "choice"]

#: Why `stop_strings` needs `generation_backend: sampler` (the config's error, and the trainer's when the args change).
STOP_STRINGS_NEED_SAMPLER = (
    "stop_strings: honoured by generation_backend `sampler` only; TRL 1.16's generation cannot honour them (its "
    "`generate` call passes no tokenizer, which transformers needs to read stop strings; with use_vllm, vLLM's own "
    "`stop` goes in generation_kwargs): set generation_backend: sampler or remove stop_strings"
)


def choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """`value` is one of `allowed`, else an error naming the field `name`."""
    if value not in allowed:
        raise UserError(f"{name}: unknown value {value!r}; expected one of {', '.join(allowed)}")


def check_stop_strings(config) -> None:
    """`stop_strings` (normalised to a list in place) and what it needs: the sampler backend, no EOS masking."""
    if isinstance(config.stop_strings, str):  # one string from Python code: one stop string, not its characters
        config.stop_strings = [config.stop_strings]
    if config.stop_strings is not None:
        config.stop_strings = list(config.stop_strings)
        bad = [s for s in config.stop_strings if not isinstance(s, str) or not s]
        if bad:  # an empty string would end every completion before it starts
            raise UserError(f"stop_strings: must hold non-empty strings, got {bad[0]!r}")
    if (config.generation_kwargs or {}).get("stop_strings") is not None:
        raise UserError(
            "generation_kwargs: stop_strings cannot go here (TRL 1.16's generate passes no tokenizer, which "
            "transformers needs to read them); use the stop_strings field with generation_backend: sampler"
        )
    if not config.stop_strings:
        return
    if config.generation_backend != "sampler":
        raise UserError(STOP_STRINGS_NEED_SAMPLER)
    if config.mask_truncated_completions:
        raise UserError(
            "stop_strings: a completion ended by a stop string has no EOS, so mask_truncated_completions would "
            "mask it as truncated; not both"
        )


def check_process_reward_model(config) -> None:
    """The `process_reward_model_*` fields: none without a PRM, a registered format, and each format option's field
    (`process_reward_model_<option>`, for the options of the registry's formats) read by the format named."""
    prefix = "process_reward_model_"
    changed = [f.name for f in fields(config) if f.name.startswith(prefix) and getattr(config, f.name) != f.default]
    if config.process_reward_model is None and not changed:
        return  # nothing to check: the PRM loader's module (a second to import) is not imported for nothing
    from grpo_ext.rewards.prm import PRM_FORMATS  # the registry: its formats and which options each reads

    options = {o for entry in PRM_FORMATS.values() for o in entry.options if hasattr(config, prefix + o)}
    option_fields = [prefix + o for o in sorted(options)]
    if config.process_reward_model is None:
        unused = [n for n in (f"{prefix}format", *option_fields) if getattr(config, n) is not None]
        unused += [f"{prefix}load_in_4bit"] if config.process_reward_model_load_in_4bit else []
        if unused:
            raise UserError(f"{unused[0]}: set without process_reward_model")
    named = config.process_reward_model_format
    if named is not None:
        choice("process_reward_model_format", named, tuple(PRM_FORMATS))
    for name in option_fields:
        value = getattr(config, name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{name}: must be a non-empty string, got {value!r}")
        option = name.removeprefix(prefix)
        if named is not None and option not in PRM_FORMATS[named].options:  # the registry says who reads it
            readers = " or ".join(f"`{f.name}`" for f in PRM_FORMATS.values() if option in f.options)
            raise UserError(f"{name}: only the {readers} format reads it (process_reward_model_format is `{named}`)")
