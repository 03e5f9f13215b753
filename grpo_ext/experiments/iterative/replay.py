"""The replay sampler of iterative RL (DeepSeekMath 4.1.4): new RM data plus ~10% historical data.

Pure and seeded: the same inputs and seed give the same set, whatever ran before. Records are dicts with a
unique ``id``; a set never holds one id twice: replay is drawn without replacement, from history records whose
id is not already among the new ones (and the history's own repeats count once).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from grpo_ext.errors import UserError

__all__ = ["check_replay_ratio", "mix_with_replay", "replay_count", "sample_replay"]


def check_replay_ratio(replay_ratio: float) -> float:
    """``replay_ratio`` as a float in [0, 1]; anything else (NaN, negative, > 1, not a number) is a `UserError`."""
    if isinstance(replay_ratio, bool) or not isinstance(replay_ratio, (int, float)):
        raise UserError(f"replay_ratio: must be a number in [0, 1], got {replay_ratio!r}")
    if not (0.0 <= replay_ratio <= 1.0):  # also rejects NaN
        raise UserError(f"replay_ratio: must be in [0, 1] (a fraction of the new set), got {replay_ratio}")
    return float(replay_ratio)


def replay_count(n_new: int, replay_ratio: float, n_history: int) -> int:
    """How many historical records join ``n_new`` new ones: ``round(replay_ratio * n_new)`` (half up), at most
    the history's size."""
    check_replay_ratio(replay_ratio)
    if n_new < 0 or n_history < 0:
        raise ValueError(f"replay_count: sizes must be >= 0, got n_new={n_new}, n_history={n_history}")
    return min(int(math.floor(replay_ratio * n_new + 0.5)), n_history)


def _unique_by_id(records: Sequence[dict], exclude: set[str] = frozenset()) -> list[dict]:
    seen, out = set(exclude), []
    for record in records:
        key = record["id"]
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out


def sample_replay(
    history: Sequence[dict], n_new: int, replay_ratio: float, seed: int, exclude_ids: set[str] = frozenset()
) -> list[dict]:
    """``replay_count(n_new, replay_ratio, ...)`` distinct records of ``history`` drawn uniformly without
    replacement (records whose id is in ``exclude_ids`` are never drawn), in history order."""
    pool = _unique_by_id(history, set(exclude_ids))
    k = replay_count(n_new, replay_ratio, len(pool))
    chosen = sorted(random.Random(seed).sample(range(len(pool)), k))
    return [pool[i] for i in chosen]


def mix_with_replay(new: Sequence[dict], history: Sequence[dict], replay_ratio: float, seed: int):
    """``(records, info)``: the RM's training set (the new records, deduplicated by id, then the replay) and
    what was used: ``n_new``, ``n_replay``, ``n_history``, ``replay_ratio`` (asked), ``replay_ratio_used``
    (n_replay / n_new) and ``replay_fraction`` (n_replay / the whole set)."""
    check_replay_ratio(replay_ratio)
    new = _unique_by_id(new)
    replay = sample_replay(history, len(new), replay_ratio, seed, exclude_ids={r["id"] for r in new})
    records = [*new, *replay]
    info = {
        "n_new": len(new),
        "n_replay": len(replay),
        "n_history": len(_unique_by_id(history)),
        "replay_ratio": replay_ratio,
        "replay_ratio_used": len(replay) / len(new) if new else 0.0,
        "replay_fraction": len(replay) / len(records) if records else 0.0,
    }
    return records, info
