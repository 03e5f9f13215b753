"""The learning-signal measurement (grpo_ext.methods.study.signal): its math by hand and by brute force, the GRPO
minibatch gradient against autograd of the explicit formula, and the CLI's JSON."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from grpo_ext.methods.study.signal import jackknife_interval, pairwise_cosine


def test_pairwise_cosine_by_hand():
    # (1, 0) . (0, 1) = 0; (1, 0) and (0, 1) each at 45 degrees from (1, 1)
    mean, values = pairwise_cosine([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0])])
    s = 1 / math.sqrt(2)
    assert values.tolist() == pytest.approx([0.0, s, s])
    assert float(mean) == pytest.approx(2 * s / 3)


def test_pairwise_cosine_against_a_loop_and_zero_gradients():
    grads = list(torch.randn(5, 40, generator=torch.Generator().manual_seed(0)))
    mean, values = pairwise_cosine(grads)
    expected = [float(torch.nn.functional.cosine_similarity(a, b, dim=0)) for a, b in itertools.combinations(grads, 2)]
    assert values.tolist() == pytest.approx(expected, abs=1e-6)
    assert float(mean) == pytest.approx(sum(expected) / len(expected), abs=1e-6)
    _, values = pairwise_cosine([torch.zeros(3), torch.ones(3)])  # no direction: 0, not NaN
    assert values.tolist() == [0.0]


def test_jackknife_matches_leave_one_out_by_hand():
    grads = list(torch.randn(4, 30, generator=torch.Generator().manual_seed(1)))
    _, values = pairwise_cosine(grads)
    result = jackknife_interval(values, 4)
    leave_out = torch.tensor([float(pairwise_cosine(grads[:k] + grads[k + 1 :])[0]) for k in range(4)])
    se = math.sqrt(3 / 4 * float(((leave_out - leave_out.mean()) ** 2).sum()))
    assert result["standard_error"] == pytest.approx(se)
    assert result["low"] == pytest.approx(result["mean"] - 3.182 * se)  # t quantile, 3 degrees of freedom
    assert jackknife_interval(values[:1], 2)["low"] is None  # two minibatches: no interval
