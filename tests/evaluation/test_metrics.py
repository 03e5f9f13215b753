"""pass@k, pass^k, Cover@tau, maj@k (both engines), answer diversity and accuracy: checked against closed
forms, plain enumeration and hand-worked cases."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_ext.evaluation.majority import exact_from_signature, spectral_from_signature, uses_exact_engine
from grpo_ext.evaluation.metrics import (
    answer_diversity,
    answer_diversity_many,
    answer_signature,
    cover_at,
    cover_at_many,
    maj_at_k,
    maj_at_k_many,
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


def key_correctness(answers, correct) -> dict:
    """Correctness of each answer key: the mean of its samples' flags (None excluded)."""
    flags: dict = {}
    for a, ok in zip(answers, correct, strict=True):
        if a is not None:
            flags.setdefault(a, []).append(bool(ok))
    return {a: Fraction(sum(v), len(v)) for a, v in flags.items()}


def brute_maj(answers, correct, k) -> Fraction:
    """Enumerate every k-subset of samples, take its majority answer, average the credit."""
    q = key_correctness(answers, correct)
    total = Fraction(0)
    subsets = list(itertools.combinations(range(len(answers)), k))
    for subset in subsets:
        votes: dict = {}
        for i in subset:
            if answers[i] is not None:
                votes[answers[i]] = votes.get(answers[i], 0) + 1
        if not votes:
            continue  # no votes: scores 0
        top = max(votes.values())
        tied = [a for a, v in votes.items() if v == top]
        total += sum(q[a] for a in tied) / len(tied)  # random tie-break: fractional credit
    return total / len(subsets)


def enumerate_vote_counts(sizes, qs, n_none, k) -> Fraction:
    """Independent count for larger n: enumerate votes per class, weight by the number of subsets."""
    n = sum(sizes) + n_none
    total = Fraction(0)
    for votes in itertools.product(*(range(min(b, k) + 1) for b in sizes)):
        rest = k - sum(votes)
        if rest < 0 or rest > n_none or max(votes, default=0) == 0:
            continue
        ways = math.comb(n_none, rest)
        for b, x in zip(sizes, votes, strict=True):
            ways *= math.comb(b, x)
        top = max(votes)
        tied = [q for q, x in zip(qs, votes, strict=True) if x == top]
        total += ways * Fraction(sum(tied)) / len(tied)
    return total / math.comb(n, k)


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
# maj@k: hand-worked cases


def test_maj_hand_worked_two_answers_and_none():
    answers, correct = ["a", "a", "b", None], [True, True, False, False]
    # k=1: the sample itself decides; a1, a2 -> 1; b -> 0; None -> no vote, 0.      2/4
    assert maj_at_k(answers, correct, 1) == pytest.approx(1 / 2)
    # k=2, C(4,2)=6 subsets: {a1,a2} -> 1; {a1,b}, {a2,b} -> tie, 1/2 each;
    # {a1,None}, {a2,None} -> 1 each; {b,None} -> 0.   (1 + 1/2 + 1/2 + 1 + 1 + 0) / 6 = 4/6
    assert maj_at_k(answers, correct, 2) == pytest.approx(2 / 3)
    # k=3, 4 subsets: {a1,a2,b} -> 1; {a1,a2,None} -> 1; {a1,b,None}, {a2,b,None} -> 1/2 each.   3/4
    assert maj_at_k(answers, correct, 3) == pytest.approx(3 / 4)
    # k=4: a has 2 votes, b 1 -> 1
    assert maj_at_k(answers, correct, 4) == 1.0


def test_maj_hand_worked_three_way_tie():
    answers, correct = ["a", "b", "c"], [False, True, False]
    # k=2: {a,b} -> 1/2, {a,c} -> 0, {b,c} -> 1/2.   1/3
    assert maj_at_k(answers, correct, 2) == pytest.approx(1 / 3)
    # k=3: three-way tie, one of three correct -> 1/3
    assert maj_at_k(answers, correct, 3) == pytest.approx(1 / 3)


def test_maj_hand_worked_minority_correct_answer():
    answers, correct = ["x", "x", "x", "y", "y"], [False, False, False, True, True]
    # k=3, C(5,3)=10 subsets: y can only win with both y's plus one x: 3 subsets -> 1; the rest -> 0.
    assert maj_at_k(answers, correct, 3) == pytest.approx(3 / 10)
    # k=4, 5 subsets: {x,x,y,y} (3 of them) -> tie 1/2; {x,x,x,y} (2) -> 0.   (3/2) / 5
    assert maj_at_k(answers, correct, 4) == pytest.approx(3 / 10)
    # k=5: x wins 3-2 -> 0
    assert maj_at_k(answers, correct, 5) == 0.0


