"""What every registry of the house calls the same function or class.

The registries: gradient coefficients (`grpo_ext.advantages`), KL controllers (`grpo_ext.kl_control`), zero-std
strategies (`grpo_ext.batching`), tasks (`grpo_ext.tasks`), PRM formats (`grpo_ext.rewards.prm`), harness metrics
(`grpo_ext.evaluation.registry`) and the methods of the paradigm (`grpo_ext.methods.paradigm`); each is a dict from
the config's value to an entry that carries the behaviour, filled by one ``register_*`` call an entry.

A name may be registered again by the same function or class, as after ``importlib.reload`` of the module that
registers it (a reload makes new objects, so identity cannot tell); a different one under a taken name is an error in
the registry that finds it. The lowest floor: imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Callable


def qualified_name(fn: Callable | type) -> str:
    """``module.qualname`` of a function or class: the same across a reload of its module."""
    return f"{fn.__module__}.{fn.__qualname__}"
