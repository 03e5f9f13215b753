"""The README's Python example (GRPOExtTrainer as a drop-in for TRL's GRPOTrainer) runs as written, on the embedded
model, in a temporary folder."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_example_trains(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    example = next(b for b in blocks if "GRPOExtTrainer(" in b)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(example, "README.md", "exec"), scope)  # noqa: S102 - the project's own README
    trainer = scope["trainer"]
    assert trainer.state.global_step == 2
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert {"process/steps_per_completion", "zero_std/frac_groups", "rewards/short_answers/mean"} <= logged
