"""The per-method training configs a study's arms name (`configs/methods/<method>.yaml`): where one is and which
task it trains on. Kept apart from the study's runs so that the config and signal modules can read them without
importing the runs (which import the study's config)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["method_config_path", "task_of"]


def method_config_path(method: str, configs: str | Path) -> Path:
    path = Path(configs) / f"{method}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"method {method!r}: no config {path}")
    return path


def task_of(config: Path) -> tuple[str, dict]:
    """The task name and task_kwargs a method config trains on."""
    from grpo_ext.errors import read_yaml
    from grpo_ext.script_args import parse_task_kwargs

    data = read_yaml(config, "method config") or {}
    return str(data.get("task", "arithmetic")), parse_task_kwargs(data.get("task_kwargs"))
