"""Reward functions that fail loudly and by name: what they return is checked before TRL sees it."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable


def checked_reward_func(func: Callable) -> Callable:
    """Wrap a TRL reward function so bad output names the function and the completion.

    Accepted per completion: an int/float (NaN allowed: TRL treats it as missing) or None (missing). Rejected:
    other types, infinities, and an exception inside the function, re-raised with the function's name.
    A wrong number of results is left to TRL, whose message already names the function.
    """
    name = getattr(func, "__name__", type(func).__name__)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            rewards = func(*args, **kwargs)
        except Exception as err:
            raise RuntimeError(f"reward function {name!r} raised {type(err).__name__}: {err}") from err
        if not isinstance(rewards, (list, tuple)):
            raise ValueError(f"reward function {name!r} returned {type(rewards).__name__}; expected a list of floats")
        for i, value in enumerate(rewards):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"reward function {name!r}: completion {i} got {value!r}; expected a float or None")
            if math.isinf(value):
                raise ValueError(f"reward function {name!r}: completion {i} got an infinite reward")
        return rewards

    return wrapper
