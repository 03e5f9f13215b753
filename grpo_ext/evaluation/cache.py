"""A resumable sample cache: one JSON line per sampled completion.

Records are keyed by the model's :func:`model_fingerprint` (a hash of its config, weights and tokenizer, and of an
adapter's base model), so a model folder retrained in place, a base replaced under its adapter or an edited tokenizer
never reuses the samples of the old model.

Record fields: ``model``, ``model_fingerprint``, ``task``, ``problem_id``, ``sample_index``, ``params`` (the
:meth:`SamplingParams.key` of the draw: its stop strings too, when it has some), ``prompt`` and ``completion``.
Verdicts (extracted answer, correct or not) are *not* stored: the report recomputes them with the task's checker, so
another checker or other k values can be scored from the same samples without sampling again.

Crash safety: records are appended a batch at a time and flushed (``fsync``) after each batch, so a killed run
loses at most the batch in flight. On load, a last line without its newline (a write torn by a crash) or that
does not parse is dropped with a warning and cut from the file before anything is appended; the harness then
draws the missing ``(problem_id, sample_index)`` pairs again. Records for other models, tasks or sampling
parameters are left in the file and ignored. One writer at a time per file.

Memory: the file is read a line at a time, and a cache opened with ``only=`` keeps the records of that one group
(model, fingerprint, task, params) and skips the rest; ``append(..., remember=False)`` writes without keeping. The
harness uses both, so a run holds its own model's cached samples, never the whole file, and not what it draws.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from grpo_ext.errors import UserError, user_file
from grpo_ext.model_files import TOKENIZER_FILES
from grpo_ext.model_paths import resolve_model_path

logger = logging.getLogger(__name__)

__all__ = ["RECORD_FIELDS", "SampleCache", "model_fingerprint", "prompt_key", "task_id_for"]

RECORD_FIELDS = ("model", "model_fingerprint", "task", "problem_id", "sample_index", "params", "prompt", "completion")


# What identifies a model's outputs: its config, its weights (a PEFT adapter's too), its generation settings and its
# tokenizer (an edited eos_token ends completions elsewhere).
_FINGERPRINTED = (
    {".safetensors", ".bin"},
    {"config.json", "adapter_config.json", "generation_config.json", *TOKENIZER_FILES},
)
# Digests already computed in this process, by file identity and state: a file rewritten in place gets a new mtime and
# ctime (ctime cannot be set back by tools that preserve times), so a changed file is never looked up under its old key.
_FILE_DIGESTS: dict[tuple, bytes] = {}


def _file_digest(path: Path) -> bytes:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        with user_file(path, "model"), path.open("rb") as handle:
            for block in iter(lambda: handle.read(8 << 20), b""):
                digest.update(block)
        _FILE_DIGESTS[key] = digest.digest()
    return _FILE_DIGESTS[key]


def model_fingerprint(
    folder: str | os.PathLike, base_model: str | None = None, *, base_load: str | None = None, _follow_base: bool = True
) -> str | None:
    """A 16-hex-digit hash of a model folder's config, tokenizer and every byte of its weights (None when `folder` is
    not a local folder: a hub id is pinned by the hub's own revision). An adapter folder's hash covers its base model
    too (`base_model`, else the one its adapter_config.json names; a local base by its own fingerprint, a hub id by
    name): the samples come from the base's weights, and from the base's tokenizer when the adapter has none.
    ``base_load`` says how the base is loaded when not in full precision (its quantisation): part of the hash too.

    Every byte, not a sample of them: a model retrained in place keeps its size and often its first and last
    megabytes (a middle layer changed), and must not reuse the old weights' samples. Hashing reads the weights once
    (~0.5 GB/s on one core here; a 1.5B-parameter bf16 model in ~6 s); a file already hashed in this process and
    unchanged since is not read again.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    suffixes, names = _FINGERPRINTED
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and (p.suffix in suffixes or p.name in names)):
        digest.update(f"{path.name}:{path.stat().st_size}:".encode())
        digest.update(_content(path))
    base = _adapter_base(folder, base_model) if _follow_base else None
    if base is not None:  # one level: a base is loaded as a full model (and an adapter naming itself ends here)
        digest.update(f"base:{model_fingerprint(base, _follow_base=False) or base}".encode())
        if base_load is not None:
            digest.update(f"base_load:{base_load}".encode())
    return digest.hexdigest()[:16]


def _adapter_base(folder: Path, base_model: str | None) -> str | None:
    """The base an adapter folder loads onto (a local folder's path, or a hub id); None for a full model. An unreadable
    adapter_config.json is left to the loader, which names it."""
    if (folder / "config.json").is_file() or not (folder / "adapter_config.json").is_file():
        return None
    try:
        base = base_model or json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
        return resolve_model_path(base) if isinstance(base, str) and base else None
    except (OSError, ValueError, AttributeError):
        return None


def _content(path: Path) -> bytes:
    """What `model_fingerprint` feeds to its digest for one file: the bytes of a small file, the SHA-256 of a large
    one (the same information, without holding gigabytes in memory)."""
    if path.stat().st_size <= 16 << 20:
        with user_file(path, "model"):
            return path.read_bytes()
    return _file_digest(path)


