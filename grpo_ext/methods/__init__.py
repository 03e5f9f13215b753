"""SFT, RFT, online RFT, DPO and GRPO under DeepSeekMath's unified paradigm (section 5.2.1).

`METHODS` describes each method once (data source, reward function, gradient coefficient); `run_method` trains
one from its config (`configs/methods/<name>.yaml`), thin over TRL's trainers; `grpo_ext.experiments.compare` compares
the trained runs. Names are imported on first use: the paradigm table needs no trainer, and the command lines'
`--help` needs no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_ext.methods.paradigm import BASE_RUN, METHODS, Method, get_method, paradigm_markdown, paradigm_rows

__all__ = ["BASE_RUN", "METHODS", "Method", "get_method", "paradigm_markdown", "paradigm_rows", "run_method"]

_PARADIGM_NAMES = frozenset(__all__) - {"run_method"}


def __getattr__(name: str):
    if name in _PARADIGM_NAMES:
        from grpo_ext.methods import paradigm

        return getattr(paradigm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_method(argv: list[str]) -> dict:
    """Train the method of ``--config configs/methods/<name>.yaml`` (flags override the YAML); see `runners`."""
    from grpo_ext.methods.runners import run_method as _run

    return _run(argv)
