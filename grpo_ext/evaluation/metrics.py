"""Sample-based metrics: pass@k (Chen et al. 2021) and exact maj@k, for one problem or many at once.

Conventions shared by every function here:

- A problem has ``n`` sampled completions. ``correct`` holds one bool per sample (the verifier's verdict)
  and ``answers`` one *normalised answer key* per sample (anything hashable; ``None`` = no answer could
  be extracted).
- ``pass@k`` is the unbiased estimator ``1 - C(n - c, k) / C(n, k)``: the probability that at least one
  of ``k`` samples drawn without replacement from the ``n`` is correct.
- ``maj@k`` is the *exact* expectation, over all ``C(n, k)`` subsets of ``k`` samples, of "the majority
  answer of the subset is correct". ``None`` does not vote; a tie among the most-voted answers is broken
  uniformly at random, so a subset whose top answers tie scores (number of correct ones among the tied
  answers) / (number tied); a subset with no votes at all scores 0. No Monte-Carlo is involved.
- Samples with the same answer key are one answer. The correctness of an answer is the mean of its
  samples' ``correct`` flags. With a deterministic verifier the flags of one key agree, so this is just
  "is this answer correct"; if they disagree, the answer gets fractional credit. The ``correct`` flag of
  a ``None`` sample is ignored (it never wins a vote).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from functools import lru_cache
from itertools import compress

import numpy as np

__all__ = [
    "pass_at_k",
    "pass_at_k_many",
    "maj_at_k",
    "maj_at_k_many",
    "mean_accuracy",
    "answer_signature",
]


# --------------------------------------------------------------------------------------------------
# validation helpers


def _as_int(value, name: str) -> int:
    """`value` as a Python int (ints and numpy integers; integral floats are rejected as ambiguous)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None


def _check_pass_args(n: int, c: int, k: int) -> None:
    if k < 1:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k} (n={n})")
    if k > n:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k} > n={n} (cannot draw k of n samples)")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n (c = number of correct samples); got c={c}, n={n}")