def task_id_for(task_name: str, split: str, task_kwargs: dict | None = None) -> str:
    """How records and reports name a task: ``<task>/<split>``, then the task's knobs as sorted JSON when any are
    set (the same task with other knobs poses other problems, so its samples must not be mixed up)."""
    return f"{task_name}/{split}" + (f" {json.dumps(task_kwargs, sort_keys=True)}" if task_kwargs else "")


def prompt_key(prompt) -> str:
    """A hashable form of a prompt: the string itself, or the JSON of a conversation."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def _group_key(model: str, fingerprint: str | None, task: str, params_key: str) -> tuple:
    return (model, fingerprint, task, params_key)


class SampleCache:
    """The samples of a JSONL file (or of memory only, with ``path=None``), grouped by (model, task, params).

    ``lookup(...)`` gives ``{(problem_id, prompt key): {sample_index: completion}}`` for one group; ``append(records)``
    adds records and makes them durable before returning. ``only=(model, fingerprint, task, params_key)`` keeps that
    group alone in memory (records of other groups are read past, and stay in the file).
    """

    def __init__(self, path: str | os.PathLike | None, *, only: tuple | None = None):
        self.path = Path(path) if path is not None else None
        if only is not None and len(only) != 4:
            raise ValueError(f"only must be (model, fingerprint, task, params_key), got {only!r}")
        self.only = _group_key(*only) if only is not None else None
        self._groups: dict[tuple, dict[tuple, dict[int, str]]] = {}
        self.dropped_lines = 0
        self._good_size = 0  # bytes of the file made of complete, valid lines (appends start here)
        self._known_size = 0  # the file's size as this object last saw it
        if self.path is not None and self.path.exists():
            self._load()

    # ---- reading -------------------------------------------------------------------------------------------
    def _load(self) -> None:
        """Read the file a line at a time (a cache of millions of samples is never in memory at once)."""
        with self.path.open("rb") as handle:
            self._known_size = os.fstat(handle.fileno()).st_size
            offset = 0
            for n_lines, raw in enumerate(iter(handle.readline, b""), start=1):
                line_end = offset + len(raw)
                if line_end > self._known_size:  # grew while being read: another writer (append will say so)
                    break
                torn = not raw.endswith(b"\n")
                record = None if torn else self._parse(raw)
                if record is None:
                    if torn or line_end == self._known_size:
                        logger.warning(
                            "%s: dropping a torn last line (%d bytes, line %d; a crash mid-write?): its samples will "
                            "be drawn again",
                            self.path,
                            len(raw),
                            n_lines,
                        )
                        self.dropped_lines += 1
                        break  # the file is cut back to _good_size before the next append
                    logger.warning("%s: line %d is not a valid sample record: ignored", self.path, n_lines)
                    self.dropped_lines += 1
                else:
                    self._add(record)
                offset = line_end
                self._good_size = offset

    @staticmethod
    def _parse(raw: bytes) -> dict | None:
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(record, dict) or any(field not in record for field in RECORD_FIELDS):
            return None
        if not isinstance(record["sample_index"], int) or not isinstance(record["completion"], str):
            return None
        return record

    def _add(self, record: dict) -> None:
        key = _group_key(record["model"], record["model_fingerprint"], record["task"], record["params"])
        if self.only is not None and key != self.only:
            return  # another group's record: left in the file, not kept
        group = self._groups.setdefault(key, {})
        samples = group.setdefault((str(record["problem_id"]), prompt_key(record["prompt"])), {})
        samples.setdefault(record["sample_index"], record["completion"])  # first one wins

    def lookup(self, model: str, fingerprint: str | None, task: str, params_key: str) -> dict[tuple, dict[int, str]]:
        """``{(problem_id, prompt key): {sample_index: completion}}`` of one model, task and sampling-parameter key
        (the prompt key is the prompt, or its JSON for a conversation: see :func:`prompt_key`).

        The dict is the cache's own: a caller done with a problem may pop it to let its samples go."""
        key = _group_key(model, fingerprint, task, params_key)
        if self.only is not None and key != self.only:
            raise ValueError(f"this cache keeps only {self.only}; looked up {key}")
        return self._groups.setdefault(key, {})

    def __len__(self) -> int:
        return sum(len(samples) for group in self._groups.values() for samples in group.values())

    # ---- writing -------------------------------------------------------------------------------------------
    def append(self, records: Iterable[dict], *, remember: bool = True) -> None:
        """Add records (dicts with :data:`RECORD_FIELDS`) and, with a file, write them durably (flush + fsync).

        ``remember=False``: write only, keep nothing in memory (a caller that holds the samples itself)."""
        records = list(records)
        for record in records:
            missing = [field for field in RECORD_FIELDS if field not in record]
            if missing:
                raise ValueError(f"sample record lacks {missing}: {record}")
        if self.path is not None and records:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            payload = "".join(
                json.dumps({f: r[f] for f in RECORD_FIELDS}, ensure_ascii=False) + "\n" for r in records
            ).encode("utf-8")
            with self.path.open("ab") as handle:
                size = handle.tell()  # append mode: the end of the file
                if size != self._known_size:
                    raise UserError(
                        f"{self.path} changed while this run was using it ({self._known_size} -> {size} bytes): "
                        "is another run writing the same cache? Use one output folder per run."
                    )
                if size != self._good_size:  # cut the torn tail found at load before appending
                    handle.truncate(self._good_size)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            self._good_size += len(payload)
            self._known_size = self._good_size
        if remember:
            for record in records:
                self._add(record)
