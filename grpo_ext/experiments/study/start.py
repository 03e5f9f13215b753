"""The study's start: one SFT model that every arm trains from (DeepSeekMath 5.2's unified paradigm trains every
method from DeepSeekMath-Instruct), made once per study and recorded with its hash.

The start is a run of a method config (``sft`` on the task's reference solutions) from the study's base, trained on
the first ``train_size`` train prompts; every arm then skips those prompts (``train_offset``), so no arm trains on a
prompt the start saw. Its LoRA adapter is merged into a bf16 copy of the base (``<out>/start/model``, a plain
transformers folder): the arms load it as their model (a fresh LoRA adapter on top) and, wherever a reference model
is used, the adapter-disabled model *is* the start. The start is scored as the study's ``base`` run (the reference of
every table and expectation), so the number a reader compares with is the model the arms started from, rounding
included.

Files: ``<out>/start/adapter/`` (the SFT run: adapter and records, committed, so a clone rebuilds the same start),
``<out>/start/model/`` (the merged weights, not committed: rebuilt from the adapter), ``<out>/start/start.json``
(the command, the prompts it trained on, the sha256 of the adapter and of the merged weights). A rebuilt model whose
hash differs from the record is refused: the study's arms would start from another model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from grpo_ext.errors import UserError

__all__ = [
    "START_FIELDS",
    "START_RECORD",
    "Start",
    "build_start",
    "start_argv",
    "start_identity",
    "start_record",
    "weights_hash",
]

#: The fields of the study's `start` section.
START_FIELDS = ("method", "learning_rate", "seed", "overrides", "label")
START_RECORD = "start.json"


@dataclass(frozen=True)
class Start:
    """The study's `start` section: a run of ``method``'s config (``overrides`` on top) at ``learning_rate``."""

    method: str
    learning_rate: float
    seed: int = 0
    overrides: dict = field(default_factory=dict)
    label: str = "SFT start"  # how reports name the start (the run called `base` in the records)

    def flags(self) -> list[str]:
        out = []
        for key, value in self.overrides.items():
            out += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
        return [*out, "--learning_rate", repr(self.learning_rate)]


def start_argv(start: Start, base: str, configs: str | Path, folder: Path, quick_flags: list[str]) -> list[str]:
    """The method runner's command line of the start's run (trained from the study's `base`)."""
    from grpo_ext.experiments.study.method_configs import method_config_path

    config = method_config_path(start.method, configs)
    argv = ["--config", str(config), "--seed", str(start.seed), "--output_dir", str(folder)]
    return [*argv, "--model_name_or_path", base, *start.flags(), "--disable_tqdm", "true", *quick_flags]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_hash(folder: Path) -> str:
    """One sha256 over the folder's safetensors files (by name, in order)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise UserError(f"{folder}: no safetensors weights")
    return hashlib.sha256("".join(f"{f.name}:{_sha256(f)};" for f in files).encode()).hexdigest()


def start_identity(record: dict) -> str:
    """How the study's records name the start (in place of its folder, which differs between clones)."""
    return f"study start sha256:{record['model_sha256']}"


def build_start(start: Start, base: str, configs: str | Path, out: Path, quick_flags: list[str]) -> tuple[Path, dict]:
    """The merged start model in ``<out>/start/model`` and its record: trained and merged on the first call, rebuilt
    from the committed adapter (and checked against the recorded hash) on a clone, reused as it is otherwise."""
    from grpo_ext.experiments.study.method_configs import method_config_path
    from grpo_ext.experiments.study.provenance import check_training, finished_run, record_training, training_record
    from grpo_ext.io import atomic_write_json
    from grpo_ext.methods import run_method
    from grpo_ext.methods.config import parse_method_args
    from grpo_ext.methods.cost import COST_FILE, read_json_file
    from grpo_ext.model_paths import resolve_model_path

    folder = Path(out) / "start"
    adapter, model = folder / "adapter", folder / "model"
    argv = start_argv(start, base, configs, adapter, quick_flags)
    command = training_record(argv, method_config_path(start.method, configs))
    task_args = parse_method_args(argv)[1]
    if task_args.train_size is None:
        raise UserError("start: set train_size (its method config or overrides): the arms skip that many prompts")
    record_path = folder / START_RECORD
    record = start_record(start, base, configs, out, quick_flags)
    # a finished run (its record `complete`: a run that failed after saving trains again) with its adapter's weights
    if not finished_run(adapter) or not (adapter / "adapter_model.safetensors").is_file():
        print(f"=== training the study's start ({start.label}) into {adapter}", flush=True)
        record_training(adapter, command)
        run_method(argv)
    check_training(adapter, command)
    adapter_sha = _sha256(adapter / "adapter_model.safetensors")
    if record is not None and record["adapter_sha256"] != adapter_sha:
        raise UserError(f"{adapter}: its adapter is not the one {record_path} records; remove the folder to retrain")
    if not (model / "config.json").is_file() or record is None or weights_hash(model) != record["model_sha256"]:
        _merge(adapter, model, resolve_model_path(base))
    model_sha = weights_hash(model)
    if record is not None and record["model_sha256"] != model_sha:
        raise UserError(
            f"{model}: the start rebuilt from {adapter} has weights sha256 {model_sha}, the study recorded "
            f"{record['model_sha256']} ({record_path}): its runs started from another model; use another --out"
        )
    cost = read_json_file(adapter, COST_FILE) or {}
    # what the run's records say it trained on (the report renders these, never the config's numbers)
    trained = {k: cost.get(k) for k in ("optimizer_steps", "trained_sequences", "unique_sequences")}
    if record is None or record.get("trained") != trained:  # a new record, or one written before it kept counts
        record = record or {
            "label": start.label,
            "command": command,
            "train_prompts": {"offset": 0, "size": task_args.train_size},
            "adapter_sha256": adapter_sha,
            "model_sha256": model_sha,
        }
        record["trained"] = trained
        atomic_write_json(record_path, record)
    return model, record


def start_record(start: Start, base: str, configs: str | Path, out: Path, quick_flags: list[str]) -> dict | None:
    """The start's record in ``<out>/start`` (None before the start is made), checked to be of this study's start: the
    command that made it (its method config, flags and base; the base as any clone names it) is the one `start` and
    `base` give, else a `UserError` naming the file. Read by `build_start` and by --report-only (which builds none)."""
    from grpo_ext.experiments.study.method_configs import method_config_path
    from grpo_ext.experiments.study.provenance import comparable, training_record

    folder = Path(out) / "start"
    command = training_record(
        start_argv(start, base, configs, folder / "adapter", quick_flags), method_config_path(start.method, configs)
    )
    record_path = folder / START_RECORD
    record = _read_record(record_path)
    recorded = record.get("command") if record is not None else None
    if record is not None and (not isinstance(recorded, dict) or comparable(recorded) != command):
        raise UserError(
            f"{record_path}: the start was made by another command (its method config, flags or base differ); "
            "a study's arms all start from one model: use another --out, or remove that folder"
        )
    return record


def _read_record(path: Path) -> dict | None:
    import json

    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read the start's record ({err})") from None
    fields = ("command", "adapter_sha256", "model_sha256", "train_prompts")
    if not isinstance(record, dict) or not set(fields) <= set(record) or not isinstance(record["train_prompts"], dict):
        raise UserError(f"{path}: not a start record (expected {', '.join(fields)})")
    return record


def _merge(adapter: Path, model: Path, base: str) -> None:
    """The adapter merged into the base in float32, then rounded once to bf16 (the dtype every arm loads it in),
    written into a fresh folder that replaces ``model`` only when complete."""
    import shutil
    import tempfile

    from grpo_ext.hub.export import write_merged

    model.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".model-", dir=model.parent))
    try:
        write_merged(adapter, staging, base, "bfloat16")
        if model.exists():
            shutil.rmtree(model)
        staging.rename(model)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
