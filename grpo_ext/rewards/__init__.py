"""Reward sources: the task's verifiers by name, or any callable by dotted import path."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence

from grpo_ext.errors import UserError
from grpo_ext.tasks.base import Task


def load_callable(dotted_path: str, field_name: str) -> Callable:
    """`package.module.function` -> the function; a `UserError` names the config field and the path (and says so when
    the value looks like a file path, which is not what is expected)."""
    if not isinstance(dotted_path, str):  # a YAML list of numbers (reward_funcs: [1]) arrives unconverted
        raise UserError(
            f"{field_name}: {dotted_path!r} is not a reward function name (expected a known name like outcome, or a "
            "dotted import path like my_rewards.score)"
        )
    module_path, _, attr = dotted_path.rpartition(".")
    # import_module would look for a module named with a path separator, or take a leading dot for a relative import
    if not module_path or module_path.startswith(".") or any(sep in module_path for sep in "/\\"):
        raise UserError(
            f"{field_name}: {dotted_path!r} is neither a known name nor a dotted import path{_hint(dotted_path)}"
        )
    if os.getcwd() not in sys.path:  # like TRL's grpo script: user modules next to the config resolve
        sys.path.insert(0, os.getcwd())
    try:
        obj = getattr(importlib.import_module(module_path), attr)
    except (ImportError, AttributeError) as err:
        raise UserError(f"{field_name}: cannot import {dotted_path!r}: {err}{_hint(dotted_path)}") from err
    if not callable(obj):
        raise UserError(f"{field_name}: {dotted_path!r} is not callable")
    _check_reward_callable(obj, dotted_path, field_name)
    return obj


def _check_reward_callable(obj, dotted_path: str, field_name: str) -> None:
    """Refuse, before any step, what cannot be a reward function: anything of Python itself (builtins and the
    standard library: `os.system`, `subprocess.call`, `shutil.rmtree`, `builtins.eval` would be *called* with the
    completions), and a callable without TRL's keyword signature: TRL calls it with keywords only (`prompts`,
    `completions`, `completion_ids`, the dataset's columns, `trainer_state`, ...), so it needs `**kwargs`. A
    `functools.partial` is judged by the function it wraps (the user's own, or Python's)."""
    inner = obj
    while isinstance(inner, functools.partial):
        inner = inner.func
    modules = {dotted_path.partition(".")[0], str(getattr(inner, "__module__", None) or "").partition(".")[0]}
    stdlib = sorted(m for m in modules if m in sys.stdlib_module_names or m == "builtins")
    if stdlib:
        raise UserError(
            f"{field_name}: {dotted_path!r} is part of Python itself ({stdlib[0]}), not a reward function; name a "
            "function of your own module (def reward(prompts, completions, **kwargs))"
        )
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a C function): nothing TRL's call can be checked against
        params = []
    takes_keywords = any(p.kind is p.VAR_KEYWORD for p in params)
    positional_only = [p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if not takes_keywords or positional_only:
        raise UserError(
            f"{field_name}: {dotted_path!r} does not take TRL's reward keywords (prompts=, completions=, ... and the "
            "dataset's columns); expected def reward(prompts, completions, **kwargs)"
        )


def _hint(value: str) -> str:
    """What to write instead when `value` looks like a file path (`rewards.py`, `src/rewards.py:score`)."""
    if any(sep in value for sep in "/\\") or value.endswith(".py") or ".py:" in value:
        return (
            " (it looks like a file path: give module.function instead, e.g. my_rewards.score for a function score "
            "in my_rewards.py in the working directory)"
        )
    return ""


def resolve_reward_funcs(names: Sequence[str | Callable], task: Task) -> list[Callable]:
    """Reward functions for GRPOTrainer: `outcome` is the task's verifier (lenient: any stated answer counts),
    `outcome_strict` the same verifier requiring the task's strict answer form (GSM8K's ``#### n``), another name a
    dotted path; callables pass through."""
    named = {"outcome": task.outcome_reward, "outcome_strict": task.strict_outcome_reward}
    return [
        name
        if callable(name)
        else named[name]
        if isinstance(name, str) and name in named
        else load_callable(name, "reward_funcs")
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
                raise UserError(f"process_reward_funcs: task {task.name!r} has no step verifier for `step`")
            funcs.append(task.step_reward)
        else:
            funcs.append(load_callable(name, "process_reward_funcs"))
    return funcs
