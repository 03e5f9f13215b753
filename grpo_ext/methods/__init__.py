"""SFT, RFT, online RFT, DPO and GRPO under DeepSeekMath's unified paradigm (section 5.2.1).

`METHODS` describes each method once (data source, reward function, gradient coefficient); `run_method` trains
one from its config (`configs/methods/<name>.yaml`), thin over TRL's trainers. Runners are imported lazily: the
paradigm table needs no trainer.
"""

from __future__ import annotations

from grpo_ext.methods.paradigm import BASE_RUN, METHODS, Method, get_method, paradigm_markdown, paradigm_rows

__all__ = ["BASE_RUN", "METHODS", "Method", "get_method", "paradigm_markdown", "paradigm_rows", "run_method"]


def run_method(argv: list[str]) -> dict:
    """Train the method of ``--config configs/methods/<name>.yaml`` (flags override the YAML); see `runners`."""
    from grpo_ext.methods.runners import run_method as _run

    return _run(argv)
