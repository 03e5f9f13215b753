"""Loading task data: a hub dataset or local files in the same format, one split at a time; TRL's prompt shape."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset, load_dataset
from datasets.exceptions import DatasetGenerationError

from grpo_ext.errors import UserError

#: Local data: one path, a list of paths (that data serves every split), or a ``{split: path(s)}`` dict.
DataFiles = str | Path | Sequence[str | Path] | dict[str, str | Path | Sequence[str | Path]]

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def _as_paths(files) -> list[str]:
    paths = [files] if isinstance(files, (str, Path)) else list(files)
    if not paths:
        raise UserError("data_files is empty")
    out = []
    for path in paths:
        path = str(path)
        if "://" not in path and not any(ch in path for ch in "*?[") and not Path(path).is_file():
            raise FileNotFoundError(f"data_files: no such file: {path}")
        out.append(path)
    return out


def _builder(paths: list[str]) -> str:
    suffixes = {Path(p.split("?")[0]).suffix.lower() for p in paths}
    builders = {_BUILDERS.get(s) for s in suffixes}
    if None in builders or len(builders) != 1:
        raise UserError(
            f"data_files: cannot tell the format of {paths}; use one kind of .json/.jsonl/.parquet/.csv files"
        )
    return builders.pop()


def data_source(data_files: DataFiles | None, split: str, hub: tuple[str, str | None]) -> tuple:
    """A hashable description of where `split` comes from (equal sources hold the same rows)."""
    if data_files is None:
        return ("hub", *hub, split)
    if isinstance(data_files, dict):
        if split not in data_files:
            raise UserError(f"data_files has no {split!r} split (splits: {sorted(data_files)})")
        return ("files", *_as_paths(data_files[split]))
    return ("files", *_as_paths(data_files))


def load_split(
    data_files: DataFiles | None, split: str, hub: tuple[str, str | None], columns: Sequence[str]
) -> Dataset:
    """Rows of `split`: from the hub dataset `hub` = (name, config), or from local `data_files`.

    `data_files` may be one path or a list of paths (then that data serves every split asked for) or a
    ``{split: path(s)}`` dict. The `columns` must exist; a missing one is named in the error. Bad input (a local file
    that does not parse, a missing column, no rows) is a `UserError` naming the files.
    """
    source = data_source(data_files, split, hub)
    if source[0] == "hub":
        dataset = load_dataset(hub[0], hub[1], split=split)
        where = f"{hub[0]} ({hub[1]}) split {split!r}"
    else:
        paths = list(source[1:])
        where = ", ".join(paths)
        try:
            dataset = load_dataset(_builder(paths), data_files={split: paths}, split=split)
        except DatasetGenerationError as err:  # the builder's parse error (JSON, CSV, UTF-8) is its cause
            cause = err.__cause__ or err
            raise UserError(f"data_files: cannot read {where}: {type(cause).__name__}: {cause}") from err
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise UserError(f"{where}: missing column(s) {missing} (columns: {dataset.column_names})")
    if len(dataset) == 0:
        raise UserError(f"{where}: no rows")
    return dataset


def as_prompt(text: str, conversational: bool):
    """A prompt as TRL takes it: the text, or a one-message user turn for chat models."""
    return [{"role": "user", "content": text}] if conversational else text
