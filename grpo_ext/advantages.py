"""Advantages (gradient coefficients) for GRPO and its relatives: the registry a config picks one from by name.

The unified paradigm of DeepSeekMath (section 5.2.1) writes SFT, RFT, online RFT, DPO and GRPO as one gradient,
differing in data source, reward and *gradient coefficient*. :data:`GRADIENT_COEFFICIENTS` maps ``advantage_mode``
to its gradient-coefficient function and what the trainer, the config and the model card need to know of it. The
math itself (pure tensor functions, verl's ``core_algos.py`` style) is :mod:`grpo_ext.advantage_math`; its public
functions are imported from here (``from grpo_ext.advantages import outcome_advantages, process_advantages,
zero_std_mask``, the names users and the trainer rely on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from grpo_ext.advantage_math import (
    cap_to_right_samples,
    correct_indicator,
    outcome_advantages,
    process_advantages,
    zero_std_mask,
)
from grpo_ext.registration import qualified_name

__all__ = [
    "GRADIENT_COEFFICIENTS",
    "GradientCoefficient",
    "cap_to_right_samples",
    "get_gradient_coefficient",
    "online_rft_gradient_coefficient",
    "outcome_advantages",
    "outcome_gradient_coefficient",
    "process_advantages",
    "process_gradient_coefficient",
    "register_gradient_coefficient",
    "zero_std_mask",
]


# ------------------------------------------------------------------------------------------------------------
# Gradient-coefficient registry (DeepSeekMath 5.2.1, unified paradigm)
# ------------------------------------------------------------------------------------------------------------

GradientCoefficientFn = Callable[..., torch.Tensor]
"""``fn(*, rewards: Tensor[N] | None, step_rewards: Tensor[N, T] | None, group_size: int, scale: bool = True,
eps: float = 1e-4) -> Tensor[N] | Tensor[N, T]``. A function ignores the inputs it does not need and raises
``ValueError`` when one it needs is ``None``."""


@dataclass(frozen=True)
class GradientCoefficient:
    """A registry entry: the function and what the trainer, the config and the model card need to know of it.

    Attributes:
        name: the value of ``advantage_mode`` that selects it.
        fn: the pure function (see :data:`GradientCoefficientFn`).
        needs_step_rewards: the function reads ``step_rewards``: a process reward source is required.
        keeps_trl_advantages: the function equals TRL's own advantages (outcome GRPO): the trainer then leaves
            TRL's batch untouched, so with every extension off training is TRL's bit for bit.
        description: one sentence for the model card ("how the gradient coefficient was computed").
    """

    name: str
    fn: GradientCoefficientFn
    needs_step_rewards: bool = False
    keeps_trl_advantages: bool = False
    description: str = ""

    def __call__(self, **inputs) -> torch.Tensor:
        return self.fn(**inputs)


GRADIENT_COEFFICIENTS: dict[str, GradientCoefficient] = {}

_F = TypeVar("_F", bound=GradientCoefficientFn)


def register_gradient_coefficient(
    name: str, *, needs_step_rewards: bool = False, keeps_trl_advantages: bool = False, description: str = ""
) -> Callable[[_F], _F]:
    """Decorator registering a gradient-coefficient function under ``name`` (verl's ``register_adv_est``).

    Once registered, ``advantage_mode: <name>`` is a valid config value and the trainer, the model card and
    the iterative loop read the entry's flags. Registering a different function under a taken name raises
    ``ValueError``; re-registering the same function (same module and qualified name, e.g. after
    ``importlib.reload``) replaces it. ``description`` defaults to the first line of the docstring.
    """

    def decorator(fn: _F) -> _F:
        existing = GRADIENT_COEFFICIENTS.get(name)
        if existing is not None and qualified_name(existing.fn) != qualified_name(fn):
            raise ValueError(f"gradient coefficient {name!r} is already registered to {qualified_name(existing.fn)}")
        text = description or (fn.__doc__ or name).strip().splitlines()[0]
        GRADIENT_COEFFICIENTS[name] = GradientCoefficient(name, fn, needs_step_rewards, keeps_trl_advantages, text)
        return fn

    return decorator


def get_gradient_coefficient(name: str) -> GradientCoefficient:
    """The registry entry for ``name``; ``ValueError`` naming ``advantage_mode`` and the registered names."""
    try:
        return GRADIENT_COEFFICIENTS[name]
    except KeyError:
        known = ", ".join(GRADIENT_COEFFICIENTS)
        raise ValueError(f"advantage_mode: unknown value {name!r}; expected one of {known}") from None


def _require(x: torch.Tensor | None, input_name: str, method: str) -> torch.Tensor:
    if x is None:
        raise ValueError(f"gradient coefficient {method!r} needs {input_name}, got None")
    return x


@register_gradient_coefficient(
    "outcome",
    keeps_trl_advantages=True,
    description="outcome supervision: (reward - group mean) / group std, the same for every token (GRPO)",
)
def outcome_gradient_coefficient(
    *,
    rewards: torch.Tensor | None = None,
    step_rewards: torch.Tensor | None = None,
    group_size: int,
    scale: bool = True,
    eps: float = 1e-4,
) -> torch.Tensor:
    """GRPO, outcome supervision: ``(N,)`` :func:`outcome_advantages` of ``rewards``."""
    rewards = _require(rewards, "rewards", "outcome")
    return outcome_advantages(rewards, group_size, scale=scale, eps=eps)


@register_gradient_coefficient(
    "process",
    needs_step_rewards=True,
    description="process supervision (DeepSeekMath 4.1.3): step rewards normalised over the group, a token's "
    "advantage the sum of the normalised rewards of the steps ending at or after it; in training, a wrong or cut-off "
    "sample's advantage is capped at min(the lowest of a finished right sample of its group, 0)",
)
def process_gradient_coefficient(
    *,
    rewards: torch.Tensor | None = None,
    step_rewards: torch.Tensor | None = None,
    group_size: int,
    scale: bool = True,
    eps: float = 1e-4,
) -> torch.Tensor:
    """GRPO, process supervision: ``(N, T)`` :func:`process_advantages` of ``step_rewards`` (DeepSeekMath's, as
    is). The trainer then applies :func:`cap_to_right_samples` to every per-token coefficient, since only it knows
    which samples are right and which the length cap cut off."""
    step_rewards = _require(step_rewards, "step_rewards", "process")
    return process_advantages(step_rewards, group_size, eps=eps, scale=scale)


@register_gradient_coefficient(
    "online_rft",
    description="online rejection-sampling fine-tuning: coefficient 1 for a correct sample, 0 otherwise",
)
def online_rft_gradient_coefficient(
    *,
    rewards: torch.Tensor | None = None,
    step_rewards: torch.Tensor | None = None,
    group_size: int,
    scale: bool = True,
    eps: float = 1e-4,
) -> torch.Tensor:
    """Online rejection-sampling fine-tuning (DeepSeekMath 5.2.1): GC = 1 for a correct sample, else 0.

    A sample is *correct* iff its reward is ``> 0``: the rule for 0/1 verifier rewards, where it is exact.
    With graded or signed rewards (e.g. a reward model), make the reward function emit 0/1 first. A missing
    (NaN) reward counts as incorrect. No group statistics: ``scale`` and ``eps`` are accepted for a uniform
    signature and ignored. Returns ``(N,)`` float32 (float64 for float64 rewards).
    """
    return correct_indicator(_require(rewards, "rewards", "online_rft"), group_size)
