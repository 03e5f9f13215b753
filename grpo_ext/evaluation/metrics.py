"""Sample-based metrics for one problem or many at once: pass@k (Chen et al. 2021), pass^k, Cover@tau,
exact maj@k and answer diversity.

Conventions shared by every function here:

- A problem has ``n`` sampled completions. ``correct`` holds one bool per sample (the verifier's verdict)
  and ``answers`` one *normalised answer key* per sample (anything hashable; ``None`` = no answer could
  be extracted). ``c`` is the number of correct samples.
- Every function validates its arguments and names the offending one; each ``*_many`` version computes
  many problems at once (numpy arrays, no Python loop over problems where the metric allows it) and
  returns what the one-problem function returns, problem by problem.
- ``pass@k`` is the unbiased estimator ``1 - C(n - c, k) / C(n, k)``: the probability that at least one
  of ``k`` samples drawn without replacement from the ``n`` is correct.
- ``pass^k`` is the unbiased estimator ``C(c, k) / C(n, k)`` of the probability that *all* ``k`` samples
  are correct (the consistency counterpart of pass@k).
- ``Cover@tau`` of a problem is 1.0 if ``c / n >= tau`` else 0.0; its mean over problems is the share of
  problems the model solves at least a fraction ``tau`` of the time.
- ``maj@k`` is the *exact* expectation, over all ``C(n, k)`` subsets of ``k`` samples, of "the majority
  answer of the subset is correct". ``None`` does not vote; a tie among the most-voted answers is broken
  uniformly at random, so a subset whose top answers tie scores (number of correct ones among the tied
  answers) / (number tied); a subset with no votes at all scores 0. No Monte-Carlo is involved.
- Samples with the same answer key are one answer. The correctness of an answer is the mean of its
  samples' ``correct`` flags. With a deterministic verifier the flags of one key agree, so this is just
  "is this answer correct"; if they disagree, the answer gets fractional credit. The ``correct`` flag of
  a ``None`` sample is ignored (it never wins a vote).
- Answer diversity of a problem: the number of distinct answers and the Shannon entropy, in bits, of the
  distribution of its answers (``None`` does not count; a problem without any answer has 0 and 0.0).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from itertools import compress
from typing import NamedTuple

import numpy as np

from grpo_ext.evaluation.majority import maj_from_signature

__all__ = [
    "AnswerDiversity",
    "answer_diversity",
    "answer_diversity_many",
    "answer_signature",
    "cover_at",
    "cover_at_many",
    "maj_at_k",
    "maj_at_k_many",
    "mean_accuracy",
    "pass_at_k",
    "pass_at_k_many",
    "pass_hat_k",
    "pass_hat_k_many",
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


def _check_counts(n: int, c: int, k: int, metric: str) -> None:
    if k < 1:
        raise ValueError(f"{metric} needs 1 <= k <= n; got k={k} (n={n})")
    if k > n:
        raise ValueError(f"{metric} needs 1 <= k <= n; got k={k} > n={n} (cannot draw k of n samples)")
    if not 0 <= c <= n:
        raise ValueError(f"{metric} needs 0 <= c <= n (c = number of correct samples); got c={c}, n={n}")


def _count_arrays(n, c, metric: str, k: int | None = None) -> tuple[tuple, np.ndarray, np.ndarray]:
    """``(shape, n, c)``: the broadcast shape and the flat int64 arrays, validated (0 <= c <= n, k <= n)."""
    n_arr, c_arr = np.broadcast_arrays(np.asarray(n), np.asarray(c))
    for name, arr in (("n", n_arr), ("c", c_arr)):
        integral = np.issubdtype(arr.dtype, np.integer) or (
            np.issubdtype(arr.dtype, np.floating) and bool(np.all(arr == np.round(arr)))
        )
        if arr.size and not integral:
            raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    n_flat = n_arr.astype(np.int64).ravel()
    c_flat = c_arr.astype(np.int64).ravel()
    if n_flat.size == 0:
        return n_arr.shape, n_flat, c_flat
    if k is not None:
        if k < 1:
            raise ValueError(f"{metric} needs 1 <= k <= n; got k={k}")
        bad = np.flatnonzero(k > n_flat)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{metric} needs 1 <= k <= n; got k={k} > n={int(n_flat[i])} at problem {i} "
                f"({bad.size} problem(s) have fewer than k samples)"
            )
    else:
        bad = np.flatnonzero(n_flat < 1)
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{metric} needs n >= 1 samples; got n={int(n_flat[i])} at problem {i}")
    bad = np.flatnonzero((c_flat < 0) | (c_flat > n_flat))
    if bad.size:
        i = int(bad[0])
        c_i, n_i = int(c_flat[i]), int(n_flat[i])
        raise ValueError(f"{metric} needs 0 <= c <= n; got c={c_i}, n={n_i} at problem {i}")
    return n_arr.shape, n_flat, c_flat


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
    _check_counts(n, c, k, "pass@k")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_many(n, c, k: int) -> np.ndarray:
    """pass@k for many problems at once: ``n`` and ``c`` are arrays (or a scalar ``n``), ``k`` one int.

    Same estimator and validation as :func:`pass_at_k`, vectorised over problems (no Python loop over
    problems). Returns a float64 array of the broadcast shape of ``n`` and ``c``.
    """
    k = _as_int(k, "k")
    shape, n_flat, c_flat = _count_arrays(n, c, "pass@k", k)
    if n_flat.size == 0:
        return np.zeros(shape, dtype=np.float64)
    # rows of factors (1 - k / i) for i = n - c + 1 .. n, padded with 1.0
    out = _row_products(c_flat, lambda j, rows: 1.0 - k / ((n_flat[rows, None] - c_flat[rows, None] + 1) + j))
    out = 1.0 - out
    out[n_flat - c_flat < k] = 1.0
    return out.reshape(shape)


def _row_products(lengths: np.ndarray, factor) -> np.ndarray:
    """Per row i, the product of ``factor(j, rows)[i, j]`` over ``j < lengths[i]``.

    Rows are processed in chunks so that the (rows, max length) matrix stays near 2M entries for large n.
    """
    out = np.empty(lengths.size, dtype=np.float64)
    width = max(int(lengths.max()), 1)
    rows_per_chunk = max(1, (1 << 21) // width)
    j = np.arange(width, dtype=np.int64)
    for start in range(0, lengths.size, rows_per_chunk):
        rows = slice(start, start + rows_per_chunk)
        factors = np.where(j < lengths[rows, None], factor(j, rows), 1.0)
        out[rows] = np.prod(factors, axis=1)
    return out


# --------------------------------------------------------------------------------------------------
# pass^k


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k estimate: the probability that all ``k`` of ``k`` samples are correct.

    ``C(c, k) / C(n, k)``, computed as the product ``prod_{i < k} (c - i) / (n - i)``: 0.0 when ``c < k``,
    exactly 1.0 when ``c = n``. Requires ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    n, c, k = _as_int(n, "n"), _as_int(c, "c"), _as_int(k, "k")
    _check_counts(n, c, k, "pass^k")
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))


def pass_hat_k_many(n, c, k: int) -> np.ndarray:
    """pass^k for many problems at once: ``n`` and ``c`` arrays (or a scalar ``n``), ``k`` one int.

    Same estimator and validation as :func:`pass_hat_k`, vectorised over problems. Returns a float64 array
    of the broadcast shape of ``n`` and ``c``.
    """
    k = _as_int(k, "k")
    shape, n_flat, c_flat = _count_arrays(n, c, "pass^k", k)
    if n_flat.size == 0:
        return np.zeros(shape, dtype=np.float64)
    lengths = np.full(n_flat.size, k, dtype=np.int64)
    out = _row_products(lengths, lambda j, rows: (c_flat[rows, None] - j) / (n_flat[rows, None] - j))
    out[c_flat < k] = 0.0
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------------
# Cover@tau


def _check_tau(tau) -> float:
    if isinstance(tau, (bool, np.bool_)) or not isinstance(tau, (int, float, np.integer, np.floating)):
        raise TypeError(f"tau must be a number in [0, 1], got {type(tau).__name__} ({tau!r})")
    if not 0.0 <= float(tau) <= 1.0:  # also rejects NaN
        raise ValueError(f"Cover@tau needs 0 <= tau <= 1 (a fraction of the samples); got tau={tau}")
    return float(tau)


def cover_at(n: int, c: int, tau: float) -> float:
    """1.0 if at least a fraction ``tau`` of the ``n`` samples are correct (``c / n >= tau``), else 0.0.

    The mean over problems is Cover@tau. The comparison is on ``c / n`` as a float, so ``tau = 0.3`` with
    ``c = 3, n = 10`` counts (both are the nearest double to 3/10). Requires ``n >= 1``, ``0 <= c <= n``
    and ``0 <= tau <= 1``.
    """
    n, c, tau = _as_int(n, "n"), _as_int(c, "c"), _check_tau(tau)
    if n < 1:
        raise ValueError(f"Cover@tau needs n >= 1 samples; got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"Cover@tau needs 0 <= c <= n (c = number of correct samples); got c={c}, n={n}")
    return 1.0 if c / n >= tau else 0.0


def cover_at_many(n, c, tau: float) -> np.ndarray:
    """:func:`cover_at` for many problems: ``n`` and ``c`` arrays (or a scalar ``n``), ``tau`` one number."""
    tau = _check_tau(tau)
    shape, n_flat, c_flat = _count_arrays(n, c, "Cover@tau")
    if n_flat.size == 0:
        return np.zeros(shape, dtype=np.float64)
    return (c_flat / n_flat >= tau).astype(np.float64).reshape(shape)


# --------------------------------------------------------------------------------------------------
# maj@k (the counting lives in grpo_ext.evaluation.majority)


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


def _check_k(k: int, n: int, name: str = "k") -> None:
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= {name} <= n (n = number of samples); got {name}={k}, n={n}")


def maj_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """Exact maj@k of one problem: expectation over all k-subsets of "the majority answer is correct".

    ``answers``: one normalised answer key per sample (hashable; ``None`` = no answer extracted).
    ``correct``: one bool per sample. ``None`` does not vote; a tie among the top answers is broken
    uniformly at random (fractional credit); a subset with no votes scores 0. A key's correctness is the
    mean of its samples' flags (they agree for a deterministic verifier). No sampling: exact integer
    counting for small problems, an exact float64 evaluation (absolute error ~1e-14) for large ones, such
    as n = 1024 (:mod:`grpo_ext.evaluation.majority`). Requires ``len(answers) == len(correct)`` and
    ``1 <= k <= n``.
    """
    k = _as_int(k, "k")
    classes, n_none = answer_signature(answers, correct)
    n = sum(cnt for cnt, _ in classes) + n_none
    _check_k(k, n)
    return maj_from_signature(classes, n_none, (k,))[0]


def maj_at_k_many(
    answers_per_problem: Sequence[Sequence[Hashable | None]],
    correct_per_problem: Sequence[Sequence[bool]],
    ks: int | Iterable[int],
) -> np.ndarray:
    """maj@k for many problems and several k: a float64 array of shape ``(n_problems, len(ks))``.

    Same definition as :func:`maj_at_k` (problems may have different numbers of samples; every k must
    be in ``[1, n]`` for every problem). Problems are reduced to their :func:`answer_signature` and each
    distinct signature is computed once, for all ``ks``.
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
            row = cache[signature] = maj_from_signature(classes, n_none, ks_tuple)
        out[p] = row
    return out


