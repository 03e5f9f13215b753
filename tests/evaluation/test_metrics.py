"""pass@k, pass^k, Cover@tau, answer diversity and accuracy (grpo_ext.evaluation.metrics): checked against closed
forms, plain enumeration and hand-worked cases. maj@k and its two engines: tests/evaluation/test_majority.py."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest

from grpo_ext.evaluation.metrics import (
    answer_diversity,
    answer_diversity_many,
    answer_signature,
    cover_at,
    cover_at_many,
    mean_accuracy,
    pass_at_k,
    pass_at_k_many,
    pass_hat_k,
    pass_hat_k_many,
)

# --------------------------------------------------------------------------------------------------
# references, written plainly


def closed_form_pass(n: int, c: int, k: int) -> float:
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


# --------------------------------------------------------------------------------------------------
# pass@k


def test_pass_at_k_matches_closed_form_for_all_small_cases():
    for n in range(1, 31):
        for c in range(n + 1):
            for k in range(1, n + 1):
                got = pass_at_k(n, c, k)
                assert got == pytest.approx(closed_form_pass(n, c, k), rel=1e-12, abs=1e-14), (n, c, k)
                if n - c < k:
                    assert got == 1.0  # every k-subset holds a correct sample: exactly 1
                if c == 0:
                    assert got == 0.0


def test_pass_at_k_simple_values_and_large_n():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # C(3,2)/C(4,2) = 3/6 fail
    assert pass_at_k(2000, 1, 1) == pytest.approx(1 / 2000, rel=1e-12)
    assert pass_at_k(300, 7, 64) == pytest.approx(closed_form_pass(300, 7, 64), rel=1e-12)
    assert pass_at_k(np.int64(8), np.int32(2), np.int16(3)) == pytest.approx(closed_form_pass(8, 2, 3))


def test_pass_at_k_many_equals_scalar():
    for k in (1, 2, 3, 5, 8, 13, 30):
        pairs = [(n, c) for n in range(k, 31) for c in range(n + 1)]
        n_arr = np.array([p[0] for p in pairs])
        c_arr = np.array([p[1] for p in pairs])
        got = pass_at_k_many(n_arr, c_arr, k)
        assert got.shape == (len(pairs),) and got.dtype == np.float64
        want = np.array([pass_at_k(n, c, k) for n, c in pairs])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
        assert np.all(got[n_arr - c_arr < k] == 1.0)


def test_pass_at_k_many_shapes():
    got = pass_at_k_many(16, [[0, 1], [8, 16]], 4)  # scalar n broadcasts against a 2-D c
    assert got.shape == (2, 2)
    assert got[0, 0] == 0.0 and got[1, 1] == 1.0
    assert got[0, 1] == pytest.approx(0.25)
    assert pass_at_k_many(np.array([], dtype=int), np.array([], dtype=int), 3).shape == (0,)


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (5, 2, 6, r"k=6 > n=5"),
        (5, 2, 0, r"1 <= k <= n; got k=0"),
        (5, -1, 2, r"0 <= c <= n.*c=-1, n=5"),
        (5, 6, 2, r"0 <= c <= n.*c=6, n=5"),
    ],
)
def test_pass_at_k_validation(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_pass_at_k_type_and_many_validation():
    with pytest.raises(TypeError, match="k must be an integer"):
        pass_at_k(5, 2, 1.5)
    with pytest.raises(ValueError, match=r"k=4 > n=3 at problem 1"):
        pass_at_k_many([8, 3, 2], [1, 1, 1], 4)
    with pytest.raises(ValueError, match=r"c=9, n=8 at problem 0"):
        pass_at_k_many([8, 8], [9, 1], 2)
    with pytest.raises(ValueError, match=r"got k=0"):
        pass_at_k_many([8], [1], 0)
    with pytest.raises(TypeError, match="c must hold integers"):
        pass_at_k_many([8], [1.5], 2)


# --------------------------------------------------------------------------------------------------
# small helpers


def test_mean_accuracy():
    assert mean_accuracy([[True, False], [True, True, True, False]]) == pytest.approx((0.5 + 0.75) / 2)
    assert mean_accuracy(np.array([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=bool)) == pytest.approx(0.125)
    with pytest.raises(ValueError, match="empty"):
        mean_accuracy([])
    with pytest.raises(ValueError, match=r"correct_per_problem\[1\] is empty"):
        mean_accuracy([[True], []])


def test_answer_signature():
    answers = ["a", None, "b", "a", None, "c"]
    correct = [True, True, False, True, False, False]
    classes, n_none = answer_signature(answers, correct)
    assert n_none == 2
    assert classes == ((1, 0), (1, 0), (2, 2))


# --------------------------------------------------------------------------------------------------
# pass^k


def brute_pass_hat(n: int, c: int, k: int) -> Fraction:
    """Share of the k-subsets of n samples (the first c correct) in which every sample is correct."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(all(i < c for i in s) for s in subsets), len(subsets))


