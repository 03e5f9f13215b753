"""QLoRA memory: weight footprint bf16 vs nf4 + LoRA (Qwen2.5-0.5B and -1.5B shapes), and the peak RSS of one
training step, QLoRA vs full bf16 fine-tuning with AdamW (0.5B shape).

    python -m benchmarks.qlora_memory [--seq 256] [--shapes 0.5b,1.5b] [--skip-steps]

Models are Qwen2-architecture models with Qwen2.5-0.5B / Qwen2.5-1.5B's published shapes (hidden size, layers, heads,
vocabulary, tied embeddings) and random weights, built locally from their configs (no download) and saved in bf16 to
a temporary folder, so the 4-bit model is loaded the way a real checkpoint is (`from_pretrained` with a
`BitsAndBytesConfig`). Every measurement runs in a fresh subprocess (peaks never go down within a process).

- Weight footprint. bf16: parameters + buffers of the bf16 model. nf4 + LoRA: the loaded 4-bit model's parameters
  and buffers (packed 4-bit linear weights; embeddings, norms and biases stay bf16), plus the quantisation state
  `get_memory_footprint` leaves out (absmax, nested absmax, code books), plus LoRA r=16 on every attention and MLP
  projection (bf16: TRL casts QLoRA adapters to bf16). QLoRA recipe: nf4, double quantisation, bf16 compute.
- Training step peak RSS (0.5B shape, batch 1 x --seq tokens: a prompt and a completion of half each), without and
  with activation checkpointing (the same setting on both sides), of the loss our trainer runs: TRL GRPO's, i.e.
  log-probabilities of the completion tokens only (`logits_to_keep`, `selective_log_softmax`) times an advantage
  (:func:`grpo_loss`); transformers' LM loss over every position would instead hold three fp32 copies of the
  full-vocabulary logits (3 x 148 MiB here) that no GRPO step makes. The process's peak resident set size during
  forward + backward + AdamW step (the first step, which allocates the optimizer state), measured by resetting the
  kernel's high-water mark (/proc/self/clear_refs) after loading and reading VmHWM after the step. Full: bf16 weights,
  AdamW on every parameter (bf16 states). QLoRA: the nf4 model + LoRA as above, then
  `grpo_ext.policy_loading.prepare_quantized_policy` (what our trainer does), AdamW on the adapters. The optimizer is
  `AdamW(fused=True)` on both sides, what transformers' Trainer (so TRL and GRPOExtTrainer) builds by default
  (`optim="adamw_torch_fused"`); plain AdamW on CPU updates one parameter at a time through temporaries of that
  parameter's size, which added ~0.5 GiB (the tied embedding's update) to the full side's peak only. After loading,
  freed memory is returned to the OS (malloc_trim) on both sides. Absolute process RSS (Python, torch and the
  libraries included on both sides; file-backed pages of a checkpoint mapping that tensors still reference count too);
  next to each peak the table shows the bytes of weights and AdamW state in it.

Targets: nf4 + LoRA <= 0.40x bf16 (1.5B shape); QLoRA step peak <= 0.35x full (0.5B shape).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import _common
from benchmarks._memory import peak, reset_peak, rss
from grpo_ext.stand_ins import SHAPES

MARK = "@@RESULT@@"
TARGET_FOOTPRINT, TARGET_STEP = 0.40, 0.35
PUBLISHED_PARAMETERS = {"0.5b": 494_032_768, "1.5b": 1_543_714_304}  # the hub models' parameter counts
LORA = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


# ---- workers (each in its own process) -------------------------------------------------------------------------


def _config(shape: str):
    from transformers import Qwen2Config

    return Qwen2Config(**SHAPES[shape])


def _tensor_bytes(model) -> int:
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _quant_state_bytes(model) -> int:
    import bitsandbytes as bnb
    import torch

    total = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit) and getattr(module.weight, "quant_state", None) is not None:
            for value in module.weight.quant_state.as_dict(packed=True).values():
                if isinstance(value, torch.Tensor):
                    total += value.numel() * value.element_size()
    return total


def _load_nf4(folder: str):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, dtype=torch.bfloat16)
    base_bytes, quant_bytes = _tensor_bytes(model), _quant_state_bytes(model)
    model = get_peft_model(model, LoraConfig(**LORA))
    for param in model.parameters():  # what TRL's GRPOTrainer does for a quantised model (the QLoRA recipe)
        if param.requires_grad:
            param.data = param.data.to(torch.bfloat16)
    lora = [p for p in model.parameters() if p.requires_grad]
    lora_bytes = sum(p.numel() * p.element_size() for p in lora)
    return model, {
        "base_bytes": base_bytes,
        "quant_state_bytes": quant_bytes,
        "lora_parameters": sum(p.numel() for p in lora),
        "lora_bytes": lora_bytes,
        "total_bytes": base_bytes + quant_bytes + lora_bytes,
    }


def worker_build(shape: str, folder: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(shape), dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    bf16_bytes = _tensor_bytes(model)
    model.save_pretrained(folder)
    return {"parameters": n_params, "published_parameters": PUBLISHED_PARAMETERS.get(shape), "bf16_bytes": bf16_bytes}


def worker_nf4(shape: str, folder: str) -> dict:
    before = rss()
    start = time.perf_counter()
    model, info = _load_nf4(folder)
    return info | {"load_seconds": time.perf_counter() - start, "rss_after_load": rss(), "rss_before_load": before}


def _release_freed_memory() -> None:
    """Return the loader's freed temporaries to the OS (glibc keeps them in its arenas otherwise, a few hundred MiB
    that vary from run to run), so a step's peak starts from what the model really holds. Same for both sides."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def grpo_loss(model, input_ids, completion_length: int):
    """The loss of a GRPO training step as TRL's GRPOTrainer computes it (so GRPOExtTrainer): log-probabilities of the
    completion tokens only (`logits_to_keep`, then TRL's `selective_log_softmax`), times an advantage, averaged over
    the completion tokens (`loss_type: dapo`, one iteration: the importance ratio is 1 with gradient)."""
    from trl.trainer.utils import selective_log_softmax

    completion = input_ids[:, -completion_length:]
    logits = model(input_ids=input_ids, logits_to_keep=completion_length + 1).logits[:, :-1, :]
    logps = selective_log_softmax(logits, completion)
    return -(logps - logps.detach()).exp().sum() / completion.numel()  # advantage 1: memory does not depend on it


