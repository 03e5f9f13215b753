"""The arms of the iterative-RL experiment: what the policy is rewarded by in each iteration.

All arms start from the same iteration 0 of a seed (the base policy, its samples and the reward model RM_0 trained
on them) and spend the same GRPO budget per iteration; they differ only in the reward source:

- ``iterative`` (DeepSeekMath 4.1.4): the reward model is retrained every iteration on fresh samples of the current
  policy plus a replay of ``replay_ratio`` historical records; iteration k trains against RM_{k-1};
- ``frozen``: RM_0 throughout (what iterating is meant to beat);
- ``verifier``: the task's rule-based verifier (for a process RM, its step verifier), the upper bound a learned RM
  approximates.

In every arm the reference model is reset to the policy at the start of each iteration.
"""

from __future__ import annotations

from grpo_ext.errors import UserError

__all__ = ["ARMS", "RETRAINS_RM", "USES_RM", "parse_arms", "parse_seeds"]

ARMS = ("iterative", "frozen", "verifier")
#: Arms whose policy is rewarded by a learned RM (their RM is measured on each iteration's fresh samples).
USES_RM = frozenset({"iterative", "frozen"})
#: Arms whose RM is retrained every iteration.
RETRAINS_RM = frozenset({"iterative"})


def _items(value, field: str) -> list[str]:
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    elif isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    else:
        raise UserError(f"{field}: expected a comma-separated list, got {value!r}")
    if not items or any(not v for v in items):
        raise UserError(f"{field}: expected a comma-separated list without empty items, got {value!r}")
    if len(set(items)) != len(items):
        raise UserError(f"{field}: {value!r} names an item twice")
    return items


def parse_arms(value) -> list[str]:
    """``"iterative,frozen"`` (or a list) -> the arms in :data:`ARMS` order; an unknown name is a `UserError`."""
    arms = _items(value, "arms")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise UserError(f"arms: unknown arm {unknown[0]!r}; expected some of {', '.join(ARMS)}")
    return [a for a in ARMS if a in arms]


def parse_seeds(value) -> list[int]:
    """``"0,1"`` (or a list, or one int) -> the seeds as distinct non-negative ints, in the order given."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    seeds = []
    for item in _items(value, "seeds"):
        try:
            seed = int(item)
        except ValueError:
            raise UserError(f"seeds: {item!r} is not an integer (expected e.g. 0,1)") from None
        if seed < 0:
            raise UserError(f"seeds: must be >= 0, got {seed}")
        seeds.append(seed)
    return seeds
