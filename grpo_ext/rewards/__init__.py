"""Reward sources: the task's verifiers by name, or any callable by dotted import path."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from grpo_ext.tasks.base import Task


def load_callable(dotted_path: str, field_name: str) -> Callable:
    """`package.module.function` -> the function; errors name the config field and the path."""
    module_path, _, attr = dotted_path.rpartition(".")
    if not module_path:
        raise ValueError(f"{field_name}: {dotted_path!r} is neither a known name nor a dotted import path")
    if os.getcwd() not in sys.path:  # like TRL's grpo script: user modules next to the config resolve
        sys.path.insert(0, os.getcwd())
    try:
        obj = getattr(importlib.import_module(module_path), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{field_name}: cannot import {dotted_path!r}: {err}") from err
    if not callable(obj):
        raise ValueError(f"{field_name}: {dotted_path!r} is not callable")
    return obj


def resolve_reward_funcs(names: Sequence[str | Callable], task: Task) -> list[Callable]:
    """Reward functions for GRPOTrainer: `outcome` is the task's verifier, another name a dotted path; callables
    pass through."""
    return [
        name if callable(name) else task.outcome_reward if name == "outcome" else load_callable(name, "reward_funcs")
        for name in names
    ]


def resolve_process_reward_funcs(names: Sequence[str | Callable] | None, task: Task) -> list[Callable]:
    """Process reward functions: `step` is the task's rule-based step verifier, another name a dotted path;
    callables pass through."""
    funcs = []
    for name in names or []:
        if callable(name):
            funcs.append(name)
        elif name == "step":
            if not task.has_step_verifier:
                raise ValueError(f"process_reward_funcs: task {task.name!r} has no step verifier for `step`")
            funcs.append(task.step_reward)
        else:
            funcs.append(load_callable(name, "process_reward_funcs"))
    return funcs
