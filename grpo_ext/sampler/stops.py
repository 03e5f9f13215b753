"""Stop strings: where a sample ends, and where its text is cut (lm-eval's ``until``, vLLM's ``stop``).

A sample ends as soon as its decoded text (the new tokens only, never the prompt) contains a stop string, and the
text handed back is cut before it. Two pieces, used by every transformers path (the continuous sampler, the
``generate`` fallback, GRPO's ``generation_backend: sampler``):

- :func:`cut_at_stop`: the text before the stop string that is *completed first* (smallest end; of two that end at
  the same character, the longer one). lm-eval 0.4.13 cuts with ``for term in until: text = text.split(term)[0]``
  (``lm_eval.models.utils.postprocess_generated_text``): the same place whenever no two stop-string occurrences
  overlap in the text (always, with one stop string). Where they overlap, lm-eval's cut depends on the order of
  ``until``; ours does not, and it is the one that a sampler which stops early can reproduce: the text up to the
  token that completes the first stop string is cut at the same place as the whole text (the stop string completed
  first is in both), so a sample drawn with stop strings is the sample drawn without them, cut.
- :class:`StopChecker`: whether a sample's text, after its last token, now holds a stop string. It decodes only the
  tail of the sample (enough tokens to hold the longest stop string, which may span tokens or sit inside one), so a
  check costs one short decode (~6 us with a fast tokenizer) whatever the sample's length.

Transformers' own ``stop_strings`` is not used: its criterion reads the whole sequence, prompt included, so a stop
string that begins in the prompt ends a sample at its first token (``"\\n\\n"`` after a chat template's trailing
newline), which neither lm-eval nor vLLM does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

__all__ = ["StopChecker", "check_stop", "cut_at_stop", "stop_criteria"]


def check_stop(stop, name: str = "stop") -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings (one string is one stop string), or a ``ValueError`` naming
    ``name``. An empty stop string would end every sample before its first character, so it is refused (lm-eval
    skips it silently)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, Iterable):
        raise ValueError(f"{name} must be a sequence of non-empty strings, got {stop!r}")
    stop = tuple(stop)
    bad = [s for s in stop if not isinstance(s, str) or not s]
    if bad:
        raise ValueError(f"{name} must hold non-empty strings only, got {bad[0]!r}")
    return stop


def _first_stop(text: str, stop: Sequence[str]) -> tuple[int, int] | None:
    """``(start, end)`` of the stop-string occurrence completed first in ``text`` (smallest end, then smallest
    start), or None. A string's first occurrence is also the one of it that ends first."""
    best = None
    for s in stop:
        start = text.find(s)
        if start >= 0:
            span = (start + len(s), start)
            best = span if best is None or span < best else best
    return None if best is None else (best[1], best[0])


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` before the stop string completed first (see the module docstring); ``text`` itself when none
    occurs or ``stop`` is empty."""
    found = _first_stop(text, stop) if stop else None
    return text if found is None else text[: found[0]]


class StopChecker:
    """Whether a sample has written a stop string: ``checker(new_token_ids) -> bool``.

    Called after every new token, so a stop string is found at the token that completes it. Only the tail is decoded:
    a stop string of ``b`` UTF-8 bytes overlaps at most the last ``b`` tokens that decode to text (every such token
    holds at least a byte; special tokens decode to nothing and are skipped as the final text skips them), and one
    more token is decoded so that the first token of the window is never part of the match (SentencePiece tokenizers
    drop the leading space of the first token they decode).
    """

    def __init__(self, tokenizer, stop: Sequence[str]):
        self.tokenizer, self.stop = tokenizer, check_stop(stop)
        if not self.stop:
            raise ValueError("StopChecker needs at least one stop string")
        self.window = max(len(s.encode("utf-8")) for s in self.stop) + 1
        self.special = frozenset(getattr(tokenizer, "all_special_ids", ()) or ())

    def __repr__(self) -> str:
        return f"StopChecker({list(self.stop)!r})"

    def tail(self, tokens: Sequence[int]) -> list[int]:
        """The last tokens that hold ``window`` tokens of text (special tokens among them ride along)."""
        start, text_tokens = len(tokens), 0
        while start > 0 and text_tokens < self.window:
            start -= 1
            text_tokens += tokens[start] not in self.special
        return list(tokens[start:])

    def __call__(self, tokens: Sequence[int]) -> bool:
        if not tokens:
            return False
        text = self.tokenizer.decode(self.tail(tokens), skip_special_tokens=True)
        return any(s in text for s in self.stop)


class _StopCriteria:
    """A transformers ``StoppingCriteria`` (duck-typed: ``__call__(input_ids, scores) -> BoolTensor``) ending each
    row of a ``generate`` batch whose new tokens hold a stop string: finished rows are padded by ``generate``."""

    def __init__(self, checker: StopChecker, prompt_length: int):
        self.checker, self.prompt_length = checker, prompt_length

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        new = input_ids[:, self.prompt_length :].tolist()
        # a finished row's padding decodes to nothing (a special token) or after its stop string: still stopped
        return torch.tensor([self.checker(row) for row in new], dtype=torch.bool, device=input_ids.device)


def stop_criteria(tokenizer, stop: Sequence[str], prompt_length: int) -> list:
    """``stopping_criteria`` for ``generate`` on a left-padded batch whose prompts take ``prompt_length`` columns:
    the same check as the continuous sampler, on the new tokens only. Empty when there is no stop string."""
    if not stop:
        return []
    from transformers import StoppingCriteria

    class StopCriteria(_StopCriteria, StoppingCriteria):  # generate type-checks its criteria
        pass

    return [StopCriteria(StopChecker(tokenizer, stop), prompt_length)]