def worker_step(kind: str, folder: str, seq: int, checkpointing: bool) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    baseline = rss()
    if kind == "full":
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    else:
        model, _ = _load_nf4(folder)
        try:  # our QLoRA path: what GRPOExtTrainer does to the policy TRL built
            from grpo_ext.policy_loading import prepare_quantized_policy
        except ImportError:
            prepare_quantized_policy = None
        if prepare_quantized_policy is not None:
            prepare_quantized_policy(model)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if kind != "full":
            model.enable_input_require_grads()  # as TRL does for a PEFT model with checkpointing
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train()
    # The optimizer a real run gets: transformers' Trainer (so TRL and GRPOExtTrainer) defaults to
    # `adamw_torch_fused`. Plain AdamW on CPU updates one parameter at a time through temporaries the size of that
    # parameter (~0.5 GiB for the tied 0.5B embedding), which would inflate the full side's peak only.
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, fused=True)
    vocab = model.config.vocab_size
    input_ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(0))
    _release_freed_memory()
    loaded = rss()
    exact = reset_peak()
    start = time.perf_counter()
    loss = grpo_loss(model, input_ids, completion_length=seq // 2)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return {
        "kind": kind,
        "activation_checkpointing": checkpointing,
        "trainable_parameters": sum(p.numel() for p in trainable),
        "model_bytes": _tensor_bytes(model),
        "optimizer_state_bytes": sum(t.numel() * t.element_size() for t in state),
        "rss_baseline": baseline,
        "rss_after_load": loaded,
        "peak_rss_step": peak(),
        "peak_exact": exact,
        "loss": float(loss),
        "step_seconds": seconds,
    }


def run_worker(*args: str) -> dict:
    """Run one worker in a fresh interpreter; returns its JSON result."""
    cmd = [sys.executable, "-m", "benchmarks.qlora_memory", "--worker", *args]
    print(f"  $ {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=_common.ROOT, capture_output=True, text=True, env=os.environ.copy())
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"worker {args} failed with exit code {proc.returncode}")
    return json.loads(lines[-1][len(MARK) :])


