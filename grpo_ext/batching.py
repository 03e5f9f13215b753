"""Batch-dict surgery for refill: put rows of one generation batch into another, padding widths to match."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Left-padded (prompt side) keys and their padding; every other 2-D tensor is completion-aligned, right-padded.
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
_PAD_VALUES = {"prompt_mask": 0, "completion_mask": 0, "tool_mask": 1}


def _pad(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    extra = width - t.shape[1]
    if extra <= 0:
        return t
    return F.pad(t, (extra, 0) if left else (0, extra), value=value)


def replace_rows(batch: dict, fresh: dict, dst: list[int], src: list[int], pad_token_id: int) -> dict:
    """A copy of `batch` whose rows `dst` are `fresh`'s rows `src` (all per-row tensors, same keys).

    Scalars (`num_items_in_batch`) are left to the caller to recount.
    """
    if batch.keys() != fresh.keys():
        raise ValueError(f"cannot merge generation batches with different keys: {sorted(batch)} vs {sorted(fresh)}")
    merged = {}
    for key, value in batch.items():
        other = fresh[key]
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            merged[key] = value
            continue
        if value.ndim > 2:
            raise ValueError(f"refill cannot merge the {value.ndim}-D batch field {key!r}")
        if value.ndim == 2:
            left = key in _LEFT_PADDED
            pad = pad_token_id if key in ("prompt_ids", "completion_ids") else _PAD_VALUES.get(key, 0)
            width = max(value.shape[1], other.shape[1])
            value, other = _pad(value, width, pad, left), _pad(other, width, pad, left)
        value = value.clone()
        value[dst] = other[src].to(value.dtype)
        merged[key] = value
    return merged
