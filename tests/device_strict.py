"""A device-strict mode for tests: a tensor made without a device fails on a CPU as it fails on a GPU.

On a CUDA machine `torch.tensor(x)` lands on the CPU while the batch is on cuda:0, and the first op that mixes them
raises; on a CPU-only machine both are on the CPU and nothing shows. Under :func:`device_strict` grpo-ext's own trainer
hooks run with torch's default device set to ``"meta"``, so a tensor they make without a device taken from their
inputs is a meta tensor, and mixing it with the batch's CPU tensors (or reading it with ``.item()``) raises here too.
TRL's methods that our hooks call through ``super()`` run with the CPU as the default device again (their own
conventions are TRL's business), as do the reward functions they call.
"""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from trl import GRPOTrainer

from grpo_ext.trainer import GRPOExtTrainer

#: The hooks GRPOExtTrainer wraps (each calls the GRPOTrainer method of the same name through ``super()``).
HOOKS = ("_calculate_rewards", "_generate_and_score_completions", "_generate_single_turn", "_compute_loss")


def _under(device: str, method):
    @functools.wraps(method)
    def wrapped(*args, **kwargs):
        with torch.device(device):
            return method(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def device_strict():
    """Run GRPOExtTrainer's own hooks (and its subclasses' code they call) with the default device ``"meta"``, and
    GRPOTrainer's with ``"cpu"``."""
    with pytest.MonkeyPatch.context() as patch:
        for name in HOOKS:
            if name in vars(GRPOExtTrainer):
                patch.setattr(GRPOExtTrainer, name, _under("meta", vars(GRPOExtTrainer)[name]))
            patch.setattr(GRPOTrainer, name, _under("cpu", getattr(GRPOTrainer, name)))
        yield