# ---- driver ------------------------------------------------------------------------------------------------------


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _step_cell(step: dict) -> str:
    """Peak RSS, with the bytes of weights and optimizer state in it (the rest: process, activations, grads)."""
    return (
        f"{mib(step['peak_rss_step'])} (at step start {mib(step['rss_after_load'])}; weights "
        f"{mib(step['model_bytes'])}, AdamW state {mib(step['optimizer_state_bytes'])}; "
        f"{step['step_seconds']:.0f} s)"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--shapes", default="0.5b,1.5b")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--step-shape", default="0.5b", help="shape of the training-step measurement")
    parser.add_argument("--skip-steps", action="store_true", help="only the weight footprints")
    parser.add_argument("--workdir", default=None, help="where the random models are saved (default: a temp dir)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _common.set_threads(1)
        name, *rest = args.worker
        if name == "build":
            out = worker_build(*rest)
        elif name == "nf4":
            out = worker_nf4(*rest)
        else:
            out = worker_step(rest[0], rest[1], int(rest[2]), rest[3] == "1")
        print(MARK + json.dumps(out), flush=True)
        return out

    load_start = _common.load_average()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="grpo_ext_qlora_bench_"))
    footprints, steps = {}, {}
    try:
        for shape in shapes:
            folder = workdir / f"qwen2.5-{shape}-random"
            footprints[shape] = run_worker("build", shape, str(folder))
            footprints[shape] |= {"nf4": run_worker("nf4", shape, str(folder))}
            footprints[shape]["ratio"] = footprints[shape]["nf4"]["total_bytes"] / footprints[shape]["bf16_bytes"]
            if shape != args.step_shape or args.skip_steps:
                shutil.rmtree(folder, ignore_errors=True)
        if not args.skip_steps:
            folder = workdir / f"qwen2.5-{args.step_shape}-random"
            if not folder.exists():
                run_worker("build", args.step_shape, str(folder))
            for checkpointing in ("0", "1"):  # one after the other: never two big processes at once
                for kind in ("full", "qlora"):
                    key = kind + ("_ac" if checkpointing == "1" else "")
                    steps[key] = run_worker("step", kind, str(folder), str(args.seq), checkpointing)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    blank = ("", "", "")  # no target, result or load for an information row
    load = _common.load_average()
    load_cell = " / ".join(map(str, load))
    rows = []
    for shape, f in footprints.items():
        nf4 = f["nf4"]
        is_target = shape == "1.5b"
        weights = f"Qwen2.5-{shape.upper()} shape ({f['parameters'] / 1e9:.2f} B params): weights bf16"
        rows.append([weights, mib(f["bf16_bytes"]), *blank])
        rows.append(
            [
                f"Qwen2.5-{shape.upper()} shape: nf4 + double quant ({mib(nf4['base_bytes'])} incl. bf16 embeddings, "
                f"+ {mib(nf4['quant_state_bytes'])} quant state) + LoRA r16 bf16 "
                f"({nf4['lora_parameters'] / 1e6:.1f} M, "
                f"{mib(nf4['lora_bytes'])})",
                f"{mib(nf4['total_bytes'])} = **{f['ratio']:.3f}x** bf16",
                f"<= {TARGET_FOOTPRINT}x" if is_target else "(info)",
                _common.verdict(f["ratio"] <= TARGET_FOOTPRINT) if is_target else "",
                load_cell if is_target else "",
            ]
        )
    step_ratios = {}
    for suffix, label in (("", "no activation checkpointing"), ("_ac", "activation checkpointing")):
        if "full" + suffix not in steps:
            continue
        full, qlora = steps["full" + suffix], steps["qlora" + suffix]
        ratio = step_ratios["step_peak" + suffix] = qlora["peak_rss_step"] / full["peak_rss_step"]
        shape = args.step_shape.upper()
        full_step = f"{shape} shape, one step (batch 1 x {args.seq}, {label}): full bf16 + fused AdamW, peak RSS"
        rows.append([full_step, _step_cell(full), *blank])
        qlora_step = f"{shape} shape, one step ({label}): QLoRA nf4 + LoRA r16 + fused AdamW, peak RSS"
        rows.append([qlora_step, _step_cell(qlora), *blank])
        rows.append(
            [
                f"**QLoRA / full step peak RSS ({label})**",
                f"{ratio:.3f}x",
                f"<= {TARGET_STEP}x",
                _common.verdict(ratio <= TARGET_STEP),
                load_cell,
            ]
        )
    table = _common.markdown_table(["measure", "value", "target", "result", "load avg (1/5/15 min)"], rows)
    verdicts = {}
    if "1.5b" in footprints:
        verdicts["footprint_1.5b"] = footprints["1.5b"]["ratio"] <= TARGET_FOOTPRINT
    for key, ratio in step_ratios.items():
        verdicts[key] = ratio <= TARGET_STEP
    payload = {
        "params": {k: v for k, v in vars(args).items() if k != "worker"} | {"lora": LORA},
        "load_average_start": load_start,
        "footprints": footprints,
        "steps": steps,
        "step_peak_ratios": step_ratios,
        "targets": {
            "footprint_1.5b": f"nf4 + LoRA <= {TARGET_FOOTPRINT} x bf16",
            "step_peak": f"QLoRA peak RSS <= {TARGET_STEP} x full bf16 fused AdamW ({args.step_shape} shape), "
            "without and with activation checkpointing on both sides",
        },
        "pass": verdicts,
    }
    _common.write_results("qlora_memory", payload, table)
    return payload


def summary_rows() -> list[list]:
    """This benchmark's rows of the `run_all` summary (:func:`benchmarks._common.dated_rows`)."""

    def rows(r):
        if "1.5b" in r["footprints"]:
            ratio, ok = r["footprints"]["1.5b"]["ratio"], r["pass"]["footprint_1.5b"]
            yield "weights nf4 + LoRA / bf16, Qwen2.5-1.5B shape", f"{ratio:.3f}x", "<= 0.40x", _common.verdict(ok)
        for key, label in (("step_peak", "no activation checkpointing"), ("step_peak_ac", "activation checkpointing")):
            if key in r.get("step_peak_ratios", {}):
                measure = f"GRPO training step peak RSS, QLoRA / full bf16 (fused AdamW), 0.5B shape ({label})"
                ratio = r["step_peak_ratios"][key]
                yield measure, f"{ratio:.3f}x", "<= 0.35x", _common.verdict(r["pass"][key])

    return _common.dated_rows(_common.load_result("qlora_memory"), rows)


if __name__ == "__main__":
    main()