def test_maj_degenerate_cases():
    for n in (1, 3, 7):
        for k in range(1, n + 1):
            assert maj_at_k([None] * n, [False] * n, k) == 0.0  # no votes
            assert maj_at_k([None] * n, [True] * n, k) == 0.0  # a None never wins, whatever its flag
            assert maj_at_k(list(range(n)), [False] * n, k) == 0.0  # all wrong
            assert maj_at_k(["a"] * n, [True] * n, k) == 1.0  # all right
            assert maj_at_k(list(range(n)), [True] * n, k) == 1.0  # all distinct but all right
    # one correct answer, the rest None: maj@k is the probability of drawing it at least once = pass@k
    assert maj_at_k(["a", None, None, None], [True, False, False, False], 2) == pytest.approx(1 / 2)


def test_maj_key_correctness_is_mean_of_its_flags():
    # the two samples of key "a" disagree: "a" counts as half correct
    assert maj_at_k(["a", "a"], [True, False], 1) == pytest.approx(1 / 2)
    assert maj_at_k(["a", "a"], [True, False], 2) == pytest.approx(1 / 2)
    # and the flag of the sample drawn does not matter, only its key's
    assert maj_at_k(["a", "a", "b"], [True, False, False], 1) == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)


# --------------------------------------------------------------------------------------------------
# maj@k: against brute force


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([None, "a", "b", "c", "d"]), min_size=1, max_size=10),
    st.frozensets(st.sampled_from(["a", "b", "c", "d"])),
    st.data(),
)
def test_maj_matches_brute_force_hypothesis(answers, correct_keys, data):
    if data.draw(st.booleans(), label="consistent flags"):
        correct = [a in correct_keys for a in answers]
    else:
        correct = data.draw(st.lists(st.booleans(), min_size=len(answers), max_size=len(answers)))
    for k in range(1, len(answers) + 1):
        want = float(brute_maj(answers, correct, k))
        assert maj_at_k(answers, correct, k) == pytest.approx(want, abs=1e-12)


def test_maj_matches_brute_force_seeded():
    rng = random.Random(1234)
    for _ in range(300):
        n = rng.randint(1, 10)
        keys = [None, *range(rng.randint(1, 6))]
        answers = [rng.choice(keys) for _ in range(n)]
        right = {rng.choice(keys)}
        correct = [a in right for a in answers]
        for k in range(1, n + 1):
            want = float(brute_maj(answers, correct, k))
            assert maj_at_k(answers, correct, k) == pytest.approx(want, abs=1e-12)


def test_maj_large_n_against_vote_count_enumeration():
    rng = random.Random(7)
    for sizes, n_none in [((20, 15, 9), 6), ((30, 30), 4), ((12, 12, 12, 3), 0), ((1, 40), 9)]:
        qs = [Fraction(rng.randint(0, 1)) for _ in sizes]
        qs[0] = Fraction(1)
        answers = [j for j, b in enumerate(sizes) for _ in range(b)] + [None] * n_none
        correct = [bool(qs[j]) for j, b in enumerate(sizes) for _ in range(b)] + [False] * n_none
        rng.shuffle(order := list(range(len(answers))))
        answers = [answers[i] for i in order]
        correct = [correct[i] for i in order]
        for k in (1, 2, 3, 7, 16, 25, len(answers)):
            want = float(enumerate_vote_counts(sizes, qs, n_none, k))
            assert maj_at_k(answers, correct, k) == pytest.approx(want, rel=1e-12, abs=1e-15), (sizes, k)


def test_maj_large_n_exact_identities():
    n = 128
    # two equal classes, one correct: by symmetry exactly 1/2 for every k
    answers, correct = ["a"] * 64 + ["b"] * 64, [True] * 64 + [False] * 64
    got = maj_at_k_many([answers], [correct], range(1, n + 1))
    assert np.all(got == 0.5)
    # one correct answer among None samples: maj@k == pass@k
    for c in (1, 5, 40, 127):
        answers, correct = ["a"] * c + [None] * (n - c), [True] * c + [False] * (n - c)
        for k in (1, 2, 16, 64, 100, 128):
            assert maj_at_k(answers, correct, k) == pytest.approx(pass_at_k(n, c, k), rel=1e-12, abs=1e-15)
    # maj@1 is the fraction of samples that vote for a correct answer
    rng = random.Random(3)
    answers = [rng.choice([None, 1, 2, 3, 4]) for _ in range(n)]
    correct = [a == 2 for a in answers]
    assert maj_at_k(answers, correct, 1) == pytest.approx(sum(correct) / n, rel=1e-14)


