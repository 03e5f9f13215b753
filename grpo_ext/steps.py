"""Completion text -> reasoning steps -> the token index of each step's last token.

A step is the text up to and including its separator; the last step may have no separator (a final answer, or
a truncated completion). A trailing separator opens no step, and empty text has none. Step ends are mapped to
tokens through the tokenizer's character offsets, so a separator merged with its neighbours into one token
(`".\\n\\n"` in BPE vocabularies) still marks the token that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence


def step_spans(text: str, separator: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the steps of `text`; `end` is exclusive and includes the separator."""
    if not separator:
        raise ValueError("step_separator must be a non-empty string")
    spans, start = [], 0
    while start < len(text):
        found = text.find(separator, start)
        end = len(text) if found < 0 else found + len(separator)
        spans.append((start, end))
        start = end
    return spans


def _char_ends_of_tokens(tokenizer, token_ids: Sequence[int], text: str) -> list[int]:
    """For each token, the end offset of its characters in `text` (the decoded completion).

    Fast path: re-tokenising the text gives the same ids, so the tokenizer's offsets apply directly. Otherwise
    (a generated tokenization that is not the canonical one) decode prefixes: the length of the decoded
    prefix is where each token ends.
    """
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(encoding["input_ids"]) == list(token_ids):
        return [end for _, end in encoding["offset_mapping"]]
    return [len(tokenizer.decode(token_ids[: i + 1], skip_special_tokens=True)) for i in range(len(token_ids))]


def step_end_token_indices(tokenizer, token_ids: Sequence[int], separator: str) -> list[int]:
    """Index (into `token_ids`) of the last token of each step of the completion `token_ids`.

    `token_ids` are the generated ids without padding; special tokens (EOS) are ignored for step-finding but
    keep their positions, so the indices address the trainer's completion tensor directly.
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


def step_texts(text: str, separator: str) -> list[str]:
    """The steps themselves (separators stripped): what a process reward function scores."""
    return [text[s:e].removesuffix(separator) for s, e in step_spans(text, separator)]
