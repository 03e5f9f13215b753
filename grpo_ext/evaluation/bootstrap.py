"""Uncertainty over problems: bootstrap intervals of means, paired differences, the pass@k crossover, solved sets.

Every function takes *per-problem* values (one row per problem: a problem's pass@k, maj@k, Cover@tau, ...;
columns, where there are several, are metrics or k) and resamples problems with replacement, so an interval
says how much the mean would move on another draw of problems of the same kind. Samples within a problem are
already averaged exactly by the metrics (:mod:`grpo_ext.evaluation.metrics`); the problems are the noise.

Conventions:

- Percentile bootstrap, ``confidence`` = 0.95 by default: the interval is the (2.5%, 97.5%) quantiles of the
  resampled statistic.
- Reproducible: resample ``r`` draws its problems with ``numpy.random.default_rng(seed).integers`` in blocks of
  ``RESAMPLE_BLOCK`` resamples of ``n_problems`` indices each. The draws depend on ``seed``, ``n_resamples`` and
  the number of problems only, never on the values or on how many columns are passed: every column of one call,
  and every call with the same seed on the same problems, sees the same resamples. The seed and the number of
  resamples are returned with each interval so a report can record them.
- Two models are compared *paired by problem*: both are evaluated on the same problems and a resample takes the
  same problems for both, so the problem-to-problem variation that both share cancels. ``a`` and ``b`` must
  hold the same problems in the same order.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "RESAMPLE_BLOCK",
    "Crossover",
    "Interval",
    "SolvedOverlap",
    "bootstrap_mean_ci",
    "bootstrap_paired_difference_ci",
    "bootstrap_runs_and_problems_ci",
    "crossover_k",
    "resampled_means",
    "solved_overlap",
]

RESAMPLE_BLOCK = 1000  # resamples drawn per block (bounds memory; part of the reproducibility contract)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval; arrays (one entry per column) when several columns."""

    estimate: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray
    seed: int
    n_resamples: int
    confidence: float

    def to_dict(self) -> dict:
        """JSON-ready: arrays become lists."""
        return {key: value.tolist() if isinstance(value, np.ndarray) else value for key, value in asdict(self).items()}


@dataclass(frozen=True)
class Crossover:
    """Where the model behind at the first k catches up: see :func:`crossover_k`."""

    k: int  # smallest k where the trailing model's mean reaches the leading model's
    leader: str  # "a" or "b": the model ahead at the first k
    low: int | None  # interval over resamples; None: beyond the largest k given (no crossover there)
    high: int | None
    no_crossover_share: float  # share of the resamples in which the trailer never catches up within ks
    seed: int
    n_resamples: int
    confidence: float

    def to_dict(self) -> dict:
        return asdict(self)


class SolvedOverlap(NamedTuple):
    """Problem counts per k (arrays of one entry per column, or ints for one column)."""

    both: np.ndarray | int
    only_a: np.ndarray | int
    only_b: np.ndarray | int
    neither: np.ndarray | int


# --------------------------------------------------------------------------------------------------
# validation


