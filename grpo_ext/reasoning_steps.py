"""Completion text -> reasoning steps -> the token index of each step's last token.

A step rule (``step_separator``) is a named rule or a literal separator string:

- ``"newline"``: a step ends at a line break; blank or whitespace-only lines after it belong to the same break, so
  they open no empty step;
- ``"blank_line"``: a step ends at an empty (or whitespace-only) line: paragraphs are steps, single line breaks stay
  inside a step (what Qwen2.5-Math-PRM's card recommends for Qwen2.5-Math-Instruct answers);
- ``"step_k"``: a step begins at a line that starts with ``Step <k>:`` (Math-Shepherd's format); text before the
  first marker, if any, is a step of its own; a marker inside a line does not split;
- any other non-empty string is a literal separator (``";"``, ``"\\n"``): a step ends right after each occurrence,
  and consecutive separators do open empty steps.

Every step is the text up to and including its separator; the last step may have none. So:

- a completion with no separator is one step (the whole text);
- a truncated completion (cut at ``max_completion_length``) keeps its unfinished last step: it is scored like any
  other step, and its end is the completion's last token;
- a trailing separator opens no step, and empty text has no steps. With a named rule, whitespace-only text has no
  steps either, and a whitespace-only piece (leading or trailing) joins its neighbour instead of being a step.

:func:`step_texts` gives what a step scorer reads: the step without its separator (with a named rule, also without
surrounding whitespace). :func:`step_end_token_indices` maps each step's end to a token of the generated ids.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "STEP_RULES",
    "StepRule",
    "join_steps",
    "step_end_token_indices",
    "step_instruction",
    "step_rule",
    "step_spans",
    "step_texts",
]


@dataclass(frozen=True)
class StepRule:
    """How a text splits into steps: `separator` matches where a step ends (the match belongs to that step)."""

    name: str
    separator: re.Pattern
    named: bool  # named rules strip whitespace from step texts and merge whitespace-only pieces


STEP_RULES: dict[str, StepRule] = {
    "newline": StepRule("newline", re.compile(r"\n(?:[ \t\r\f\v]*\n)*"), True),
    "blank_line": StepRule("blank_line", re.compile(r"\n[ \t\r\f\v]*\n(?:[ \t\r\f\v]*\n)*"), True),
    # The break before a line opening with "Step k:" ends the previous step; the marker starts the next one.
    "step_k": StepRule("step_k", re.compile(r"\n(?:[ \t\r\f\v]*\n)*(?=[ \t]*Step[ \t]*\d+[ \t]*:)"), True),
}


@lru_cache(maxsize=64)
def step_rule(separator: str) -> StepRule:
    """The rule named `separator`, or a literal-separator rule for any other non-empty string."""
    if not isinstance(separator, str) or not separator:
        raise ValueError(
            f"step_separator must be a non-empty string (a literal separator or one of {', '.join(STEP_RULES)}), "
            f"got {separator!r}"
        )
    return STEP_RULES.get(separator) or StepRule(separator, re.compile(re.escape(separator)), False)


def _bounds(text: str, separator: str) -> list[tuple[int, int, int]]:
    """``(start, content_end, end)`` of each step: the step is ``text[start:end]``, its separator starts at
    ``content_end``."""
    rule = step_rule(separator)
    bounds, start = [], 0
    for match in rule.separator.finditer(text):
        if match.end() > start:
            bounds.append((start, match.start(), match.end()))
            start = match.end()
    if start < len(text):
        bounds.append((start, len(text), len(text)))
    if not rule.named:
        return bounds
    merged: list[tuple[int, int, int]] = []
    pending = None  # start of leading whitespace-only pieces waiting for the next real step
    for start, content_end, end in bounds:
        if text[start:content_end].strip():
            merged.append((start if pending is None else pending, content_end, end))
            pending = None
        elif pending is None:
            pending = start
    if pending is not None and merged:  # trailing whitespace joins the last step
        first, _, _ = merged[-1]
        merged[-1] = (first, len(text), len(text))
    return merged


def step_spans(text: str, separator: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the steps of `text`; `end` is exclusive and includes the separator."""
    return [(start, end) for start, _, end in _bounds(text, separator)]


def step_texts(text: str, separator: str) -> list[str]:
    """The steps themselves, separators removed (and, with a named rule, surrounding whitespace): what a process
    reward function scores. One text per span of :func:`step_spans`."""
    named = step_rule(separator).named
    return [text[s:c].strip() if named else text[s:c] for s, c, _ in _bounds(text, separator)]


