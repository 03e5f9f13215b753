"""GRPO step time and peak GPU memory on a CUDA GPU: full fine-tuning, LoRA and QLoRA, extensions off and on at the
same beta, TRL's `cache_implementation: static` against the default cache for generation, and grpo-ext's sampler
(`generation_backend: sampler`) against TRL's `generate`.

    python -m benchmarks.gpu_step [--shapes 0.5b,1.5b] [--kinds full,lora,qlora] [--variants off,on,static,sampler]
                                  [--reps 3] [--warmup 1] [--batch 64] [--group 8] [--completion 128]
                                  [--results-dir DIR]

Without a CUDA device it prints why and writes nothing (exit 0), so a CPU run never overwrites a committed GPU
result. Each shape writes ``benchmarks/results/gpu_step_<shape>.json`` (``--results-dir`` for another folder) as soon
as it is done (a run cut short keeps the shapes it finished; ``--shapes 1.5b`` runs one). ``--device cpu`` rehearses
the code paths on the CPU (with ``--shapes tiny``) and prints the table; it writes only into a ``--results-dir``
given on the command line, never into benchmarks/results/.

Time on one H100 is mostly loading and warming up: 10-20 s a trainer to load and take its first step, the sampler
~55 s more (its decode step compiles; 0.5B QLoRA, 2026-11-28), then 3-15 s a timed step a variant (QLoRA 13 s at
either shape, LoRA 8-10 s, full 3.5-4.5 s; the sampler 2.9 s at 0.5B). Every kind of every shape with every variant
does not fit one 10-minute call: `--shapes 1.5b --kinds qlora --reps 2` did not finish in 200 s on 2026-11-28. Name
the variants a question needs (``--variants off,sampler``: issue 29's sampler against TRL's generate;
``--variants static,sampler``: against TRL's static cache) and one kind a call; benchmarks/README.md, "GPU checks in
a 15-minute budget", gives the plan.

Models: random-weight Qwen2 models of Qwen2.5-0.5B / -1.5B's shapes with the real vocabulary (151,936), built here
and saved as bf16 safetensors with the embedded character tokenizer (benchmarks/_gpu.py); the policy is loaded from
that folder the way `scripts/train.py` loads it (`grpo_ext.policy_loading.policy_init` from TRL's `ModelConfig`):

- full: bf16 weights, every parameter trained (AdamW), a reference copy for the KL term (TRL builds it at beta > 0);
- lora: bf16 base + LoRA r16 / alpha 32 on every attention and MLP projection; the reference is the adapter-disabled
  base (no copy);
- qlora: the same on a 4-bit nf4 base (double quantisation, bf16 compute).

Per kind, one fresh process builds a `GRPOExtTrainer` per variant (``--variants``, all four by default) on the same
folder, task and settings:

- off: every extension off, beta 0.04 (fixed): TRL's GRPO;
- on: process advantages from the step verifier + the outcome as a last step, `zero_std_groups: skip`, adaptive
  beta starting at 0.04 (configs/process.yaml + configs/adaptive_kl.yaml + skip: benchmarks/overhead.py's `all_on`);
- static: `off` with `cache_implementation: static` (TRL passes it to `generate`, with compilation disabled);
- sampler: `off` with `generation_backend: sampler` (grpo-ext's continuous sampler, its decode step compiled with
  CUDA graphs: `sampler_decode: auto`); it warms up 2 steps more than the others (a compilation, then the cache
  capacity made dynamic), so no timed step compiles. Target (issue 29): QLoRA at the 1.5B shape >= 2x faster than
  `off` (time / off <= 0.5), peak memory within 10% of `off`'s: the table's last line says whether it was met.

Settings (configs/gpu/qlora_qwen2.5-1.5b_gsm8k.yaml's GRPO settings, smaller): ``--batch`` completions a step =
``--batch / --group`` prompts of the embedded arithmetic task x ``--group`` generations, up to ``--completion`` new
tokens at T = 1 (random weights rarely draw EOS: nearly every completion runs to the limit), loss `grpo`, activation
checkpointing, bf16. Rewards: the task's verifier (0 for the random policy's output) plus the share of even token ids
in the completion, so every group has reward variance: no group is skipped and both sides back-propagate every row
(for `on`, its most expensive case).

A step is `training_step` (generation, rewards, advantages, loss, backward) + optimizer step + scheduler step +
`zero_grad` (benchmarks/overhead.py's `one_step`), ended by `torch.cuda.synchronize()`. The first ``--warmup``
steps of each trainer are timed apart (CUDA kernels load, the optimizer state is allocated); then ``--reps``
repetitions run the trainers in rotating order, torch seeded per repetition. Time: median with quartiles and each
variant over `off` (`time_over_off`) and over `static` (`time_over_static`) when those ran (medians of per-repetition
ratios; the table's ratio column is over `off`, else `static`). Where the sampler ran beside `off` or `static`,
`sampler_vs` gives its speed-up over each and its peak memory over theirs, per kind. Memory (torch's allocator, bytes
held by tensors, not what the allocator caches): `resident` = what building the trainer and its first step left
allocated (weights, reference, LoRA, optimizer state); `peak` = resident + the most a timed step added on top of what
was allocated before it: the peak the variant would reach alone on the GPU.

No target: this records GPU costs (issue 21).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import _common, _gpu
from grpo_ext.io import portable_path
from grpo_ext.stand_ins import RESULT_MARK

NAME = "gpu_step"
MARK = RESULT_MARK
KINDS = ("full", "lora", "qlora")
VARIANTS = ("off", "on", "static", "sampler")
#: the variants a ratio is taken over, in the order the table's ratio column prefers them
BASELINES = ("off", "static")
EXTRA_WARMUP = {"sampler": 2}
BETA = 0.04
LORA = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0}


def token_parity_reward(completions, completion_ids, **kwargs) -> list[float]:
    """Share of even token ids: varies within every group of a random policy (so no group is without signal)."""
    return [sum(1 for t in ids if t % 2 == 0) / max(len(ids), 1) for ids in completion_ids]


def settings_for(args) -> dict:
    return {
        "per_device_train_batch_size": args.batch,
        "num_generations": args.group,
        "max_completion_length": args.completion,
        "gradient_accumulation_steps": 1,
        "learning_rate": 2e-5,
        "loss_type": "grpo",
        "temperature": 1.0,
        "top_k": 0,
        "beta": BETA,
        "activation_checkpointing": True,
        "seed": 0,
    }


# ---- one kind, in its own process -----------------------------------------------------------------------------


def build_trainer(folder: str, kind: str, variant: str, settings: dict, device: str, out_dir: Path):
    from trl import ModelConfig

    from benchmarks.overhead import ALL_ON
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.policy_loading import policy_init
    from grpo_ext.tasks import get_task
    from grpo_ext.trainer import GRPOExtTrainer

    task = get_task("arithmetic")
    cuda = device == "cuda"
    extra = {
        "on": {k: v for k, v in ALL_ON.items() if k != "beta"},
        "static": {"cache_implementation": "static"},
        "sampler": {"generation_backend": "sampler"},
    }
    args = GRPOExtConfig(
        output_dir=str(out_dir / variant),
        use_cpu=not cuda,
        bf16=cuda,
        max_steps=10_000,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        step_separator=task.step_separator,
        # on the CPU, say so: bitsandbytes would otherwise put a 4-bit model on a GPU it sees, whatever use_cpu says
        model_init_kwargs=None if cuda else {"device_map": {"": "cpu"}},
        **settings,
        **extra.get(variant, {}),
    )
    model_args = ModelConfig(
        model_name_or_path=folder,
        dtype="bfloat16" if cuda else "float32",
        load_in_4bit=kind == "qlora",
        bnb_4bit_quant_type="nf4",
        use_bnb_nested_quant=True,
        use_peft=kind != "full",
        **LORA,
    )
    model_id, quantization, peft = policy_init(model_args, args)
    trainer = GRPOExtTrainer(
        model=model_id,
        reward_funcs=[task.outcome_reward, token_parity_reward],
        args=args,
        train_dataset=task.load("train", 4096),
        quantization_config=quantization,
        peft_config=peft,
        process_reward_funcs=[task.step_reward] if variant == "on" else None,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by train() otherwise
    trainer.create_optimizer_and_scheduler(num_training_steps=args.max_steps)
    trainer.model.train()
    return trainer


def run_kind(folder: str, kind: str, settings: dict, *, device: str, reps: int, warmup: int, variants=VARIANTS) -> dict:
    """Build the variants' trainers, warm each up, time ``reps`` alternated steps; times, memory and errors."""
    from transformers import set_seed

    from benchmarks.overhead import make_batches, one_step

    errors: dict[str, str] = {}
    trainers, resident, warmup_seconds = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="grpo_ext_gpu_step_") as tmp:
        for variant in variants:
            start_bytes = _gpu.allocated(device)
            try:
                set_seed(0)
                trainer = build_trainer(folder, kind, variant, settings, device, Path(tmp))
                n_warm = warmup + EXTRA_WARMUP.get(variant, 0)
                # every variant times the same last `reps` batches, whatever its warm-up
                batches = make_batches(trainer.train_dataset, settings, warmup + max(EXTRA_WARMUP.values()) + reps)
                seconds = []
                for w in range(n_warm):
                    _gpu.synchronize(device)
                    start = time.perf_counter()
                    one_step(trainer, batches[w])
                    _gpu.synchronize(device)
                    seconds.append(time.perf_counter() - start)
            except Exception as err:  # one variant failing (e.g. a static cache TRL cannot use) keeps the others
                errors[variant] = f"{type(err).__name__}: {err}"
                print(f"  {kind}/{variant} failed: {errors[variant]}", file=sys.stderr, flush=True)
                continue
            trainers[variant] = (trainer, batches[-reps:])
            warmup_seconds[variant] = seconds
            end_bytes = _gpu.allocated(device)
            resident[variant] = None if start_bytes is None else end_bytes - start_bytes

        step_extra: dict[str, list[int]] = {v: [] for v in trainers}
        lengths: dict[str, list[float]] = {v: [] for v in trainers}
        losses: dict[str, list[float]] = {v: [] for v in trainers}

        def runner(variant: str):
            trainer, batches = trainers[variant]

            def fn(r: int) -> None:
                if variant in errors:
                    return
                set_seed(1000 + r)
                before = _gpu.allocated(device)
                _gpu.reset_peak(device)
                try:
                    losses[variant].append(one_step(trainer, batches[r]))
                    _gpu.synchronize(device)
                except Exception as err:
                    errors[variant] = f"{type(err).__name__}: {err}"
                    print(f"  {kind}/{variant} failed: {errors[variant]}", file=sys.stderr, flush=True)
                    return
                peak = _gpu.max_allocated(device)
                if peak is not None:
                    step_extra[variant].append(peak - before)
                lengths[variant].append(trainer._metrics["train"]["completions/mean_length"][-1])

            return fn

        times = _common.alternate({v: runner(v) for v in trainers}, reps=reps, warmup=0) if trainers else {}
    ok = [v for v in times if v not in errors]
    out = {"kind": kind, "errors": errors, "variants": {}}
    for v in ok:
        peak = None if resident[v] is None or not step_extra[v] else resident[v] + max(step_extra[v])
        out["variants"][v] = {
            "warmup_seconds": warmup_seconds[v],
            "seconds": _common.summary(times[v]),
            "resident_bytes": resident[v],
            "step_extra_bytes": step_extra[v],
            "peak_bytes": peak,
            "mean_completion_length": _common.median(lengths[v]),
            "losses": losses[v],
        }
    for base in BASELINES:
        if base in ok:
            out[f"time_over_{base}"] = {v: _common.paired_ratio(times[v], times[base]) for v in ok if v != base}
    return out