def _per_problem(values, name: str) -> np.ndarray:
    """`values` as a float64 array with problems on axis 0 (1-D or 2-D), finite, at least one problem."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim not in (1, 2):
        raise ValueError(f"{name} must be 1-D (problems) or 2-D (problems, columns); got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no problems: need at least one row")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} holds a non-finite value at index {tuple(int(i) for i in bad)}")
    return arr


#: The most resamples an interval is drawn from: 100 times the default, far past where a 95% percentile interval
#: settles; 1e9 would run for days and hold gigabytes, with the same interval.
MAX_RESAMPLES = 1_000_000


def _check_resampling(n_resamples, seed) -> tuple[int, int]:
    for name, value in (("n_resamples", n_resamples), ("seed", seed)):
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be an integer, got a bool")
        try:
            operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if n_resamples > MAX_RESAMPLES:
        raise ValueError(f"n_resamples must be <= {MAX_RESAMPLES}, got {n_resamples}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0 (numpy's default_rng), got {seed}")
    return int(n_resamples), int(seed)


def _check_settings(n_resamples, seed, confidence) -> tuple[int, int, float]:
    n_resamples, seed = _check_resampling(n_resamples, seed)
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence}")
    return n_resamples, seed, float(confidence)


def _paired(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = _per_problem(a, "a"), _per_problem(b, "b")
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must hold the same problems (and columns) in the same order; got {a.shape} and {b.shape}"
        )
    return a, b


# --------------------------------------------------------------------------------------------------
# resampling


def resampled_means(values, n_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """The column means of ``n_resamples`` bootstrap resamples of the problems: shape (n_resamples, columns).

    ``values``: (problems,) or (problems, columns); a 1-D input gives shape (n_resamples,).
    """
    arr = _per_problem(values, "values")
    n_resamples, seed = _check_resampling(n_resamples, seed)
    flat = arr.reshape(arr.shape[0], -1)
    n_problems = flat.shape[0]
    rng = np.random.default_rng(seed)
    out = np.empty((n_resamples, flat.shape[1]))
    for start in range(0, n_resamples, RESAMPLE_BLOCK):
        block = min(RESAMPLE_BLOCK, n_resamples - start)
        # how often each problem is drawn in each resample, then one matrix product for every column
        out[start : start + block] = _draw_counts(rng, block, n_problems) @ flat / n_problems
    return out.reshape((n_resamples, *arr.shape[1:]))


def _draw_counts(rng: np.random.Generator, block: int, n: int) -> np.ndarray:
    """(block, n): how often each of `n` items is drawn in each of `block` resamples of `n` draws with replacement."""
    picks = rng.integers(0, n, size=(block, n))
    offsets = (np.arange(block) * n)[:, None]
    return np.bincount((picks + offsets).ravel(), minlength=block * n).reshape(block, n)


def _interval(estimate: np.ndarray, resampled: np.ndarray, seed, n_resamples, confidence) -> Interval:
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(resampled, [alpha, 1.0 - alpha], axis=0)
    if estimate.ndim == 0:
        return Interval(float(estimate), float(low), float(high), seed, n_resamples, confidence)
    return Interval(estimate, low, high, seed, n_resamples, confidence)


def bootstrap_mean_ci(values, n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95) -> Interval:
    """Mean over problems with its percentile bootstrap interval (problems resampled with replacement).

    ``values``: one value per problem, or (problems, columns) for several metrics / k at once (all columns
    see the same resamples). Returns floats for 1-D input, arrays of one entry per column otherwise. With a
    single problem every resample is that problem: the interval is the point.
    """
    arr = _per_problem(values, "values")
    n_resamples, seed, confidence = _check_settings(n_resamples, seed, confidence)
    return _interval(arr.mean(axis=0), resampled_means(arr, n_resamples, seed), seed, n_resamples, confidence)


def bootstrap_paired_difference_ci(
    a, b, n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> Interval:
    """mean(a) - mean(b) with a bootstrap interval *paired by problem*: each resample draws the same problems
    for both, i.e. the interval of the mean of the per-problem differences ``a - b``.

    ``a`` and ``b``: (problems,) or (problems, columns), the same problems in the same order (model A's and
    model B's values). An interval that excludes 0 says the difference holds beyond the problem-sampling noise.
    """
    a, b = _paired(a, b)
    return bootstrap_mean_ci(a - b, n_resamples, seed, confidence)


def _runs(values, name: str) -> np.ndarray:
    """`values` as (runs, problems): a 1-D input is one run."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[None, :] if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name} must be (runs, problems) with at least one run; got shape {np.shape(values)}")
    _per_problem(arr.T, name)  # finite, at least one problem
    return arr


def _run_means(runs: np.ndarray, rng: np.random.Generator, block: int) -> np.ndarray:
    """(block, problems): each resample's mean over runs drawn with replacement."""
    return _draw_counts(rng, block, runs.shape[0]) @ runs / runs.shape[0]


