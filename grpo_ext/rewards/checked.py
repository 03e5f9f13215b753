"""Reward functions that fail loudly and by name: what they return is checked before TRL sees it.

The check accepts everything TRL 1.16 accepts and turns into the same float32 rewards (`torch.tensor(values,
dtype=torch.float32)` after `None` -> NaN): Python and NumPy numbers, bools, 0-d arrays and tensors, in a list, a
tuple, a 1-D NumPy array or tensor. It refuses only what TRL would crash on later with a message that names no
function (a string, a nested list) and infinities (which TRL would turn into NaN advantages for the whole group).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping

from grpo_ext.errors import UserError


def func_name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


def is_users_code(func: Callable) -> bool:
    """Whether `func` is the user's code, not grpo-ext's (a task's verifier, the PRM wrapper): an exception inside the
    user's function is bad input, one inside ours a bug that keeps its traceback."""
    module = getattr(func, "__module__", None) or type(func).__module__
    return not (module == "grpo_ext" or module.startswith("grpo_ext."))


def call_users_function(func: Callable, what: str, *args, **kwargs):
    """`func(*args, **kwargs)`; if the user's function raises, a `UserError` naming it and the exception."""
    if not is_users_code(func):
        return func(*args, **kwargs)
    try:
        return func(*args, **kwargs)
    except Exception as err:
        raise UserError(f"{what} {func_name(func)!r} raised {type(err).__name__}: {err}") from err


def as_number(value) -> float | None:
    """`value` as a float if it is one number (Python or NumPy scalar, bool, 0-d array or tensor), else None."""
    if isinstance(value, numbers.Real):  # int, float, bool, NumPy integer and floating scalars
        return float(value)
    if getattr(value, "ndim", None) == 0 and getattr(value, "dtype", None) is not None:
        kind = getattr(value.dtype, "kind", None)  # NumPy: 'b', 'i', 'u', 'f'
        is_number = kind in ("b", "i", "u", "f") if kind is not None else not value.dtype.is_complex
        if is_number:
            return float(value.item())
    if type(value).__name__ == "bool_":  # numpy.bool_ is not a numbers.Real
        return float(value)
    return None


def reward_value(value, where: str, noun: str = "reward") -> float | None:
    """One reward (an outcome reward, or one step's score) as a float; None stays None (the function could not score
    it: missing, not zero). Anything but one number, and an infinity (TRL would turn it into NaN advantages for the
    whole group), is a `UserError` starting with ``where`` (which function, which completion)."""
    if value is None:
        return None
    number = as_number(value)
    if number is None:
        raise UserError(f"{where} got {value!r}; expected a float or None")
    if math.isinf(number):
        raise UserError(f"{where} got an infinite {noun}")
    return number


def as_values(returned) -> list | None:
    """A function's per-completion output as a list (`returned` iterated once), or None if it is not a sequence of
    values: a string, a mapping, a scalar (a 0-d array too)."""
    if isinstance(returned, (str, bytes, Mapping)) or not isinstance(returned, Iterable):
        return None
    if getattr(returned, "ndim", 1) == 0:
        return None
    return list(returned)


def checked_reward_func(func: Callable) -> Callable:
    """Wrap a TRL reward function so bad output names the function and the completion.

    Accepted per completion: one number (NaN allowed: TRL treats it as missing) or None (missing); see the module
    docstring for the types. Rejected with a `UserError`: other types, infinities, a result that is not a sequence,
    and an exception inside the user's function (its type and message kept, the traceback with --debug), and a
    number of results other than the number of completions (TRL would fail on it with a traceback).
    """
    name = func_name(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        returned = call_users_function(func, "reward function", *args, **kwargs)
        rewards = as_values(returned)
        if rewards is None:
            raise UserError(
                f"reward function {name!r} returned {type(returned).__name__}; expected a list with one float (or "
                "None) per completion"
            )
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        if completions is not None and len(rewards) != len(completions):
            raise UserError(
                f"reward function {name!r} returned {len(rewards)} rewards for {len(completions)} completions; "
                "expected one float (or None) per completion"
            )
        for i, value in enumerate(rewards):
            reward_value(value, f"reward function {name!r}: completion {i}")
        return rewards

    return wrapper


def check_reward_weights(reward_funcs, reward_weights) -> None:
    """`reward_weights` (a config's, or None) has one weight per reward function, else a `UserError` naming both
    fields, before TRL's trainer (which raises a bare ValueError) loads anything."""
    if reward_weights is None or reward_funcs is None:
        return
    n_funcs = len(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else 1
    if len(reward_weights) != n_funcs:
        raise UserError(
            f"reward_weights: {len(reward_weights)} weights {list(reward_weights)} for {n_funcs} reward_funcs; give "
            "one weight per reward function, in the order of reward_funcs"
        )
