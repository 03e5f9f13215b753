"""The counting behind exact maj@k: two engines for one expectation, chosen by the size of the problem.

A problem is reduced to its *signature* (see :func:`grpo_ext.evaluation.metrics.answer_signature`): the sorted
``(count, n_correct)`` of each answer class plus the number of ``None`` samples. maj@k is the exact expectation,
over all k-subsets of the n samples, of the majority answer's correctness (``None`` does not vote, a tie among the
top answers is broken uniformly at random, no votes scores 0). Classes of equal size are interchangeable, so only
the correct mass per class size matters: maj@k = sum over sizes a of (n_correct of size a / a) * (expected share
of credit of one class of size a).

- :func:`exact_from_signature` counts with exact integers (Kronecker-packed big-int polynomials, every k in one
  pass). Exact to the last bit and the faster engine for small problems, but its polynomials are ~n^2 bits and it
  tracks ties class by class: at n = 1024 one problem takes seconds to minutes.
- :func:`spectral_from_signature` evaluates the same expectation in float64, one k at a time, with a cost
  polynomial in the number of *distinct class sizes*. Nothing is sampled or approximated beyond float64: the
  error is rounding (absolute error ~1e-14 at n = 1024; the tests hold it to 1e-13 against the exact engine and
  enumeration) plus dropped terms with proven bounds (steps 3 and 4) far below that, so a maj@k under ~1e-17
  may read 0. A problem whose every answer is correct gets 1 - P(no votes) in closed form.

:func:`maj_from_signature` picks the engine (:func:`uses_exact_engine`).

The spectral engine, for one target class of size a and one k, and why each step:

1. Poissonisation. Draw each sample independently with probability p = k / n. Given that k samples were drawn,
   the subset is a uniform k-subset, so E_k[credit] = E[credit * 1{size = k}] / P(size = k). Class vote counts
   become independent binomials, and "size = k" is coefficient k of a generating function in w. With p = k / n,
   size k is the most likely size: every value is a probability (no overflow at any n) and the coefficient we
   need is the largest one (~1 / (2.5 sd)), never a tiny one beside huge ones.
2. Ties as an integral. If the target has x votes and t other classes tie at x, the target gets
   1 / (t + 1) = integral_0^1 u^t du. For fixed u the credit is a product over classes of
   (P(votes < x) + u P(votes = x)): classes of one size give one factor raised to their count. At degree k the
   integrand is a polynomial in u of degree <= T = min(#classes that can reach x, (k - x) // x), so
   Gauss-Legendre quadrature with T // 2 + 1 nodes integrates it exactly (positive weights, nodes in [0, 1]: the
   coefficients of other degrees stay between 0 and their probability, which step 3 relies on).
3. Coefficient extraction. The generating function is evaluated at N roots of unity (half of them: the
   coefficients are real) and coefficient k is a discrete Fourier sum. Coefficients k +- N, k +- 2N, ... alias
   onto it; each is at most P(size = j) under binomial(n, p), so N is the fewest roots for which all of those
   are below 1e-19 * P(size = k) (N <= n + 1, where nothing aliases).
4. Bounded skipping. An x whose term is bounded by P(target draws x) * prod P(other class draws <= x) < 1e-22 is
   skipped. Classes smaller than x cannot reach it: their samples join the None samples in one binomial factor.
5. Vectorised over (class size, x, quadrature node, root), in runs of x that need the same number of nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

import numpy as np

__all__ = [
    "clear_caches",
    "exact_from_signature",
    "maj_from_signature",
    "spectral_from_signature",
    "uses_exact_engine",
]


def uses_exact_engine(classes: tuple[tuple[int, int], ...], n_none: int) -> bool:
    """True where the exact-integer engine is the faster one (measured): n <= 128 and n * classes <= 4096.

    Every problem with n <= 64 qualifies, so results at those sizes are the exact engine's, bit for bit.
    """
    n = sum(cnt for cnt, _ in classes) + n_none
    return n <= 128 and n * len(classes) <= 4096


def maj_from_signature(classes: tuple[tuple[int, int], ...], n_none: int, ks: tuple[int, ...]) -> tuple:
    """maj@k for each k in `ks` (each in [1, n]) of a problem with this signature, by the engine suited to it."""
    if uses_exact_engine(classes, n_none):
        return exact_from_signature(classes, n_none, ks)
    return spectral_from_signature(classes, n_none, ks)


def clear_caches() -> None:
    """Forget every memoised intermediate (benchmarks time cold runs)."""
    for fn in (exact_from_signature, _target_credit_counts, _binomial_power, _binomial_pmf, _binomial_cdf):
        fn.cache_clear()
    _spectrum.cache_clear()


def _correct_by_size(classes) -> dict[int, int]:
    """Correct mass per class size: classes of equal size are interchangeable in the counting."""
    out: dict[int, int] = {}
    for cnt, n_correct in classes:
        if n_correct:
            out[cnt] = out.get(cnt, 0) + n_correct
    return out


# --------------------------------------------------------------------------------------------------
# exact integers
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
# Every polynomial has non-negative integer coefficients bounded by L * 2^n, so it is packed into one
# Python int with a slot of W = n + bits(L) + 1 bits per coefficient (Kronecker substitution):
# coefficient i sits at bits [W i, W (i + 1)). A polynomial product is then a single big-integer
# multiplication, truncation to degree d is a bit mask, (1 + z)^m is (2^W + 1)^m. No coefficient ever
# carries into its neighbour, so the result is exact for any n.


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
def exact_from_signature(classes: tuple[tuple[int, int], ...], n_none: int, ks: tuple[int, ...]) -> tuple:
    """maj@k for each k in `ks` by exact integer counting (every k in one pass; each k in [1, n])."""
    if not ks:
        return ()
    counts = [cnt for cnt, _ in classes]
    n = sum(counts) + n_none
    correct_by_size = _correct_by_size(classes)
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


# --------------------------------------------------------------------------------------------------
# spectral float64 (see the module docstring for the derivation)

_ALIAS_TOLERANCE = 1e-19  # aliased coefficients below this fraction of P(size = k) are ignored
_NEGLIGIBLE = 1e-22  # an x whose whole contribution is bounded by this probability is skipped


@lru_cache(maxsize=1 << 15)
def _binomial_pmf(s: int, k: int, n: int) -> np.ndarray:
    """Binomial(s, k / n) pmf at 0..s, by ratios outward from the mode, normalised (no lgamma, no overflow)."""
    p = k / n
    y = np.arange(s, dtype=np.float64)
    ratio = (s - y) / (y + 1) * (p / (1 - p))  # pmf(y + 1) / pmf(y)
    mode = min(s, math.floor((s + 1) * p))
    pmf = np.empty(s + 1)
    pmf[mode] = 1.0
    pmf[mode + 1 :] = np.cumprod(ratio[mode:])
    pmf[:mode] = np.cumprod(1.0 / ratio[:mode][::-1])[::-1]
    pmf /= pmf.sum()
    pmf.flags.writeable = False
    return pmf


@lru_cache(maxsize=1 << 15)
def _binomial_cdf(s: int, k: int, n: int) -> np.ndarray:
    cdf = np.minimum(np.cumsum(_binomial_pmf(s, k, n)), 1.0)
    cdf.flags.writeable = False
    return cdf


@lru_cache(maxsize=256)
def _gauss_legendre(q: int) -> tuple[np.ndarray, np.ndarray]:
    """q nodes and weights on [0, 1]: exact for polynomials of degree <= 2q - 1."""
    nodes, weights = np.polynomial.legendre.leggauss(q)
    return (nodes + 1) / 2, weights / 2


class _Spectrum:
    """What depends on n and the ks only: p, the roots of unity, the extraction of each coefficient k.

    ``ks`` share one evaluation drawn with p = center / n; each k in it must have P(size = k) >= _GROUP_FLOOR
    * P(size = center) (see :func:`_k_groups`), so that its coefficient is never small beside the others.
    """

    def __init__(self, n: int, center: int, ks: tuple[int, ...]):
        self.n, self.center, self.ks, self.k_max = n, center, ks, max(ks)
        p = center / n
        total = _binomial_pmf(n, center, n)
        self.p_size = total[list(ks)]
        # fewest roots N such that, for every k here, each aliased j = k +- N, k +- 2N, ... has
        # pmf(j) < tolerance * pmf(k): N must jump over the whole range of non-negligible sizes
        big = np.flatnonzero(total >= _ALIAS_TOLERANCE * self.p_size.min())
        self.roots = n_roots = int(max(big[-1] - min(ks), max(ks) - big[0])) + 1
        half = np.arange(n_roots // 2 + 1)  # roots j and N - j are conjugate: evaluate j <= N / 2 only
        # table[y, j] = w_j^y for y = 0..N-1 (w_j^y depends on y mod N only)
        self.table = np.exp(2j * np.pi * (np.outer(np.arange(n_roots), half) % n_roots) / n_roots)
        weights = np.full(half.size, 2.0)
        weights[0] = 1.0
        if n_roots % 2 == 0:
            weights[-1] = 1.0
        # coefficient k = sum_j weight_j * Re(G(w_j) * w_j^-k) / N
        self.extract = weights[:, None] * np.conj(self.table[np.array(ks) % n_roots]).T / n_roots
        self.sample_pgf = (1 - p) + p * self.table[1]  # one sample: drawn (w) with probability p

    def powers(self, ys: np.ndarray) -> np.ndarray:
        """w_j^y for each y in `ys`: shape (len(ys), roots // 2 + 1)."""
        return self.table[ys % self.roots]

    def coefficients(self, values: np.ndarray) -> np.ndarray:
        """Coefficient k of a generating function given at the roots, divided by P(size = k), for each k."""
        return np.real(values @ self.extract) / self.p_size


@lru_cache(maxsize=64)
def _spectrum(n: int, center: int, ks: tuple[int, ...]) -> _Spectrum:
    return _Spectrum(n, center, ks)


_GROUP_FLOOR = 0.5  # a k shares an evaluation if P(size = k) >= this share of the most likely size's


def _k_groups(n: int, ks: list[int]) -> list[tuple[int, tuple[int, ...]]]:
    """``(center, ks)`` groups of the sorted distinct ``ks`` (each < n) that can share one evaluation.

    Many nearby ks (every k from 1 to n, for a curve) share a p: an evaluation serves the ks within ~1.2 sd of
    its center, with at most 2x the rounding error of a k at the center (measured: no larger error than one
    evaluation per k, 45 evaluations instead of 1023 at n = 1024). Powers of two share little: 1 and 2, 4 and 8.
    """
    groups = []
    i = 0
    while i < len(ks):
        first = ks[i]
        center = min(n - 1, first + int(1.1 * math.sqrt(first * (1 - first / n))))  # ~1.2 sd above the first
        pmf = _binomial_pmf(n, center, n)
        if pmf[first] < _GROUP_FLOOR * pmf[center]:
            center, pmf = first, _binomial_pmf(n, first, n)
        j = i + 1
        while j < len(ks) and pmf[ks[j]] >= _GROUP_FLOOR * pmf[center]:
            j += 1
        middle = (first + ks[j - 1]) // 2  # centred, the group's ends are likelier (a lone k is its own center)
        pmf_middle = _binomial_pmf(n, middle, n)
        if min(pmf_middle[first], pmf_middle[ks[j - 1]]) >= _GROUP_FLOOR * pmf_middle[middle]:
            center = middle
        groups.append((center, tuple(ks[i:j])))
        i = j
    return groups


def _class_rows(spec: _Spectrum, sizes: list[int], y_max: int) -> tuple[np.ndarray, np.ndarray]:
    """``(at, below)``, shape (sizes, y_max + 1, roots): P(a class of size s draws y) w^y, and its sum over y' <= y.

    Rows past a size are 0 in ``at`` and the class's whole generating function in ``below``.
    """
    pmf = np.zeros((len(sizes), y_max + 1))
    for i, s in enumerate(sizes):
        pmf[i, : s + 1] = _binomial_pmf(s, spec.center, spec.n)[: y_max + 1]
    at = pmf[:, :, None] * spec.powers(np.arange(y_max + 1))[None]
    return at, np.cumsum(at, axis=1)


def _int_power(z: np.ndarray, m: np.ndarray) -> np.ndarray:
    """z ** m for integer m >= 1 broadcast over z; numpy's complex power is fast below 100 only, so split m."""
    if m.max() < 100:
        return z**m
    high, low = np.divmod(m, 64)
    out = z**high
    for _ in range(6):
        out = out * out
    return out * z**low


def _target_credit(spec: _Spectrum, a: int, others: dict[int, int], n_none: int) -> np.ndarray:
    """Expected share of credit, over k-subsets, of one class of size `a` against `others` (size -> count),
    for each k of `spec`."""
    n, center, k = spec.n, spec.center, spec.k_max  # the largest k bounds x and the ties for every k
    x = np.arange(1, min(a, k) + 1)
    # skip the x where P(target draws x) * prod P(other draws <= x) (a bound on the whole term) is negligible
    bound = _binomial_pmf(a, center, n)[x]
    for s, m in others.items():
        bound = bound * _binomial_cdf(s, center, n)[np.minimum(x, s)] ** m
    x = x[bound >= _NEGLIGIBLE]
    target = _binomial_pmf(a, center, n)[x, None] * spec.powers(x)  # P(target draws x) w^x
    b_max = max(others, default=0)
    tail = x > b_max  # nobody else can reach x votes: every other sample is unconstrained
    acc = target[tail].sum(axis=0) * spec.sample_pgf ** (n - a)
    x, target = x[~tail], target[~tail]
    if not x.size:
        return spec.coefficients(acc)
    sizes = np.array(sorted(others), dtype=np.int64)
    mults = np.array([others[s] for s in sizes.tolist()], dtype=np.int64)
    first = int(np.searchsorted(sizes, x[0]))  # smaller classes never reach any x here
    at, below = _class_rows(spec, sizes[first:].tolist(), int(x[-1]))
    reach = np.cumsum(mults[::-1])[::-1]  # reach[i]: classes of size >= sizes[i]
    ties = np.minimum(reach[np.searchsorted(sizes, x)], (k - x) // x)
    nodes = ties // 2 + 1  # Gauss-Legendre nodes that integrate degree `ties` in u exactly
    for q in np.unique(nodes).tolist():
        seg = nodes == q
        xs = x[seg]
        lo = int(np.searchsorted(sizes, xs[0]))  # sizes below min x are unconstrained in this segment
        free = n_none + int(sizes[:lo] @ mults[:lo])
        u, weights = _gauss_legendre(q)
        # (size, x, node, root): a class of size s draws < x, or exactly x (then it ties: weight u)
        factor = below[lo - first :, xs - 1, None, :] + u[None, None, :, None] * at[lo - first :, xs, None, :]
        m = mults[lo:]
        several = m > 1
        product = factor[~several].prod(axis=0)
        if several.any():
            product = product * _int_power(factor[several], m[several, None, None, None]).prod(axis=0)
        integral = np.einsum("xqj,q->xj", product, weights)
        acc += np.einsum("xj,xj->j", target[seg], integral) * spec.sample_pgf**free
    return spec.coefficients(acc)


def spectral_from_signature(classes: tuple[tuple[int, int], ...], n_none: int, ks: tuple[int, ...]) -> tuple:
    """maj@k for each k in `ks` by the spectral float64 evaluation (each k in [1, n])."""
    counts = [cnt for cnt, _ in classes]
    n = sum(counts) + n_none
    correct_by_size = _correct_by_size(classes)
    if not correct_by_size:
        return (0.0,) * len(ks)
    if all(n_correct == cnt for cnt, n_correct in classes):  # every answer right: 1 - P(no votes), exactly
        return tuple(1.0 - math.prod((n_none - i) / (n - i) for i in range(k)) if k <= n_none else 1.0 for k in ks)
    sizes = Counter(counts)
    targets = []
    for a, n_correct in correct_by_size.items():
        others = sizes.copy()
        others[a] -= 1
        targets.append((a, n_correct, {s: m for s, m in others.items() if m}))
    out = {}
    for center, group in _k_groups(n, sorted(set(ks) - {n})):
        spec = _spectrum(n, center, group)
        total = sum(n_correct / a * _target_credit(spec, a, others, n_none) for a, n_correct, others in targets)
        out.update(zip(group, np.clip(total, 0.0, 1.0).tolist(), strict=True))
    if n in ks:  # the only subset is everything: the largest classes tie
        top = max(counts)
        out[n] = correct_by_size.get(top, 0) / top / sizes[top]
    return tuple(out[k] for k in ks)
