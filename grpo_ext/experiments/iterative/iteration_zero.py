"""Iteration 0 of a seed, shared by all its arms: the base policy's samples, RM_0 trained on them, the base's scores.

Done once per seed (``seed_<s>/start/start_state.json`` marks it done); every arm of the seed starts from it, so the
arms differ only in what happens from iteration 1 on.
"""

from __future__ import annotations

import time
from pathlib import Path

from grpo_ext.experiments.iterative.measure import Setting, rm_metrics
from grpo_ext.experiments.iterative.rm_training import init_reward_model, train_reward_model
from grpo_ext.experiments.iterative.state import (
    LOOP_STATE_VERSION,
    check_same_config,
    load_state,
    save_state,
    write_records,
)

__all__ = ["RM_DATA_FILE", "START_DIR", "START_STATE_FILE", "load_policy", "run_start"]

START_DIR, START_STATE_FILE, RM_DATA_FILE = "start", "start_state.json", "rm_data.jsonl"


class Clock:
    """Seconds spent per phase of an iteration (``laps``), for the report and for budgeting a run."""

    def __init__(self):
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = round(self.laps.get(phase, 0.0) + now - self._last, 1)
        self._last = now


def load_policy(path: str, dtype: str | None = None):
    import torch

    from grpo_ext.evaluation.backends import load_model_and_tokenizer

    known = dtype in ("bfloat16", "float16", "float32")  # `auto` / None: the loader's own choice (float32 on a CPU)
    return load_model_and_tokenizer(path, device="cpu", dtype=getattr(torch, dtype) if known else None)


def train_rm(setting: Setting, rm, tokenizer, records: list[dict], out: Path, epochs: float, seed: int) -> dict:
    a = setting.args
    fit = train_reward_model(
        setting.reward_model_type,
        rm,
        tokenizer,
        records,
        out,
        separator=setting.separator,
        epochs=epochs,
        learning_rate=a.rm_learning_rate,
        batch_size=a.rm_batch_size,
        seed=seed,
        lora_r=a.rm_lora_r,
        lora_alpha=a.rm_lora_alpha,
        dtype=a.rm_dtype,
    )
    print(
        f"[iterative] seed {setting.seed}: reward model trained on {fit['records']} records, {fit['steps']} steps, "
        f"loss {fit['train_loss']:.3f} -> {out}",
        flush=True,
    )
    return fit


def run_start(setting: Setting, base: str, seed_dir: Path, config: dict, resume: bool = True) -> dict:
    """Iteration 0 of ``setting.seed`` in ``seed_dir/start`` (or its saved state when it is done already)."""
    folder = seed_dir / START_DIR
    saved = load_state(folder, START_STATE_FILE) if resume else None
    if saved is not None:
        check_same_config(folder, saved["config"], config)
        return saved
    print(f"[iterative] seed {setting.seed}: iteration 0 (the base policy's samples, the initial reward model)")
    start, clock = time.perf_counter(), Clock()
    folder.mkdir(parents=True, exist_ok=True)
    a = setting.args
    model, tokenizer = load_policy(base, setting.policy_dtype)
    records = setting.rm_data(model, tokenizer, 0, "it0/train")
    eval_sets = setting.eval_sets(model, tokenizer, 0, "it0")
    clock.lap("sampling")
    row = {"iteration": 0, "policy": base}
    row.update(setting.evaluate_policy(model, tokenizer, base, folder / "eval_samples.jsonl"))
    clock.lap("evaluation")
    del model
    rm, rm_tokenizer = init_reward_model(
        setting.reward_model_type, base, a.rm_init, seed=setting.seed, dtype=a.rm_dtype, lora_r=a.rm_lora_r
    )
    row.update(rm_metrics(setting.reward_model_type, rm, rm_tokenizer, eval_sets, setting.separator, "before"))
    epochs = a.rm_initial_epochs or a.rm_epochs
    fit = train_rm(setting, rm, rm_tokenizer, records, folder / "reward_model", epochs, setting.seed)
    row.update(rm_metrics(setting.reward_model_type, rm, rm_tokenizer, eval_sets, setting.separator, "after"))
    clock.lap("reward_model")
    write_records(folder / RM_DATA_FILE, records)
    row.update(
        policy_sample_accuracy=sum(r["label"] for r in eval_sets["pool"]) / len(eval_sets["pool"]),
        n_new=len(records),
        n_replay=0,
        replay_ratio_used=0.0,
        rm_train_loss=fit["train_loss"],
        rm_train_steps=fit["steps"],
        seconds=round(time.perf_counter() - start, 1),
        time=clock.laps,
    )
    state = {
        "version": LOOP_STATE_VERSION,
        "config": config,
        "iteration": 0,
        "reward_model": str(folder / "reward_model"),
        "buffer": [f"{START_DIR}/{RM_DATA_FILE}"],
        "row": row,
    }
    save_state(folder, state, START_STATE_FILE)
    return state
