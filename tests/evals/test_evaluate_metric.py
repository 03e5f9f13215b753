"""The `evaluate` metric module evals/metrics/passk_majk: loads offline by local path and agrees with our functions."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k

METRIC_DIR = Path(__file__).resolve().parents[2] / "evals" / "metrics" / "passk_majk"


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(METRIC_DIR))


def _ours(predictions, references, ks, correct=None):
    if correct is None:
        correct = [
            [a is not None and a == r for a in answers] for answers, r in zip(predictions, references, strict=True)
        ]
    out = {}
    for k in ks:
        out[f"pass@{k}"] = float(np.mean([pass_at_k(len(c), sum(c), k) for c in correct]))
    for k in ks:
        out[f"maj@{k}"] = float(np.mean([maj_at_k(a, c, k) for a, c in zip(predictions, correct, strict=True)]))
    return out


def test_hand_example(metric):
    result = metric.compute(predictions=[["1", "2"], ["3", "3"]], references=["1", "3"], k=[1, 2])
    assert result == {"pass@1": 0.75, "pass@2": 1.0, "maj@1": 0.75, "maj@2": 0.75}


def test_equals_our_functions_on_random_problems(metric):
    rng = random.Random(0)
    predictions, references = [], []
    for _ in range(40):
        n = rng.choice([8, 12, 16])
        pool = [str(rng.randint(0, 4)) for _ in range(3)] + [None]
        predictions.append([rng.choice(pool) for _ in range(n)])
        references.append(str(rng.randint(0, 4)))
    ks = [1, 2, 4, 8]
    result = metric.compute(predictions=predictions, references=references, k=ks)
    assert result == _ours(predictions, references, ks)
    # default k: powers of two up to the smallest number of samples
    assert set(metric.compute(predictions=predictions, references=references)) == {
        f"{m}@{k}" for m in ("pass", "maj") for k in (1, 2, 4, 8)
    }


def test_verifier_verdicts_instead_of_equality(metric):
    # equivalent answers with different keys (e.g. math-verify: 1/2 == 0.5) judged by the caller's verifier
    predictions = [["1/2", "0.5", "0.5", "1/3"]]
    correct = [[True, True, True, False]]
    result = metric.compute(predictions=predictions, references=["1/2"], k=[1, 4], correct=correct)
    assert result == _ours(predictions, ["1/2"], [1, 4], correct=correct)
    assert result["pass@1"] == 0.75


def test_bad_input_is_named(metric):
    with pytest.raises(ValueError, match="k=5"):
        metric.compute(predictions=[["1", "2", "3", "4"]], references=["1"], k=[5])
    with pytest.raises(ValueError, match="problem 0: 1 correct flags for 2 samples"):
        metric.compute(predictions=[["1", "2"]], references=["1"], k=[1], correct=[[True]])