# --------------------------------------------------------------------------------------------------
# maj@k for many problems


def test_maj_many_equals_scalar():
    rng = random.Random(99)
    answers_pp, correct_pp = [], []
    for _ in range(60):
        n = rng.randint(8, 24)
        keys = [None, *range(rng.randint(1, 5))]
        answers = [rng.choice(keys) for _ in range(n)]
        answers_pp.append(answers)
        correct_pp.append(np.array([a == 0 for a in answers]))  # numpy flags are accepted too
    answers_pp.append(answers_pp[0])  # a repeated problem
    correct_pp.append(correct_pp[0])
    ks = [8, 1, 2, 4, 4]
    got = maj_at_k_many(answers_pp, correct_pp, ks)
    assert got.shape == (61, 5) and got.dtype == np.float64
    for p, (answers, correct) in enumerate(zip(answers_pp, correct_pp, strict=True)):
        for j, k in enumerate(ks):
            assert got[p, j] == maj_at_k(answers, correct, k)
    single = maj_at_k_many(answers_pp, correct_pp, 2)
    assert single.shape == (61, 1) and np.array_equal(single[:, 0], got[:, 2])
    assert maj_at_k_many([], [], [1, 2]).shape == (0, 2)


def test_maj_validation():
    with pytest.raises(ValueError, match=r"len\(answers\)=3 and len\(correct\)=2"):
        maj_at_k(["a", "b", "c"], [True, False], 1)
    with pytest.raises(ValueError, match=r"1 <= k <= n.*k=0, n=3"):
        maj_at_k(["a", "b", "c"], [True, False, True], 0)
    with pytest.raises(ValueError, match=r"1 <= k <= n.*k=4, n=3"):
        maj_at_k(["a", "b", "c"], [True, False, True], 4)
    with pytest.raises(TypeError, match="k must be an integer"):
        maj_at_k(["a"], [True], 1.0)
    with pytest.raises(ValueError, match="one entry per problem; got 2 and 1"):
        maj_at_k_many([["a"], ["b"]], [[True]], [1])
    with pytest.raises(ValueError, match=r"problem 1 with n=2"):
        maj_at_k_many([["a"] * 4, ["a", "b"]], [[True] * 4, [True, False]], [1, 4])
    with pytest.raises(ValueError, match=r"problem 1: .*len\(answers\)=2 and len\(correct\)=1"):
        maj_at_k_many([["a"], ["a", "b"]], [[True], [True]], [1])
    with pytest.raises(ValueError, match="ks containing 0"):
        maj_at_k_many([["a"]], [[True]], [0])


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


# --------------------------------------------------------------------------------------------------
# maj@k at large n: the spectral engine against enumeration, the exact engine and identities


def random_problem(rng: random.Random, n: int, n_keys: int, zipf: float = 1.0):
    """Answers with Zipf-like frequencies, ~5% None; the correct key is a random one (or none at all)."""
    keys = list(range(n_keys))
    weights = [1 / (j + 1) ** zipf for j in keys]
    answers = [None if rng.random() < 0.05 else rng.choices(keys, weights)[0] for _ in range(n)]
    right = rng.choice([*keys[:4], -1])
    if rng.random() < 0.2:  # flags that disagree within a key: fractional credit
        return answers, [a == right or (a == 1 and rng.random() < 0.5) for a in answers]
    return answers, [a == right for a in answers]


def test_spectral_engine_matches_brute_force_small_n():
    rng = random.Random(21)
    for _ in range(150):
        n = rng.randint(1, 9)
        answers, correct = random_problem(rng, n, rng.randint(1, 5), zipf=0.5)
        classes, n_none = answer_signature(answers, correct)
        got = spectral_from_signature(classes, n_none, tuple(range(1, n + 1)))
        for k in range(1, n + 1):
            assert got[k - 1] == pytest.approx(float(brute_maj(answers, correct, k)), abs=1e-13), (classes, k)


