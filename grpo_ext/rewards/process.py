"""Process rewards: call step-scoring functions, check what they return, place scores at step-end tokens."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from grpo_ext.errors import UserError
from grpo_ext.reasoning_steps import step_end_token_indices
from grpo_ext.rewards.checked import as_values, call_users_function, func_name, reward_value


@dataclass
class ScoredSteps:
    """One completion's steps: token index of each step's end, the step scores, the completion's length."""

    ends: list[int]
    scores: list[float]
    length: int


def score_steps(
    funcs: Sequence[Callable],
    tokenizer,
    separator: str,
    prompts: list,
    completions: list,
    completion_ids_list: list[list[int]],
    reward_kwargs: dict,
) -> list[ScoredSteps]:
    """Each function's step scores, summed over functions (a NaN score makes that step missing).

    Every function must return, per completion, exactly as many scores as `grpo_ext.reasoning_steps` finds steps.
    """
    ends = [step_end_token_indices(tokenizer, ids, separator) for ids in completion_ids_list]
    totals = [[0.0] * len(e) for e in ends]
    for func in funcs:
        name = func_name(func)
        returned = call_users_function(
            func,
            "process reward function",
            prompts=prompts,
            completions=completions,
            completion_ids=completion_ids_list,
            **reward_kwargs,
        )
        rows = as_values(returned)
        if rows is None or len(rows) != len(prompts):
            got = len(rows) if rows is not None else type(returned).__name__
            raise UserError(
                f"process reward function {name!r} returned {got} results for {len(prompts)} completions "
                "(expected a list with one list of step scores per completion)"
            )
        for row, (returned_scores, row_ends) in enumerate(zip(rows, ends, strict=True)):
            scores = as_values(returned_scores)
            if scores is None or len(scores) != len(row_ends):
                got = len(scores) if scores is not None else type(returned_scores).__name__
                raise UserError(
                    f"process reward function {name!r} returned {got} step scores for completion {row}, which has "
                    f"{len(row_ends)} steps (step_separator {separator!r}); expected one score per step"
                )
            for j, value in enumerate(scores):
                # the outcome rewards' check (same types accepted); a missing step score makes the step NaN
                score = reward_value(value, f"process reward function {name!r}: completion {row}", "step score")
                totals[row][j] += math.nan if score is None else score
    return [ScoredSteps(e, t, len(ids)) for e, t, ids in zip(ends, totals, completion_ids_list, strict=True)]


def build_step_rewards(steps: list[ScoredSteps], completion_mask: torch.Tensor, outcome: torch.Tensor | None = None):
    """`(B, T)` step rewards in the layout `process_advantages` takes: NaN except at step-end tokens.

    Steps that end on the same token (a token holding a separator and the next step's start) add up. With
    `outcome`, each completion's outcome reward is one more step at its last token (added to a step ending there).
    A missing (NaN) score adds nothing: it never erases a real score on the same token (a truncated completion's
    unscored outcome lands on its last step's end).
    """
    # built on the host (element by element), then copied to the batch's device once
    rewards = torch.full(completion_mask.shape, math.nan, dtype=torch.float32, device="cpu")
    for row, item in enumerate(steps):
        entries = list(zip(item.ends, item.scores, strict=True))
        if outcome is not None and item.length > 0:
            entries.append((item.length - 1, float(outcome[row])))
        for index, score in entries:
            if math.isnan(score):
                continue
            current = rewards[row, index]
            rewards[row, index] = score if torch.isnan(current) else current + score
    return rewards.to(completion_mask.device)