def _as_list(values) -> list:
    """A plain Python list (fast iteration; numpy arrays become Python scalars)."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


# --------------------------------------------------------------------------------------------------
# pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate for one problem with ``n`` samples of which ``c`` are correct.

    ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021), computed stably as the product
    ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``; exactly 1.0 when ``n - c < k`` (every k-subset holds a
    correct sample). Requires ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    n, c, k = _as_int(n, "n"), _as_int(c, "c"), _as_int(k, "k")
    _check_pass_args(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_many(n, c, k: int) -> np.ndarray:
    """pass@k for many problems at once: ``n`` and ``c`` are arrays (or a scalar ``n``), ``k`` one int.

    Same estimator and validation as :func:`pass_at_k`, vectorised over problems (no Python loop over
    problems). Returns a float64 array of the broadcast shape of ``n`` and ``c``.
    """
    k = _as_int(k, "k")
    n_arr, c_arr = np.broadcast_arrays(np.asarray(n), np.asarray(c))
    for name, arr in (("n", n_arr), ("c", c_arr)):
        integral = np.issubdtype(arr.dtype, np.integer) or (
            np.issubdtype(arr.dtype, np.floating) and bool(np.all(arr == np.round(arr)))
        )
        if arr.size and not integral:
            raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    shape = n_arr.shape
    n_flat = n_arr.astype(np.int64).ravel()
    c_flat = c_arr.astype(np.int64).ravel()
    if n_flat.size == 0:
        return np.zeros(shape, dtype=np.float64)
    if k < 1:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k}")
    bad = np.flatnonzero(k > n_flat)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"pass@k needs 1 <= k <= n; got k={k} > n={int(n_flat[i])} at problem {i} "
            f"({bad.size} problem(s) have fewer than k samples)"
        )
    bad = np.flatnonzero((c_flat < 0) | (c_flat > n_flat))
    if bad.size:
        i = int(bad[0])
        c_i, n_i = int(c_flat[i]), int(n_flat[i])
        raise ValueError(f"pass@k needs 0 <= c <= n; got c={c_i}, n={n_i} at problem {i}")

    out = np.empty(n_flat.size, dtype=np.float64)
    # rows of factors (1 - k / i) for i = n - c + 1 .. n, padded with 1.0; processed in chunks so that
    # memory stays bounded for large n.
    max_c = max(int(c_flat.max()), 1)
    rows = max(1, (1 << 21) // max_c)
    j = np.arange(max_c, dtype=np.int64)
    for start in range(0, n_flat.size, rows):
        nn = n_flat[start : start + rows, None]
        cc = c_flat[start : start + rows, None]
        i = (nn - cc + 1) + j  # >= 1 always
        factors = np.where(j < cc, 1.0 - k / i, 1.0)
        out[start : start + rows] = 1.0 - np.prod(factors, axis=1)
    out[n_flat - c_flat < k] = 1.0
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------------
# maj@k
#
# The result for a problem depends only on its *signature*: the multiset of answer classes, each a pair
# (number of samples with that key, number of those flagged correct), plus the number of None samples.
#
# Counting. Fix a target class of size `a`, the other classes of sizes b_1..b_r and m0 None samples
# (n = a + sum b + m0). A k-subset with x >= 1 votes for the target, every other class <= x votes and
# exactly t others at x votes gives the target 1 / (t + 1) of the credit. For fixed x the number of ways
# to fill the other k - x places with exactly t ties is the coefficient of z^(k-x) u^t in
#
#     (1 + z)^free * prod_{i: b_i >= x} ( sum_{y < x} C(b_i, y) z^y  +  u C(b_i, x) z^x )
#
# where `free` counts the None samples plus the classes too small to reach x (they are unconstrained).
# We run that product as a DP over the constrained classes, keeping one polynomial in z per number of
# ties t, weight the t-th by L / (t + 1) with L = lcm(1..r+1) (so everything stays an integer), and sum
# C(a, x) z^x * (...) over x. Coefficient k of the sum is L * (expected credit of the target) * C(n, k),
# an exact integer, for every k at once. Once x exceeds every b_i no other class can tie or win, so the
# tail x > max(b) collapses into one product: sum_{x > max b} C(a, x) z^x * (1 + z)^(n - a).
#
# Exact integers, fast. Every polynomial has non-negative integer coefficients bounded by
# L * 2^n, so it is packed into one Python int with a slot of W = n + bits(L) + 1 bits per coefficient
# (Kronecker substitution): coefficient i sits at bits [W i, W (i + 1)). A polynomial product is then a
# single big-integer multiplication, truncation to degree d is a bit mask, (1 + z)^m is (2^W + 1)^m. No
# coefficient ever carries into its neighbour, so the result is exact for any n.


def answer_signature(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> tuple[tuple, int]:
    """``(classes, n_none)``: the sorted ``(count, n_correct)`` of each answer key, and the None count.

    maj@k of a problem depends only on this signature (used to memoise :func:`maj_at_k_many`).
    """
    answers = _as_list(answers)
    correct = _as_list(correct)
    if len(answers) != len(correct):
        raise ValueError(
            f"answers and correct must have one entry per sample; got len(answers)={len(answers)} "
            f"and len(correct)={len(correct)}"
        )
    counts = Counter(answers)
    n_correct = Counter(compress(answers, correct))
    n_none = counts.pop(None, 0)
    classes = tuple(sorted((cnt, n_correct[key]) for key, cnt in counts.items()))
    return classes, n_none


@lru_cache(maxsize=4096)
def _binomial_power(m: int, width: int) -> int:
    """(1 + z)^m packed with `width`-bit slots: the binomial row C(m, 0..m)."""
    return pow((1 << width) + 1, m)


@lru_cache(maxsize=1024)
def _target_credit_counts(a: int, others: tuple[int, ...], n_none: int, k_max: int, width: int) -> int:
    """Packed polynomial whose coefficient k is L * sum over k-subsets of the target's share of credit.

    `a`: size of the target class; `others`: sizes of the other voting classes; L = lcm(1..len(others)+1).
    Coefficients are exact for degrees 0..k_max (higher ones are dropped).
    """
    r = len(others)
    lcm_t = math.lcm(*range(1, r + 2))
    weights = [lcm_t // (t + 1) for t in range(r + 1)]
    n = a + sum(others) + n_none
    b_max = max(others, default=0)

    def mask(degree: int) -> int:  # keeps coefficients 0..degree
        return (1 << (width * (degree + 1))) - 1

    total = 0
    # x > b_max: nobody else can reach x votes.
    if b_max < min(a, k_max):
        tail = (_binomial_power(a, width) >> (width * (b_max + 1))) << (width * (b_max + 1))
        total = lcm_t * ((tail * _binomial_power(n - a, width)) & mask(k_max))
    # 1 <= x <= b_max: DP over the classes that can reach x, one packed polynomial per tie count t.
    for x in range(1, min(a, b_max, k_max) + 1):
        rest = k_max - x  # degree budget left for the other classes and None
        keep = mask(rest)
        low_mask = (1 << (width * x)) - 1
        shift = width * x
        constrained = [b for b in others if b >= x]
        free = n - a - sum(constrained)
        polys = [1]  # polys[t]: ways with exactly t other classes tied at x
        for b in constrained:
            low = _binomial_power(b, width) & low_mask  # sum_{y < x} C(b, y) z^y
            tie = (math.comb(b, x) << shift) if x <= rest else 0  # C(b, x) z^x
            new = [(p * low) & keep for p in polys]
            if tie:
                new.append(0)
                for t, p in enumerate(polys):
                    new[t + 1] += (p * tie) & keep
            polys = new
        # polys is shorter than weights when fewer ties are possible: zip stops early
        weighted = sum(w * p for w, p in zip(weights, polys, strict=False))
        filled = (weighted * _binomial_power(free, width)) & keep
        total += (math.comb(a, x) * filled) << shift
    return total


@lru_cache(maxsize=1 << 14)
def _maj_from_signature(classes: tuple[tuple[int, int], ...], n_none: int, ks: tuple[int, ...]) -> tuple:
    """maj@k for each k in `ks`, for a problem with this signature (see :func:`answer_signature`)."""
    if not ks:
        return ()
    counts = [cnt for cnt, _ in classes]
    n = sum(counts) + n_none
    # correct mass per class size: classes of equal size are interchangeable in the counting.
    correct_by_size: dict[int, int] = {}
    for cnt, n_correct in classes:
        if n_correct:
            correct_by_size[cnt] = correct_by_size.get(cnt, 0) + n_correct
    if not correct_by_size:
        return (0.0,) * len(ks)
    r = len(classes) - 1
    lcm_t = math.lcm(*range(1, r + 2))
    width = n + lcm_t.bit_length() + 1
    k_max = max(ks)
    denom_sizes = math.lcm(*correct_by_size)
    # numerator(k) = sum_a (n_correct_a / a) * [L * C(n, k) * expected share of credit of one class of
    # size a], scaled by denom_sizes so that it is an integer. Slots are read per target: a weighted sum
    # of packed polynomials could carry from one slot into the next.
    slot = (1 << width) - 1
    per_target = [
        (n_correct * (denom_sizes // a), _target_credit_counts(a, _without(counts, a), n_none, k_max, width))
        for a, n_correct in correct_by_size.items()
    ]
    out = []
    for k in ks:
        numer = sum(weight * ((packed >> (width * k)) & slot) for weight, packed in per_target)
        out.append(numer / (denom_sizes * lcm_t * math.comb(n, k)))
    return tuple(out)


def _without(counts: list[int], a: int) -> tuple[int, ...]:
    others = list(counts)
    others.remove(a)
    return tuple(others)


def _check_k(k: int, n: int, name: str = "k") -> None:
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= {name} <= n (n = number of samples); got {name}={k}, n={n}")


def maj_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """Exact maj@k of one problem: expectation over all k-subsets of "the majority answer is correct".

    ``answers``: one normalised answer key per sample (hashable; ``None`` = no answer extracted).
    ``correct``: one bool per sample. ``None`` does not vote; a tie among the top answers is broken
    uniformly at random (fractional credit); a subset with no votes scores 0. A key's correctness is the
    mean of its samples' flags (they agree for a deterministic verifier). Exact integer counting: no
    sampling, no loss of precision for large ``n``. Requires ``len(answers) == len(correct)`` and
    ``1 <= k <= n``.
    """
    k = _as_int(k, "k")
    classes, n_none = answer_signature(answers, correct)
    n = sum(cnt for cnt, _ in classes) + n_none
    _check_k(k, n)
    return _maj_from_signature(classes, n_none, (k,))[0]


def maj_at_k_many(
    answers_per_problem: Sequence[Sequence[Hashable | None]],
    correct_per_problem: Sequence[Sequence[bool]],
    ks: int | Iterable[int],
) -> np.ndarray:
    """maj@k for many problems and several k: a float64 array of shape ``(n_problems, len(ks))``.

    Same definition as :func:`maj_at_k` (problems may have different numbers of samples; every k must
    be in ``[1, n]`` for every problem). Problems are reduced to their :func:`answer_signature` and each
    distinct signature is computed once, for all ``ks`` in one pass.
    """
    ks_list = [ks] if isinstance(ks, (int, np.integer)) else list(ks)
    ks_tuple = tuple(_as_int(k, "ks") for k in ks_list)
    if len(answers_per_problem) != len(correct_per_problem):
        raise ValueError(
            "answers_per_problem and correct_per_problem must have one entry per problem; got "
            f"{len(answers_per_problem)} and {len(correct_per_problem)}"
        )
    out = np.zeros((len(answers_per_problem), len(ks_tuple)), dtype=np.float64)
    if not ks_tuple:
        return out
    k_min, k_max = min(ks_tuple), max(ks_tuple)
    cache: dict[tuple, tuple] = {}
    for p, (answers, correct) in enumerate(zip(answers_per_problem, correct_per_problem, strict=True)):
        try:
            signature = answer_signature(answers, correct)
        except ValueError as err:
            raise ValueError(f"problem {p}: {err}") from None
        row = cache.get(signature)
        if row is None:
            classes, n_none = signature
            n = sum(cnt for cnt, _ in classes) + n_none
            if k_min < 1 or k_max > n:
                bad = k_min if k_min < 1 else k_max
                raise ValueError(
                    f"maj@k needs 1 <= k <= n for every problem; got ks containing {bad} and problem {p} "
                    f"with n={n} samples"
                )
            row = cache[signature] = _maj_from_signature(classes, n_none, ks_tuple)
        out[p] = row
    return out


# --------------------------------------------------------------------------------------------------
# accuracy


def mean_accuracy(correct_per_problem: Iterable[Sequence[bool]]) -> float:
    """Mean over problems of the fraction of a problem's samples that are correct (= mean pass@1)."""
    fractions = []
    for p, correct in enumerate(correct_per_problem):
        flags = _as_list(correct)
        if not flags:
            raise ValueError(f"correct_per_problem[{p}] is empty: every problem needs at least one sample")
        fractions.append(sum(bool(f) for f in flags) / len(flags))
    if not fractions:
        raise ValueError("correct_per_problem is empty: need at least one problem")
    return float(np.mean(fractions))
