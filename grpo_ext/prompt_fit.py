"""Prompts and their completions fit in the model's positions, and the chat template renders every prompt: checked
once, before the first training step or the first draw, with one line naming the culprit.

A prompt of P tokens with a budget of C new tokens needs P + C positions. Beyond the model's
`max_position_embeddings` a model with learned positions fails at the first step, and a rotary one generates past
the context it was trained on without a word (TRL 1.16 takes any prompt as it is: its GRPO has no
`max_prompt_length` truncation, only vLLM refuses an over-long prompt). So the command lines refuse it, naming the
longest prompt by its index in the data, its length and the budget field (`max_completion_length` for training,
`--max-new-tokens` for the harness).

Prompts are tokenized as their consumer tokenizes them: TRL's own `_tokenize_prompts` for a GRPO trainer, the
harness's `encode_prompt_ids` for the harness. A chat template that raises (`raise_exception`), fails to parse, loops
past the Jinja sandbox's range or trips its security check is a `UserError` naming the template's file
(`rendering_prompts`), not a Jinja traceback at step 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = [
    "check_prompts_fit",
    "check_trainer_prompts",
    "model_positions",
    "rendering_prompts",
    "trainer_prompt_lengths",
]

#: Prompts tokenized per call while measuring a dataset (TRL's tokenizer call takes a batch).
CHUNK = 256


def model_positions(model) -> int | None:
    """The model's `max_position_embeddings` (a PEFT model's base's; a vision-language model's text model's), or None
    when its config does not say."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    positions = getattr(config, "max_position_embeddings", None)
    return positions if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0 else None


def _template_source(tokenizer) -> str:
    """Where a tokenizer's chat template lives (its file when the tokenizer came from a local folder)."""
    from grpo_ext.model_files import chat_templates

    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    if folder.is_dir():
        with contextlib.suppress(UserError, OSError):
            found = chat_templates(folder)
            if found:
                return str(found[0][0])
        return f"the tokenizer of {folder}"
    return "the tokenizer's chat template"


@contextlib.contextmanager
def rendering_prompts(tokenizer, what: str) -> Iterator[None]:
    """Inside, rendering conversational prompts with ``tokenizer``'s chat template: a template that raises, does not
    parse, loops past the sandbox's range, trips its security check or is missing is a `UserError` naming ``what``
    and the template's file."""
    from jinja2 import TemplateError

    try:
        yield
    except (TemplateError, OverflowError) as err:  # the sandbox's range limit is an OverflowError
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UserError(
            f"{what}: the chat template in {_template_source(tokenizer)} fails on the prompts "
            f"({type(err).__name__}: {reason})"
        ) from None
    except ValueError as err:
        if "chat_template" not in str(err) and "chat template" not in str(err):
            raise
        raise UserError(
            f"{what}: the prompts are conversations but {_template_source(tokenizer)} has no chat template; use "
            "plain-text prompts (the task's conversational: false) or a model with a chat template"
        ) from None


def check_prompts_fit(
    lengths: Sequence[int],
    budget: int | None,
    positions: int | None,
    *,
    budget_name: str,
    source: str,
    names: Sequence[str] | None = None,
) -> None:
    """The longest of the prompts (token ``lengths``, in data order) plus ``budget`` new tokens fits in ``positions``,
    else a `UserError` naming ``source``, the prompt (its index, or its ``names`` entry), its length, ``budget_name``
    and the model's positions."""
    if positions is None or not lengths:
        return
    budget = int(budget or 0)
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    length = int(lengths[longest])
    if length + budget <= positions:
        return
    over = sum(1 for n in lengths if n + budget > positions)
    others = f" ({over} of {len(lengths)} prompts do not fit)" if over > 1 else ""
    which = f"prompt {longest}" if names is None else f"prompt {longest} ({names[longest]})"
    raise UserError(
        f"{source}: {which} is {length} tokens; with {budget_name} {budget} it needs {length + budget} "
        f"positions, more than the model's {positions} (max_position_embeddings){others}: shorten the prompts "
        f"(fewer few-shot examples) or lower {budget_name}"
    )


def trainer_prompt_lengths(trainer) -> list[int] | None:
    """Token counts of a GRPO trainer's training prompts as TRL tokenizes them (`_tokenize_prompts`: the chat
    template and its generation prompt for conversations), in dataset order; None when they cannot be measured up
    front (an iterable dataset, a vision-language model, per-example tool environments, a TRL without that
    method)."""
    dataset = trainer.train_dataset
    tokenize: Callable | None = getattr(trainer, "_tokenize_prompts", None)
    if (
        tokenize is None
        or getattr(trainer, "_is_vlm", False)
        or getattr(trainer, "environment_factories", None) is not None
        or not hasattr(dataset, "__len__")
        or "prompt" not in (getattr(dataset, "column_names", None) or ())
    ):
        return None
    prompts = dataset["prompt"]
    lengths: list[int] = []
    with rendering_prompts(trainer.processing_class, "model_name_or_path"):
        for start in range(0, len(prompts), CHUNK):
            prompt_ids, _, _ = tokenize(list(prompts[start : start + CHUNK]))
            lengths.extend(len(ids) for ids in prompt_ids)
    return lengths


def check_trainer_prompts(trainer, source: str = "train_dataset") -> None:
    """A GRPO trainer's longest training prompt plus `max_completion_length` fits in the policy's positions."""
    check_prompts_fit(
        trainer_prompt_lengths(trainer) or [],
        trainer.args.max_completion_length,
        model_positions(trainer.model),
        budget_name="max_completion_length",
        source=source,
    )