def parse_variants(text: str) -> tuple[str, ...]:
    """``"sampler, off"`` -> ``("off", "sampler")`` (the order of :data:`VARIANTS`); SystemExit naming the variants for
    an unknown one."""
    asked = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in asked if v not in VARIANTS]
    if unknown or not asked:
        raise SystemExit(f"--variants: unknown {unknown or [text]}; the variants are {', '.join(VARIANTS)}")
    return tuple(v for v in VARIANTS if v in asked)


def reference(res: dict) -> str | None:
    """The variant the table's ratio column divides by: `off`, else `static`, else none."""
    return next((base for base in BASELINES if base in res.get("variants", {})), None)


# ---- workers and driver ------------------------------------------------------------------------------------------


def run_worker(*args: str) -> dict:
    """One worker in a fresh interpreter (a clean CUDA allocator for each kind); its JSON result."""
    cmd = [sys.executable, "-m", "benchmarks.gpu_step", "--worker", *args]
    print(f"  $ {' '.join(cmd[1:4])} {' '.join(a[:60] for a in cmd[4:])}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=_common.ROOT, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        return {"error": f"worker exited with code {proc.returncode} (its stderr is above)"}
    return json.loads(lines[-1][len(MARK) :])


def mib(n) -> str:
    return "" if n is None else f"{n / 2**20:,.0f} MiB"


def sampler_target(kinds: dict) -> dict | None:
    """Issue 29's target on the QLoRA policy: the sampler's step at most half of `off`'s, its peak within 10%."""
    res = kinds.get("qlora", {})
    ratio = res.get("time_over_off", {}).get("sampler")
    variants = res.get("variants", {})
    if ratio is None or "off" not in variants or "sampler" not in variants:
        return None
    peaks = variants["sampler"]["peak_bytes"], variants["off"]["peak_bytes"]
    memory = None if None in peaks else peaks[0] / peaks[1]
    speed = 1 / ratio["median_of_ratios"]
    return {"speedup": speed, "peak_over_off": memory, "met": speed >= 2 and memory is not None and memory <= 1.1}


def sampler_vs(kinds: dict) -> dict:
    """Per kind where the sampler ran beside `off` or `static`: its speed-up over each (median of per-repetition
    ratios) and its peak memory over theirs (None without CUDA peaks)."""
    out = {}
    for kind, res in kinds.items():
        variants = res.get("variants", {})
        if "sampler" not in variants:
            continue
        for base in BASELINES:
            ratio = res.get(f"time_over_{base}", {}).get("sampler")
            if ratio is None:
                continue
            peaks = variants["sampler"]["peak_bytes"], variants[base]["peak_bytes"]
            out.setdefault(kind, {})[base] = {
                "speedup": 1 / ratio["median_of_ratios"],
                "peak_over": None if None in peaks else peaks[0] / peaks[1],
            }
    return out


def table(shape: str, kinds: dict) -> str:
    rows, refs = [], set()
    for kind, res in kinds.items():
        if "error" in res:
            rows.append([shape, kind, "", res["error"], "", "", "", ""])
            continue
        for v in VARIANTS:
            if v in res["errors"]:
                rows.append([shape, kind, v, f"failed: {res['errors'][v][:200]}", "", "", "", ""])
                continue
            if v not in res["variants"]:
                continue
            r = res["variants"][v]
            s = r["seconds"]
            ref = reference(res)
            refs.add(ref)
            ratio = res.get(f"time_over_{ref}", {}).get(v)
            rows.append(
                [
                    shape,
                    kind,
                    v,
                    f"{s['median']:.3g} ({s['q1']:.3g}-{s['q3']:.3g})",
                    "1" if v == ref else ("" if ratio is None else f"{ratio['median_of_ratios']:.3f}x"),
                    " / ".join(f"{x:.3g}" for x in r["warmup_seconds"]),
                    mib(r["peak_bytes"]),
                    mib(r["resident_bytes"]),
                ]
            )
    ref = "off" if refs <= {"off", None} else ("static" if refs <= {"static", None} else "off or static")
    headers = ["shape", "kind", "variant", "step s (IQR)", f"time / {ref}", "warm-up s", "peak memory", "resident"]
    return _common.markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="0.5b,1.5b")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)} (default: all)"
    )
    parser.add_argument("--results-dir", help="where the JSON goes (default benchmarks/results/; a CPU run: only here)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64, help="completions a step")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (num_generations)")
    parser.add_argument("--completion", type=int, default=128, help="max_completion_length")
    parser.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="cpu: rehearse on the CPU, print, write nothing"
    )
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, *rest = args.worker
        if name == "build":
            out = {
                "folder": str(_gpu.build_random_model(rest[0], rest[1], device=rest[2])),
                "device": _gpu.device_facts(rest[2]),
            }
        else:
            folder, kind, settings, device = rest[0], rest[1], json.loads(rest[2]), rest[3]
            variants = parse_variants(rest[6]) if len(rest) > 6 else VARIANTS
            out = run_kind(
                folder, kind, settings, device=device, reps=int(rest[4]), warmup=int(rest[5]), variants=variants
            )
        print(MARK + json.dumps(out), flush=True)
        return out

    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [s for s in shapes if s not in _gpu.SHAPES] + [k for k in kinds if k not in KINDS]
    if bad:
        raise SystemExit(f"--shapes / --kinds: unknown {bad}; shapes {sorted(_gpu.SHAPES)}, kinds {list(KINDS)}")
    variants = parse_variants(args.variants)
    if args.batch % args.group:
        raise SystemExit(f"--batch ({args.batch}) must be a multiple of --group ({args.group})")
    if args.device == "cuda":
        reason = _gpu.cuda_unavailable_reason()
        if reason is not None:
            print(f"{NAME}: needs a CUDA GPU: {reason}. Nothing measured, nothing written.")
            return {"skipped": reason}

    settings = settings_for(args)
    payloads = {}
    for shape in shapes:
        with tempfile.TemporaryDirectory(prefix="grpo_ext_gpu_step_model_") as tmp:
            folder = str(Path(tmp) / f"qwen2.5-{shape}-random")
            built = run_worker("build", shape, folder, args.device)
            results = {}
            for kind in kinds:
                if "error" in built:
                    results[kind] = {"error": f"model build failed: {built['error']}"}
                    continue
                results[kind] = run_worker(
                    "kind", folder, kind, json.dumps(settings), args.device, str(args.reps), str(args.warmup),
                    ",".join(variants),
                )  # fmt: skip
        text = table(shape, results) + (
            f"\n\n{args.batch} completions a step ({args.group} per prompt), up to {args.completion} new tokens, "
            f"beta {BETA}, loss grpo, activation checkpointing; times are medians of {args.reps} alternated steps"
        )
        target = sampler_target(results)
        if target is not None:
            memory = "n/a" if target["peak_over_off"] is None else f"{target['peak_over_off']:.2f}x"
            text += (
                f"\nQLoRA, sampler vs off: {target['speedup']:.2f}x faster, peak {memory} of off's: target (>= 2x, "
                f"peak within 10%) {'met' if target['met'] else 'NOT met'}"
            )
        versus = sampler_vs(results)
        for kind, bases in versus.items():
            for base, v in bases.items():
                if kind == "qlora" and base == "off" and target is not None:
                    continue  # said above
                memory = "n/a" if v["peak_over"] is None else f"{v['peak_over']:.2f}x"
                text += f"\n{kind}, sampler vs {base}: {v['speedup']:.2f}x faster, peak {memory} of {base}'s"
        payload = {
            "device": built.get("device"),
            "shape": shape,
            "model": f"random-weight Qwen2.5-{shape} shape, vocabulary {_gpu.SHAPES[shape]['vocab_size']}",
            "params": {k: v for k, v in vars(args).items() if k != "worker"}
            | {"results_dir": None if args.results_dir is None else portable_path(args.results_dir)}
            | {"settings": settings, "lora": LORA},
            "kinds": results,
            "sampler_target": target,
            "sampler_vs": versus,
        }
        payloads[shape] = payload
        if args.device == "cuda" or args.results_dir is not None:
            _common.write_results(f"{NAME}_{shape}", payload, text, results_dir=args.results_dir)
        else:
            print(text)
            print(f"\n{NAME}: CPU rehearsal, not written (GPU results only; --results-dir writes it there)")
    return payloads


if __name__ == "__main__":
    main()
