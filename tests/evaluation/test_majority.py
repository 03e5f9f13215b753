"""maj@k (grpo_ext.evaluation.metrics.maj_at_k and the counting of grpo_ext.evaluation.majority, both engines):
hand-worked cases, brute force over every k-subset, vote-count enumeration at large n, many problems at once."""

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
from grpo_ext.evaluation.metrics import answer_signature, maj_at_k, maj_at_k_many, pass_at_k

# --------------------------------------------------------------------------------------------------
# references, written plainly


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