def test_pass_hat_k_matches_enumeration_and_closed_form():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) == pytest.approx(float(brute_pass_hat(n, c, k)), rel=1e-14), (n, c, k)
    for n in range(9, 41):
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = float(Fraction(math.comb(c, k), math.comb(n, k)))
                assert pass_hat_k(n, c, k) == pytest.approx(want, rel=1e-12, abs=1e-300), (n, c, k)


def test_pass_hat_k_edge_cases_and_large_n():
    for n in (1, 5, 1024):
        for k in {k for k in (1, 2, n) if k <= n}:
            assert pass_hat_k(n, 0, k) == 0.0  # c = 0: no all-correct subset
            assert pass_hat_k(n, n, k) == 1.0  # c = n: every subset is all correct, exactly 1
        assert pass_hat_k(n, n - 1, n) == 0.0  # k = n takes every sample, and one is wrong
    assert pass_hat_k(10, 3, 1) == pytest.approx(0.3)  # pass^1 = pass@1 = c / n
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2) / C(4,2)
    for c, k in [(700, 64), (1000, 512), (512, 512), (1023, 1000)]:
        want = float(Fraction(math.comb(c, k), math.comb(1024, k)))
        assert pass_hat_k(1024, c, k) == pytest.approx(want, rel=1e-12, abs=1e-300)
    # without replacement, all-correct is rarer than with: pass^k <= (c / n)^k <= pass@k
    assert pass_hat_k(100, 60, 5) <= 0.6**5 <= pass_at_k(100, 60, 5)


def test_pass_hat_k_many_equals_scalar_and_validates():
    for k in (1, 2, 3, 8, 30):
        pairs = [(n, c) for n in range(k, 33) for c in range(n + 1)]
        n_arr, c_arr = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        got = pass_hat_k_many(n_arr, c_arr, k)
        assert got.shape == (len(pairs),) and got.dtype == np.float64
        np.testing.assert_allclose(got, [pass_hat_k(n, c, k) for n, c in pairs], rtol=1e-13, atol=0)
        assert np.all(got[c_arr < k] == 0.0) and np.all(got[c_arr == n_arr] == 1.0)
    got = pass_hat_k_many(1024, np.array([0, 512, 1024]), 512)
    assert got[0] == 0.0 and got[2] == 1.0 and got[1] == pytest.approx(pass_hat_k(1024, 512, 512), rel=1e-12)
    assert pass_hat_k_many(np.array([], dtype=int), np.array([], dtype=int), 3).shape == (0,)
    with pytest.raises(ValueError, match=r"pass\^k needs 1 <= k <= n; got k=6 > n=5"):
        pass_hat_k(5, 2, 6)
    with pytest.raises(ValueError, match=r"pass\^k needs 0 <= c <= n.*c=6, n=5"):
        pass_hat_k(5, 6, 2)
    with pytest.raises(ValueError, match=r"k=4 > n=3 at problem 1"):
        pass_hat_k_many([8, 3], [1, 1], 4)
    with pytest.raises(ValueError, match=r"c=9, n=8 at problem 0"):
        pass_hat_k_many([8], [9], 2)
    with pytest.raises(TypeError, match="k must be an integer"):
        pass_hat_k(5, 2, 2.0)