# --------------------------------------------------------------------------------------------------
# answer diversity


class AnswerDiversity(NamedTuple):
    distinct: int  # number of distinct answers (None excluded)
    entropy: float  # Shannon entropy of the answers' distribution, in bits (None excluded)


def _diversity(counts: Iterable[int]) -> AnswerDiversity:
    sizes = np.fromiter(counts, dtype=np.float64)
    if sizes.size <= 1:
        return AnswerDiversity(int(sizes.size), 0.0)
    share = sizes / sizes.sum()
    return AnswerDiversity(int(sizes.size), float(-(share * np.log2(share)).sum()))


def answer_diversity(answers: Sequence[Hashable | None]) -> AnswerDiversity:
    """``(distinct, entropy)`` of one problem's answers: how many different answers, and how spread they are.

    ``entropy`` = -sum_a p_a log2 p_a over the distinct answers, with p_a the share of the answered samples
    that gave a (bits: 1.0 = two equally common answers). ``None`` samples do not count; a problem whose
    samples are all ``None`` has ``(0, 0.0)``, one with a single answer ``(1, 0.0)``.
    """
    answers = _as_list(answers)
    if not answers:
        raise ValueError("answers is empty: a problem needs at least one sample")
    counts = Counter(answers)
    counts.pop(None, None)
    return _diversity(counts.values())


def answer_diversity_many(answers_per_problem: Sequence[Sequence[Hashable | None]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`answer_diversity` of many problems: ``(distinct, entropy)`` as int64 and float64 arrays."""
    distinct = np.zeros(len(answers_per_problem), dtype=np.int64)
    entropy = np.zeros(len(answers_per_problem), dtype=np.float64)
    for p, answers in enumerate(answers_per_problem):
        try:
            distinct[p], entropy[p] = answer_diversity(answers)
        except ValueError as err:
            raise ValueError(f"problem {p}: {err}") from None
    return distinct, entropy


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
