"""How much of an arm's number is its seeds: pass@1 per training seed, beside intervals that resample the seeds as
well as the problems.

Every other interval of the report resamples problems only, over the per-problem value averaged over an arm's seeds
(:mod:`.stats`): it says how far the mean would move on other problems, not on other seeds, and RL runs from one base
can differ by more than that. This section lists each arm's seeds with two intervals over seeds *and* problems (a
two-level bootstrap, :func:`grpo_ext.evaluation.bootstrap.bootstrap_runs_and_problems_ci`): the arm's value and its
difference to the base. With s seeds the seed level has C(2s - 1, s) distinct draws (ten for three): coarse, but it
widens where seeds disagree. The report's verdicts keep their rule (the problems' interval and every seed's sign),
written before the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from grpo_ext.evaluation.bootstrap import bootstrap_runs_and_problems_ci
from grpo_ext.evaluation.registry import PASS_AT_1
from grpo_ext.experiments.study.stats import BOOTSTRAP, seed_matrix
from grpo_ext.report_format import interval, md_header, md_row

__all__ = ["render_seed_spread", "seed_spread"]


def seed_spread(arms: Mapping[str, Sequence[dict]], base: dict, metric: str = PASS_AT_1) -> dict[str, dict]:
    """Per arm (its runs' test results, one per seed, on the base's problems): ``metric`` per seed, its mean with
    the interval over seeds and problems, and the same for the arm minus the base (paired by problem)."""
    base_row = seed_matrix([base], metric)
    out = {}
    for name, runs in arms.items():
        matrix = seed_matrix(runs, metric)
        value = bootstrap_runs_and_problems_ci(matrix, **BOOTSTRAP)
        minus = bootstrap_runs_and_problems_ci(matrix, base_row, **BOOTSTRAP)
        out[name] = {
            "metric": metric,
            "per_seed": matrix.mean(axis=1).tolist(),
            "mean": value.estimate,
            "low": value.low,
            "high": value.high,
            "minus_base": {"difference": minus.estimate, "low": minus.low, "high": minus.high},
        }
    return out


def _draws_text(seed_counts: Sequence[int]) -> str:
    """How coarse the seed level is: s seeds drawn with replacement make C(2s - 1, s) distinct multisets (10 for 3),
    for each number of seeds the arms have (the most seeds first)."""

    def draws(s: int) -> str:
        count = math.comb(2 * s - 1, s)
        return f"{s} seed{'s' if s != 1 else ''} the seed level has {count} distinct draw{'s' if count != 1 else ''}"

    first, *others = sorted(set(seed_counts), reverse=True)
    return f"With {draws(first)}" + "".join(f" (with {draws(s)})" for s in others)


def render_seed_spread(spread: Mapping[str, dict], reference_label: str = "base") -> list[str]:
    """The report's section: one row per arm; the run the records call ``base`` shown as ``reference_label``."""
    if not spread:
        return []
    metric = next(iter(spread.values()))["metric"]
    lines = [
        "## Seeds: how much of each number is the seed",
        "",
        f"Each arm's test {metric} per training seed, and 95% intervals of a two-level bootstrap that resamples the "
        "seeds as well as the problems (the other intervals of this report resample problems only, over the seeds' "
        f"mean). {_draws_text([len(row['per_seed']) for row in spread.values()])}: coarse, but wider where seeds "
        "disagree.",
        "",
        *md_header(
            [
                "arm",
                f"{metric} per seed",
                "over seeds and problems",
                f"minus the {reference_label}, over seeds and problems",
            ],
            "llll",
        ),  # fmt: skip
    ]
    for name, row in spread.items():
        seeds = ", ".join(f"{v:.3f}" for v in row["per_seed"])
        d = row["minus_base"]
        diff = interval(d["difference"], d["low"], d["high"], sign=True)
        lines.append(md_row([name, seeds, interval(row["mean"], row["low"], row["high"]), diff]))
    return [*lines, ""]