# --------------------------------------------------------------------------------------------------
# Cover@tau


def test_cover_at_matches_exact_comparison():
    taus = [Fraction(i, 20) for i in range(21)]
    for n in range(1, 31):
        for c in range(n + 1):
            for tau in taus:
                want = 1.0 if Fraction(c, n) >= tau else 0.0
                assert cover_at(n, c, float(tau)) == want, (n, c, tau)
    # decimal thresholds land on the fraction they spell
    assert cover_at(10, 3, 0.3) == 1.0 and cover_at(10, 7, 0.7) == 1.0 and cover_at(10, 6, 0.7) == 0.0


def test_cover_at_edge_cases_and_many():
    assert cover_at(5, 0, 0.1) == 0.0 and cover_at(5, 0, 0.0) == 1.0  # c = 0; tau = 0 is always covered
    assert cover_at(5, 5, 1.0) == 1.0 and cover_at(5, 4, 1.0) == 0.0  # tau = 1 needs c = n
    assert cover_at(1, 1, 0.5) == 1.0 and cover_at(1, 0, 0.5) == 0.0  # one sample
    n = np.array([[10, 10], [1024, 3]])
    c = np.array([[3, 2], [512, 3]])
    got = cover_at_many(n, c, 0.3)
    assert got.shape == (2, 2) and got.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    assert cover_at_many(np.array([], dtype=int), np.array([], dtype=int), 0.5).shape == (0,)
    for bad, err in [(-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError), (True, TypeError)]:
        with pytest.raises(err, match="tau"):
            cover_at(5, 2, bad)
    with pytest.raises(ValueError, match=r"n >= 1.*n=0"):
        cover_at(0, 0, 0.5)
    with pytest.raises(ValueError, match=r"c=6, n=5 at problem 0"):
        cover_at_many([5], [6], 0.5)
    with pytest.raises(ValueError, match=r"n=0 at problem 1"):
        cover_at_many([5, 0], [1, 0], 0.5)


# --------------------------------------------------------------------------------------------------
# answer diversity


def brute_diversity(answers):
    counts: dict = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    total = sum(counts.values())
    return len(counts), -sum(v / total * math.log2(v / total) for v in counts.values())


def test_answer_diversity_hand_worked_and_edge_cases():
    distinct, entropy = answer_diversity(["a", "a", "b", None])
    assert distinct == 2 and entropy == pytest.approx(-(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3))
    assert answer_diversity([None, None]) == (0, 0.0)  # all None: no answer, no diversity
    assert answer_diversity(["x"] * 7 + [None]) == (1, 0.0)  # one answer
    assert answer_diversity(["a", "b"]) == (2, pytest.approx(1.0))  # two equally common answers: one bit
    assert answer_diversity(list(range(1024))) == (1024, pytest.approx(10.0))  # all distinct: log2 n
    assert answer_diversity(["only"]) == (1, 0.0)  # one sample
    with pytest.raises(ValueError, match="empty"):
        answer_diversity([])


def test_answer_diversity_matches_brute_force_and_many():
    rng = random.Random(11)
    problems = []
    for _ in range(80):
        keys = [None, *range(rng.randint(1, 12))]
        problems.append([rng.choice(keys) for _ in range(rng.randint(1, 40))])
    problems.append(np.array(["u", "v", "u"], dtype=object))
    distinct, entropy = answer_diversity_many(problems)
    assert distinct.dtype == np.int64 and entropy.dtype == np.float64
    for p, answers in enumerate(problems):
        want_d, want_h = brute_diversity(list(answers))
        assert answer_diversity(answers) == (want_d, pytest.approx(want_h, abs=1e-12))
        assert (distinct[p], entropy[p]) == (want_d, pytest.approx(want_h, abs=1e-12))
    assert answer_diversity_many([])[0].shape == (0,)
    with pytest.raises(ValueError, match="problem 1: answers is empty"):
        answer_diversity_many([["a"], []])