def test_spectral_engine_matches_exact_engine():
    rng = random.Random(5)
    cases = [(rng.randint(10, 60), rng.choice([1, 2, 5, 12, 40]), rng.uniform(0.3, 1.5)) for _ in range(40)]
    cases += [(150, 3, 1.0), (200, 40, 0.6), (256, 8, 1.2), (300, 120, 0.3)]
    for n, n_keys, zipf in cases:
        answers, correct = random_problem(rng, n, n_keys, zipf)
        classes, n_none = answer_signature(answers, correct)
        ks = tuple(range(1, n + 1)) if n <= 60 else (1, 2, 3, 5, 8, 16, 32, 64, 100, n // 2, n - 1, n)
        exact = exact_from_signature(classes, n_none, ks)
        spectral = spectral_from_signature(classes, n_none, ks)
        np.testing.assert_allclose(spectral, exact, rtol=0, atol=1e-13, err_msg=str((classes, n_none)))
    # hand-built shapes: a minority correct answer, a three-way tie of large classes, all singletons
    for classes, n_none in [
        (((1, 0),) * 20 + ((2, 0),) * 10 + ((5, 5), (60, 0), (64, 0)), 31),
        (((30, 30), (30, 0), (30, 0)), 10),
        (((1, 1),) + ((1, 0),) * 149, 0),
    ]:
        n = sum(c for c, _ in classes) + n_none
        ks = (*(k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k < n - 1), n - 1, n)
        exact = exact_from_signature(classes, n_none, ks)
        np.testing.assert_allclose(spectral_from_signature(classes, n_none, ks), exact, rtol=0, atol=1e-13)


def test_engine_routing():
    assert uses_exact_engine(((64, 64),), 0) and uses_exact_engine(((1, 0),) * 63 + ((1, 1),), 0)  # all n <= 64
    assert not uses_exact_engine(((1024, 1024),), 0) and not uses_exact_engine(((100, 0), (100, 0)), 56)
    answers = ["a"] * 90 + ["b"] * 80 + [None] * 30  # n = 200: spectral, through the public functions
    correct = [True] * 90 + [False] * 110
    classes, n_none = answer_signature(answers, correct)
    want = exact_from_signature(classes, n_none, (1, 7, 100, 200))
    assert maj_at_k_many([answers], [correct], [1, 7, 100, 200])[0] == pytest.approx(want, abs=1e-13)
    assert maj_at_k(answers, correct, 7) == pytest.approx(want[1], abs=1e-13)


POWERS_1024 = [2**i for i in range(11)]


def test_maj_n1024_edge_cases():
    n = 1024
    ones = np.ones(len(POWERS_1024))
    rng = random.Random(8)
    spread = [rng.randrange(300) for _ in range(n)]  # hundreds of distinct answers
    assert np.all(maj_at_k_many([spread], [[False] * n], POWERS_1024) == 0)  # c = 0
    assert np.all(maj_at_k_many([spread], [[True] * n], POWERS_1024) == ones)  # c = n: every answer is right
    assert np.all(maj_at_k_many([[None] * n], [[True] * n], POWERS_1024) == 0)  # all answers None
    assert np.all(maj_at_k_many([["x"] * n], [[True] * n], POWERS_1024) == ones)  # one answer, correct
    # two equal classes, one correct: 1/2 for every k by symmetry
    half = maj_at_k_many([["a"] * 512 + ["b"] * 512], [[True] * 512 + [False] * 512], POWERS_1024)
    np.testing.assert_allclose(half[0], 0.5, rtol=0, atol=1e-14)
    # one correct answer among None samples: maj@k = pass@k
    for c in (1, 37, 700):
        got = maj_at_k_many([["a"] * c + [None] * (n - c)], [[True] * c + [False] * (n - c)], POWERS_1024)
        np.testing.assert_allclose(got[0], [pass_at_k(n, c, k) for k in POWERS_1024], rtol=0, atol=1e-13)
    # maj@1 is the share of samples voting for a correct answer; k = n is the majority of all samples
    answers = [rng.choice([None, 1, 2, 3, 3, 4]) for _ in range(n)]
    correct = [a == 2 for a in answers]
    got = maj_at_k_many([answers], [correct], POWERS_1024)[0]
    assert got[0] == pytest.approx(sum(correct) / n, abs=1e-14) and got[-1] == 0.0  # answer 3 wins at k = n
    assert maj_at_k(answers, [a == 3 for a in answers], n) == 1.0


def test_maj_n1024_against_exact_engine():
    # few classes keep the exact engine affordable at n = 1024; every k (nearby ks share an evaluation)
    ks = tuple(range(1, 1025))
    for classes, n_none in [
        (((100, 100), (300, 0), (600, 0)), 24),
        (((1, 0),) * 30 + ((2, 0),) * 10 + ((40, 40), (60, 0)), 874),
    ]:
        exact = exact_from_signature(classes, n_none, ks)
        np.testing.assert_allclose(spectral_from_signature(classes, n_none, ks), exact, rtol=0, atol=1e-13)
    assert spectral_from_signature(((100, 100), (300, 0), (600, 0)), 24, (512, 1)) == pytest.approx(
        [exact_from_signature(((100, 100), (300, 0), (600, 0)), 24, (k,))[0] for k in (512, 1)], abs=1e-13
    )  # ks in any order