def join_steps(steps: Sequence[str], separator: str) -> str:
    """Steps written the way `separator` splits them (e.g. worked examples in a prompt); ``step_k`` numbers them.
    :func:`step_texts` of the result gives the steps back (with their ``Step k:`` markers under ``step_k``)."""
    if separator == "step_k":
        return "\n".join(f"Step {k}: {step}" for k, step in enumerate(steps, start=1))
    joiner = {"newline": "\n", "blank_line": "\n\n"}.get(separator, separator)
    return joiner.join(steps)


def step_instruction(separator: str) -> str:
    """How a prompt asks for steps written the way `separator` splits them (completes "Think step by step and")."""
    step_rule(separator)  # a clear error for an empty separator
    if separator in ("newline", "\n"):
        return "write each step on its own line"
    if separator == "blank_line":
        return "separate consecutive steps with a blank line"
    if separator == "step_k":
        return "start each step on a new line with 'Step k:' (Step 1:, Step 2:, ...)"
    return f"end each step with {separator!r}"


# ---- step ends -> token indices ------------------------------------------------------------------------------

#: Tokens of left context each incremental decode keeps: enough for a UTF-8 character split over byte tokens (at most
#: 4), a tokenizer's leading-space strip, and clean-up patterns such as `` n't``.
DECODE_CONTEXT = 8


def char_ends_by_prefix_decoding(tokenizer, token_ids: Sequence[int]) -> list[int]:
    """Brute force: the length of the decoded prefix ending at each token. Quadratic in the length; the reference
    the incremental decoding below must equal, and its fallback."""
    return [len(tokenizer.decode(token_ids[: i + 1], skip_special_tokens=True)) for i in range(len(token_ids))]


def char_ends_by_incremental_decoding(tokenizer, token_ids: Sequence[int], context: int = DECODE_CONTEXT) -> list[int]:
    """:func:`char_ends_by_prefix_decoding` in linear time, for tokenizers whose decoding is local.

    Tokens are taken in blocks of `context`. A token's prefix length is the length at the end of the previous block
    plus what decoding the block up to that token adds after the `context` tokens before the block: one short decode
    per token and one per block (a single batched call), each at most ``2 * context + 1`` tokens long.
    """
    ids, n = list(token_ids), len(token_ids)
    starts = [max(0, (i // context - 1) * context) for i in range(n)]  # the left context of i's block
    windows = tokenizer.batch_decode([ids[starts[i] : i + 1] for i in range(n)], skip_special_tokens=True)
    blocks = range(context, n, context)  # block b starts at token b; its left context is ids[b - context : b]
    # (batch_decode of an empty batch returns [""]: decode only when there is a second block)
    decoded = tokenizer.batch_decode([ids[b - context : b] for b in blocks], skip_special_tokens=True) if blocks else []
    before = dict(zip(blocks, decoded, strict=True))
    ends: list[int] = []
    for i in range(n):
        block = i - i % context
        if block == 0:
            ends.append(len(windows[i]))  # the first block's windows start at token 0: whole prefixes
        else:
            ends.append(ends[block - 1] + len(windows[i]) - len(before[block]))
    return ends


def _char_ends_of_tokens(tokenizer, token_ids: Sequence[int], text: str) -> list[int]:
    """For each token, the end offset of its characters in `text` (the decoded completion).

    Re-tokenising the text gives the same ids (the canonical tokenization): the tokenizer's offsets apply directly.
    Otherwise (a generated tokenization that is not the canonical one) decode incrementally; if that does not add up
    to the text's length (a tokenizer whose decoding is not local), decode every prefix instead.
    """
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(encoding["input_ids"]) == list(token_ids):
        return [end for _, end in encoding["offset_mapping"]]
    ends = char_ends_by_incremental_decoding(tokenizer, token_ids)
    if ends and ends[-1] == len(text):
        return ends
    return char_ends_by_prefix_decoding(tokenizer, token_ids)


def step_end_token_indices(tokenizer, token_ids: Sequence[int], separator: str) -> list[int]:
    """Index (into `token_ids`) of the last token of each step of the completion `token_ids`.

    `token_ids` are the generated ids without padding; special tokens (EOS) are ignored for step-finding but
    keep their positions, so the indices address the trainer's completion tensor directly. A separator merged with
    its neighbours into one token (``".\\n\\n"`` in BPE vocabularies) still marks the token that holds it.
    """
    special = set(tokenizer.all_special_ids)
    positions = [i for i, t in enumerate(token_ids) if t not in special]
    content_ids = [token_ids[i] for i in positions]
    text = tokenizer.decode(content_ids, skip_special_tokens=True)
    spans = step_spans(text, separator)
    if not spans:
        return []
    ends = _char_ends_of_tokens(tokenizer, content_ids, text)
    indices, token = [], 0
    for _, span_end in spans:
        # the first token whose characters reach the step's last character holds the end of the step
        while token < len(ends) - 1 and ends[token] < span_end:
            token += 1
        indices.append(positions[token])
    return indices
