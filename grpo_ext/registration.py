"""What every registry of the house (gradient coefficients, KL controllers, PRM formats) calls the same function.

A name may be registered again by the same function, as after ``importlib.reload`` of the module that registers it
(a reload makes new function objects, so identity cannot tell); a different function under a taken name is an error
in the registry that finds it. The lowest floor: imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Callable


def qualified_name(fn: Callable) -> str:
    """``module.qualname`` of ``fn``: the same across a reload of its module."""
    return f"{fn.__module__}.{fn.__qualname__}"
