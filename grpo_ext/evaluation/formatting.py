"""How every harness report writes a number: a mean with its interval, a difference with its interval (bold beyond
noise), a share. One formatter per concept, shared by :mod:`~grpo_ext.evaluation.report`,
:mod:`~grpo_ext.evaluation.slices` and :mod:`~grpo_ext.evaluation.moved`."""

from __future__ import annotations

__all__ = ["beyond_noise", "fmt", "signed", "with_ci"]


def fmt(x: float | None) -> str:
    """``0.455``; ``–`` for a missing value."""
    return "–" if x is None else f"{x:.3f}"


def with_ci(value: float | None, interval) -> str:
    """``0.455 [0.410, 0.500]`` (the interval when there is one)."""
    if value is None:
        return "–"
    return f"{value:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else f"{value:.3f}"


def beyond_noise(d: dict) -> bool:
    """Whether a difference's interval (``low``, ``high``) excludes 0."""
    return d.get("low") is not None and (d["low"] > 0 or d["high"] < 0)


def signed(d: dict | None) -> str:
    """A difference with its interval, ``+0.120 [+0.080, +0.160]``; bold where the interval excludes 0. A difference
    without an interval (``low`` None: too few problems to draw one) is the point alone."""
    if d is None:
        return "–"
    if d.get("low") is None:
        return f"{d['difference']:+.3f}"
    text = f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
    return f"**{text}**" if beyond_noise(d) else text