def bootstrap_runs_and_problems_ci(
    a, b=None, n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> Interval:
    """mean(a), or mean(a) - mean(b), with an interval that resamples the training runs as well as the problems.

    ``a``: (runs, problems), one row per training run (seed) of a model; ``b``: the same for a second model (its own
    number of runs: the base is one), on the same problems in the same order. Each resample draws each model's runs
    with replacement and the problems with replacement, the same problems for both (paired by problem): the
    interval says how far the mean would move on other seeds *and* other problems (a two-level bootstrap). The
    problem draws are :func:`resampled_means`' (same seed), the run draws a second stream (``default_rng([seed,
    1])``), so with one run each it is :func:`bootstrap_mean_ci` / :func:`bootstrap_paired_difference_ci`. With 3
    seeds the run level has 10 distinct draws: a coarse interval, wider than the problems-only one where seeds
    disagree.
    """
    a = _runs(a, "a")
    b = None if b is None else _runs(b, "b")
    if b is not None and b.shape[1] != a.shape[1]:
        raise ValueError(f"a and b must hold the same problems; got {a.shape[1]} and {b.shape[1]}")
    n_resamples, seed, confidence = _check_settings(n_resamples, seed, confidence)
    n_problems = a.shape[1]
    problem_rng, run_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
    out = np.empty(n_resamples)
    for start in range(0, n_resamples, RESAMPLE_BLOCK):
        block = min(RESAMPLE_BLOCK, n_resamples - start)
        counts = _draw_counts(problem_rng, block, n_problems)
        values = _run_means(a, run_rng, block)
        if b is not None:
            values = values - _run_means(b, run_rng, block)
        out[start : start + block] = (counts * values).sum(axis=1) / n_problems
    estimate = a.mean() - (b.mean() if b is not None else 0.0)
    return _interval(np.asarray(estimate), out, seed, n_resamples, confidence)


# --------------------------------------------------------------------------------------------------
# crossover and solved sets


def _first_catch_up(leader: np.ndarray, trailer: np.ndarray) -> np.ndarray:
    """Index of the first column where trailer >= leader, per row (-1 where none). Rows: resamples."""
    caught = trailer >= leader
    first = np.argmax(caught, axis=-1)
    return np.where(caught.any(axis=-1), first, -1)


def crossover_k(
    a, b, ks: Sequence[int], n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> Crossover | None:
    """The smallest k at which the model behind at the first k catches up, with a bootstrap interval.

    ``a``, ``b``: per-problem pass@k of models A and B, shape (problems, len(ks)) (any per-problem metric of k
    works), the same problems in the same order; ``ks``: strictly increasing, normally 1, 2, 4, ... up to n.

    Definition. Let A(k), B(k) be the means over problems. The *leader* is the model with the larger mean at
    the first k (normally k = 1: the better model on one sample). The crossover is the smallest k in ``ks``
    where the trailer's mean is at least the leader's (B(k) >= A(k) if A leads). Returns None when the two
    means are equal at the first k (nobody leads) or the trailer never catches up within ``ks`` (k <= n).

    Interval: problems are resampled (paired: the same problems for both models) and the crossover is
    recomputed with the same leader; ``low``/``high`` are the (1 - confidence)/2 quantiles of those ks (values
    from ``ks``), ``None`` where that quantile falls on "no crossover within ks" (a resample where the leader
    changes at the first k has its crossover there).
    """
    a, b = _paired(a, b)
    ks_arr = np.asarray(ks)
    if a.ndim != 2 or ks_arr.ndim != 1 or a.shape[1] != ks_arr.size:
        raise ValueError(f"a and b must have shape (problems, len(ks)); got {a.shape} for {ks_arr.size} ks")
    if ks_arr.size == 0 or not np.issubdtype(ks_arr.dtype, np.integer) or ks_arr[0] < 1:
        raise ValueError(f"ks must be integers >= 1, got {list(ks)}")
    if np.any(np.diff(ks_arr) <= 0):
        raise ValueError(f"ks must be strictly increasing, got {list(ks)}")
    n_resamples, seed, confidence = _check_settings(n_resamples, seed, confidence)
    mean_a, mean_b = a.mean(axis=0), b.mean(axis=0)
    if mean_a[0] == mean_b[0]:
        return None
    leader = "a" if mean_a[0] > mean_b[0] else "b"
    lead, trail = (a, b) if leader == "a" else (b, a)
    first = int(_first_catch_up(lead.mean(axis=0), trail.mean(axis=0)))
    if first < 0:
        return None
    width = ks_arr.size
    means = resampled_means(np.concatenate([lead, trail], axis=1), n_resamples, seed)
    found = _first_catch_up(means[:, :width], means[:, width:])
    # "no crossover" sorts after every k: index `width` stands for it
    order = np.where(found < 0, width, found)
    alpha = (1.0 - confidence) / 2
    low, high = (int(i) for i in np.quantile(order, [alpha, 1.0 - alpha], method="inverted_cdf"))

    def k_at(i: int) -> int | None:
        return int(ks_arr[i]) if i < width else None

    return Crossover(
        k=int(ks_arr[first]),
        leader=leader,
        low=k_at(low),
        high=k_at(high),
        no_crossover_share=float(np.mean(found < 0)),
        seed=seed,
        n_resamples=n_resamples,
        confidence=confidence,
    )


def solved_overlap(a, b, threshold: float = 0.5) -> SolvedOverlap:
    """How many problems both models solve, only A, only B, neither; per column (k) for 2-D input.

    A model *solves* a problem at k when its pass@k there is >= ``threshold`` (0.5 by default: at least half
    of the k-subsets of its samples hold a correct one, so "solved" is the likelier outcome of drawing k).
    ``a``, ``b``: per-problem pass@k, (problems,) or (problems, len(ks)), the same problems in the same order.
    """
    a, b = _paired(a, b)
    if not 0.0 < float(threshold) <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    solved_a, solved_b = a >= threshold, b >= threshold
    counts = [
        np.sum(solved_a & solved_b, axis=0),
        np.sum(solved_a & ~solved_b, axis=0),
        np.sum(~solved_a & solved_b, axis=0),
        np.sum(~solved_a & ~solved_b, axis=0),
    ]
    if a.ndim == 1:
        return SolvedOverlap(*(int(c) for c in counts))
    return SolvedOverlap(*(c.astype(np.int64) for c in counts))
