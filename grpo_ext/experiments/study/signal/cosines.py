"""Pure math of the learning-signal measurement (verl's ``core_algos.py`` style: tensors in, tensors out): cosines
between minibatch gradients, their jackknife interval, and the per-step surrogate loss whose gradient is GRPO's (or
SFT's) at the starting point."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "CONFIDENCE",
    "LOSS_TYPES",
    "cosine_matrix",
    "jackknife_interval",
    "pairwise_cosine",
    "row_weights",
    "surrogate_loss",
]

#: TRL's loss types whose reduction is a weighted sum of per-token terms (the ones this module can weight).
LOSS_TYPES = ("dapo", "bnpo", "dr_grpo", "grpo")
CONFIDENCE = 0.95
#: Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (beyond: the Cornish-Fisher expansion).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
_T95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def cosine_matrix(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """``(m, m)`` float64 cosines between the flattened ``grads`` (on their device). A zero gradient has no
    direction: its cosine with anything is 0 (not NaN), as it shares no signal. A non-finite one is an error."""
    flat = [g.detach().reshape(-1).double() for g in grads]  # float64: a cosine of 0.005 must not drown in rounding
    norms = [f.norm() for f in flat]
    broken = [i for i, norm in enumerate(norms) if not torch.isfinite(norm)]
    if broken:  # a NaN norm would compare false with 0 below and pass for "no direction"
        raise ValueError(f"cosine_matrix: gradients {broken} are not finite (NaN or inf): the measurement is broken")
    out = torch.eye(len(flat), dtype=torch.float64, device=flat[0].device)
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):  # pair by pair: stacking m float64 copies would not fit for a real model
            denominator = norms[i] * norms[j]
            value = torch.where(denominator > 0, flat[i] @ flat[j] / denominator.clamp(min=1e-300), 0.0)
            out[i, j] = out[j, i] = value
    return out


def pairwise_cosine(grads: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, values)``: the mean cosine over the ``m (m - 1) / 2`` pairs of distinct gradients and the pair
    values, pairs ordered ``(0, 1), (0, 2), ..., (m - 2, m - 1)``. Needs at least two gradients."""
    if len(grads) < 2:
        raise ValueError(f"pairwise_cosine needs at least 2 gradients, got {len(grads)}")
    matrix = cosine_matrix(grads)
    i, j = torch.triu_indices(len(grads), len(grads), offset=1, device=matrix.device)
    values = matrix[i, j]
    return values.mean(), values


def _t_quantile(df: int) -> float:
    if df <= len(_T95):
        return _T95[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def jackknife_interval(values: torch.Tensor, minibatches: int) -> dict:
    """The mean of the pair cosines ``values`` (ordered as :func:`pairwise_cosine` gives them) with its
    leave-one-minibatch-out jackknife standard error and 95% ``t`` interval (``m - 1`` degrees of freedom). With fewer
    than 3 minibatches the error and interval are ``None`` (leaving one out of two leaves no pair)."""
    m = minibatches
    if values.numel() != m * (m - 1) // 2:
        raise ValueError(f"{values.numel()} pair values do not belong to {m} minibatches")
    values = values.double()
    mean = float(values.mean())
    if m < 3:
        return {"mean": mean, "standard_error": None, "low": None, "high": None}
    i, j = torch.triu_indices(m, m, offset=1, device=values.device)
    # the estimate without minibatch k: the mean over the pairs not involving it
    leave_out = torch.stack([values[(i != k) & (j != k)].mean() for k in range(m)])
    se = float(((m - 1) / m * ((leave_out - leave_out.mean()) ** 2).sum()).sqrt())
    half = _t_quantile(m - 1) * se
    return {"mean": mean, "standard_error": se, "low": mean - half, "high": mean + half}


def row_weights(lengths: torch.Tensor, loss_type: str = "dapo", max_completion_length: int | None = None):
    """``(B,)`` weight of each row's summed per-token loss so that their sum is TRL's reduction of one step's
    generation batch (one process, no accumulation): ``dapo``/``bnpo`` divide by the batch's token count (TRL's
    ``num_items_in_batch``), ``dr_grpo`` by ``B * max_completion_length``, ``grpo`` average each row over its tokens,
    then over rows. ``lengths``: completion tokens per row."""
    lengths = lengths.double()
    rows = lengths.shape[0]
    if loss_type in ("dapo", "bnpo"):
        return torch.ones_like(lengths) / lengths.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
        return torch.ones_like(lengths) / (rows * max_completion_length)
    if loss_type == "grpo":
        return 1.0 / (rows * lengths.clamp(min=1.0))
    raise ValueError(f"loss_type: {loss_type!r} is not supported here; expected one of {', '.join(LOSS_TYPES)}")


def surrogate_loss(logps: torch.Tensor, mask: torch.Tensor, coefficients: torch.Tensor, weights: torch.Tensor):
    """The loss whose gradient is one step's: ``-sum_i w_i c_i sum_t mask * r_t`` with TRL's ratio
    ``r = exp(logp - logp.detach())``, 1 in value (on-policy), ``grad log p`` in gradient. ``logps``/``mask``:
    ``(B, T)``; ``coefficients`` (advantages; 1 for SFT) and ``weights``: ``(B,)``."""
    ratio = torch.exp(logps - logps.detach())
    per_row = (ratio * mask).sum(dim=1)
    return -(per_row * (coefficients * weights).to(per_row.dtype)).sum()
