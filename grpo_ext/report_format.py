"""How every report writes a number, an interval and a table: the harness report (:mod:`grpo_ext.evaluation`), the
study (:mod:`grpo_ext.experiments.study`), the method comparison (:mod:`grpo_ext.experiments.compare`) and the iterative
reports (:mod:`grpo_ext.experiments.iterative`). One formatter per concept; a floor-1 room (it imports nothing of the
project)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "MISSING",
    "arrow",
    "beyond_noise",
    "cell",
    "ci",
    "count_spread",
    "fmt",
    "interval",
    "md_header",
    "md_row",
    "signed",
    "signed_with_seeds",
    "spread",
    "with_ci",
]

MISSING = "–"


def fmt(x: float | None, digits: int = 3) -> str:
    """``0.455``; ``–`` for a missing value."""
    return MISSING if x is None else f"{x:.{digits}f}"


def cell(value) -> str:
    """A table cell of any type: a float as :func:`fmt`, ``–`` for None, anything else as ``str``."""
    if value is None:
        return MISSING
    return fmt(value) if isinstance(value, float) else str(value)


def interval(value: float, low: float, high: float, digits: int = 3, sign: bool = False) -> str:
    """``0.455 [0.410, 0.500]``; with ``sign`` every number carries its sign, ``+0.120 [+0.080, +0.160]``."""
    spec = f"{'+' if sign else ''}.{digits}f"
    return f"{value:{spec}} [{low:{spec}}, {high:{spec}}]"


def with_ci(value: float | None, bounds) -> str:
    """``0.455 [0.410, 0.500]`` (the interval when there is one)."""
    if value is None:
        return MISSING
    return interval(value, *bounds) if bounds else fmt(value)


def ci(entry: dict | float | None, sign: bool = False) -> str:
    """An interval entry (``estimate``, ``low``, ``high``) as :func:`interval`; a bare number or None as :func:`fmt`."""
    if not isinstance(entry, dict):
        return fmt(entry)
    return interval(entry["estimate"], entry["low"], entry["high"], sign=sign)


def arrow(before, after, form=fmt) -> str:
    """``0.400 → 0.450``: a value before and after a change, each written by ``form``; ``before`` alone without an
    ``after``."""
    return form(before) if after is None else f"{form(before)} → {form(after)}"


def beyond_noise(d: dict) -> bool:
    """Whether a difference's interval (``low``, ``high``) excludes 0."""
    return d.get("low") is not None and (d["low"] > 0 or d["high"] < 0)


def signed(d: dict | None) -> str:
    """A difference with its interval, ``+0.120 [+0.080, +0.160]``; bold where the interval excludes 0. A difference
    without an interval (``low`` None: too few problems to draw one) is the point alone."""
    if d is None:
        return MISSING
    if d.get("low") is None:
        return f"{d['difference']:+.3f}"
    text = interval(d["difference"], d["low"], d["high"], sign=True)
    return f"**{text}**" if beyond_noise(d) else text


def signed_with_seeds(entry: dict) -> str:
    """``+0.120 [+0.080, +0.160] (seeds: +0.100, +0.140)``: a difference, its interval and each seed's; with
    ``over_seeds`` (an interval that resamples the seeds too), ``...; over seeds and problems [+0.010, +0.200])``."""
    seeds = ", ".join(f"{d:+.3f}" for d in entry["per_seed"])
    wider = ""
    if entry.get("over_seeds") is not None:
        low, high = entry["over_seeds"]
        wider = f"; over seeds and problems [{low:+.3f}, {high:+.3f}]"
    return f"{interval(entry['difference'], entry['low'], entry['high'], sign=True)} (seeds: {seeds}{wider})"


def spread(stat: dict | None, digits: int = 3) -> str:
    """A mean over seeds with its range, ``0.455 (0.410–0.500)``; the mean alone for one seed."""
    if stat is None:
        return MISSING
    if stat["count"] == 1:
        return fmt(stat["mean"], digits)
    return f"{stat['mean']:.{digits}f} ({stat['min']:.{digits}f}–{stat['max']:.{digits}f})"


def count_spread(stat: dict | None) -> str:
    """A count's mean over seeds with its range, ``1,024 (960–1,088)``; the mean alone when every seed agrees."""
    if stat is None:
        return MISSING
    if stat["min"] == stat["max"]:
        return f"{stat['mean']:,.0f}"
    return f"{stat['mean']:,.0f} ({stat['min']:,.0f}–{stat['max']:,.0f})"


def md_row(cells: Iterable) -> str:
    """``| a | b |``: one markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def md_header(columns: Sequence, align: str) -> list[str]:
    """A markdown table's header and rule: ``align`` has one letter a column, ``l`` (``---``) or ``r`` (``---:``)."""
    if len(align) != len(columns):
        raise ValueError(f"md_header: {len(columns)} columns but {len(align)} alignment letters ({align!r})")
    return [md_row(columns), "|" + "".join("---:|" if a == "r" else "---|" for a in align)]
