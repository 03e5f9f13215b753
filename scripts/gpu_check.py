"""GPU smoke check: the main job, the harness, every extension and the GPU config, a few steps each on one CUDA GPU.

    make gpu-check                              # = python scripts/gpu_check.py
    python scripts/gpu_check.py --dry-run       # any machine: every step's command parses, its inputs resolve
    python scripts/gpu_check.py --rehearse-on-cpu   # every step run for real on the CPU with tiny stand-ins

One line per step, `PASS` or `FAIL` (with the last line the step printed and its log file), then a summary; the exit
code is 1 when a step failed. Budget: about 6 minutes on one H100 (at most 10). On a machine without CUDA it says
that it needs a GPU, reports every step as "skipped (no CUDA)" and exits 0. Nothing is downloaded: the machine may
have no hub access.

Steps (each a fresh process, as a user would run it; logs in --workdir/logs/):
0. packages: every package the steps import is installed, in pyproject.toml's range (reported, not fatal).
1. prepare: a random-weight model of Qwen2.5-1.5B's shape with the real vocabulary (151,936) and the embedded
   character tokenizer (benchmarks/_gpu.py; initialised on the GPU), a random step-tag PRM of the embedded model's
   size (benchmarks/prm_scoring.py), and 64 GSM8K-format rows (the arithmetic task's problems as questions).
2. main_job: `scripts/train.py --config configs/qlora.yaml --use_cpu false --bf16 true --max_steps 5` (the embedded
   model, 4-bit + LoRA on CUDA); passes when the run status says complete and the adapter is saved.
3. harness: `evals/passk_majk.py` on that adapter (40 problems x 8 samples, transformers backend).
4. ext_*: every extension for 2 steps on the 1.5B-shape QLoRA policy (nf4, double quantisation, LoRA r16, bf16):
   process advantages (configs/process.yaml), the same with a 4-bit process reward model, zero-std groups skipped
   (configs/default.yaml + skip) and refilled (configs/refill.yaml), adaptive KL (configs/adaptive_kl.yaml), and
   process advantages on completions drawn by grpo-ext's sampler (`--generation_backend sampler`, compiled on CUDA).
5. gpu_config: configs/gpu/qlora_qwen2.5-1.5b_gsm8k_no_vllm.yaml as written (8 questions x 16 completions of up to
   512 tokens a step, activation checkpointing) for 2 steps, on the 1.5B-shape model and the local GSM8K rows.

A bare GPU machine (no registry; a Python without trl, bitsandbytes, datasets or transformers >= 5.23) takes the
wheels from where there is a registry, in a folder git ignores, installed without dependencies:
    pip download --no-deps --only-binary=:all: -d outputs/gpu_wheels trl==1.16.0 bitsandbytes==0.50.2 \
        transformers==5.23.0 datasets==5.2.0 dill==0.4.1 math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
        antlr4-python3-runtime==4.13.2     # + multiprocess for that machine's Python (--python-version)
    pip install --no-deps outputs/gpu_wheels/*.whl && python scripts/gpu_check.py

--dry-run builds tiny stand-ins (a Qwen2 model of hidden size 64) in place of the 1.5B model, then checks that each
training command parses (`scripts/train.py`'s parser, forced to `--use_cpu true --bf16 false` where there is no
GPU, since transformers refuses bf16 without one), that its task builds and loads, and that `policy_init` resolves
its model; the harness command goes through the harness's parser and settings. --rehearse-on-cpu runs every step on
the CPU with the stand-ins and smaller batches (a few minutes): the commands work end to end, CUDA aside.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The environment the user gave, before importing `benchmarks` (which pins one thread and quiet logs for timing):
# the steps run as the user would run them.
USER_ENV = dict(os.environ)
if str(ROOT) not in sys.path:  # runs from a checkout without `pip install -e .` (e.g. a bare GPU machine)
    sys.path.insert(0, str(ROOT))

GPU_CONFIG = "configs/gpu/qlora_qwen2.5-1.5b_gsm8k_no_vllm.yaml"
SMOKE_REWARD = "benchmarks._gpu.smoke_reward"
MAIN_STEPS, EXTENSION_STEPS = 5, 2
EXTENSIONS = {  # name: (config, extra flags)
    "ext_process": ("configs/process.yaml", []),
    "ext_process_prm": ("configs/process.yaml", ["--process_reward_model", "{prm}"]),
    "ext_skip": ("configs/default.yaml", ["--zero_std_groups", "skip"]),
    "ext_refill": ("configs/refill.yaml", []),
    "ext_adaptive_kl": ("configs/adaptive_kl.yaml", []),
    # process advantages on completions drawn by grpo-ext's sampler (its decode step compiled on CUDA)
    "ext_sampler": ("configs/process.yaml", ["--generation_backend", "sampler"]),
}


# What the steps import (pyproject.toml gives the ranges). A bare GPU machine may lack some: carry their wheels.
NEEDED_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "datasets", "safetensors",
                   "huggingface_hub", "pyyaml", "tqdm", "matplotlib")  # fmt: skip


@dataclass
class Step:
    name: str
    argv: list[str]  # after the interpreter
    timeout: int  # seconds
    output: str | None = None  # a training output folder whose run status must say complete
    expect_files: list[str] = field(default_factory=list)  # files the step must leave behind

    def kind(self) -> str:
        return {"scripts/train.py": "train", "evals/passk_majk.py": "harness"}.get(self.argv[0], "other")


def plan(work: Path, cpu: bool) -> list[Step]:
    """The steps' commands. ``cpu``: the CPU rehearsal (same commands, CPU flags, smaller batches)."""
    device = ["--use_cpu", "true", "--bf16", "false"] if cpu else ["--use_cpu", "false", "--bf16", "true"]
    dtype = "float32" if cpu else "bfloat16"
    model, prm, data = work / "policy", work / "prm", work / "gsm8k.jsonl"
    common = ["--logging_steps", "1", "--save_strategy", "no", "--report_to", "none"]
    signal = ["--reward_funcs", "outcome", SMOKE_REWARD]  # a random policy scores 0: without it no gradient flows
    qlora = [
        "--model_name_or_path", str(model), "--dtype", dtype, "--load_in_4bit", "true", "--bnb_4bit_quant_type", "nf4",
        "--use_bnb_nested_quant", "true", "--use_peft", "true", "--lora_r", "16", "--lora_alpha", "32",
    ]  # fmt: skip
    steps = [
        Step(
            "main_job",
            ["scripts/train.py", "--config", "configs/qlora.yaml", *device, "--max_steps", str(MAIN_STEPS), *common,
             "--output_dir", str(work / "main_job")],
            timeout=240, output=str(work / "main_job"), expect_files=["adapter_model.safetensors"],
        ),
        Step(
            "harness",
            ["evals/passk_majk.py", "--model", str(work / "main_job"), "--n", "8", "--k", "1,2,4,8", "--limit", "40",
             "--backend", "transformers", "--no-progress", "--out", str(work / "harness")],
            timeout=180, expect_files=["report.json", "report.md"],
        ),
    ]  # fmt: skip
    for name, (config, extra) in EXTENSIONS.items():
        extra = [x.format(prm=prm) for x in extra]
        if name == "ext_process_prm":
            extra += ["--process_reward_model_load_in_4bit", "true"]
        steps.append(
            Step(
                name,
                ["scripts/train.py", "--config", config, *qlora, *device, "--max_steps", str(EXTENSION_STEPS),
                 *common, *signal, *extra, "--output_dir", str(work / name)],
                timeout=180, output=str(work / name),
            )
        )  # fmt: skip
    task_kwargs = json.dumps({"conversational": True, "data_files": str(data)})
    smaller = ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--num_generations", "4",
               "--max_completion_length", "16"] if cpu else []  # fmt: skip
    steps.append(
        Step(
            "gpu_config",
            ["scripts/train.py", "--config", GPU_CONFIG, "--model_name_or_path", str(model), "--task_kwargs",
             task_kwargs, *(device if cpu else []), "--max_steps", str(EXTENSION_STEPS), *common, *signal, *smaller,
             "--output_dir", str(work / "gpu_config")],
            timeout=360, output=str(work / "gpu_config"),
        )
    )  # fmt: skip
    return steps


# ---- preparing the inputs ---------------------------------------------------------------------------------------


def write_gsm8k_rows(path: Path, n: int = 64) -> Path:
    """``n`` rows in the openai/gsm8k format (question, worked answer ending ``#### N``) from the arithmetic task."""
    from grpo_ext.tasks import get_task

    rows = get_task("arithmetic").load("train", n)
    with path.open("w") as f:
        for row in rows:
            steps = row["solution"].split("#")[0].rstrip(";").split(";")
            question = f"What is {row['prompt'].rstrip('=')}? Work left to right."
            f.write(json.dumps({"question": question, "answer": "\n".join(steps) + f"\n#### {row['answer']}"}) + "\n")
    return path


def prepare(work: Path, shape: str, device: str, in_process: bool = False) -> str:
    """The policy folder (built in a child process, so that this one never holds CUDA memory; ``in_process`` for tiny
    CPU stand-ins), the PRM and the data; returns the name of the device the policy was built on."""
    from grpo_ext.stand_ins import RESULT_MARK, build_prm, build_random_model

    if in_process:
        build_random_model(shape, work / "policy", device="cpu")
        name = "cpu"
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.gpu_step", "--worker", "build", shape, str(work / "policy"), device],
            cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"building the {shape}-shape policy failed: {last_line(proc.stderr)}")
        result = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)][-1]
        name = json.loads(result[len(RESULT_MARK) :])["device"]["name"]
    build_prm("step_tag", work / "prm")
    write_gsm8k_rows(work / "gsm8k.jsonl")
    return name


def check_packages() -> tuple[str | None, str]:
    """(None or what is wrong, the versions found): every package of ``NEEDED_PACKAGES`` installed, in the range
    pyproject.toml requires (a wrong transformers, say, fails later with a message about something else)."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement

    requirements = [
        Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ]
    ranges = {r.name: r.specifier for r in requirements}
    problems, found = [], []
    for name in NEEDED_PACKAGES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} missing")
            continue
        found.append(f"{name} {version}")
        if name in ranges and not ranges[name].contains(version, prereleases=True):
            problems.append(f"{name} {version} (pyproject.toml needs {ranges[name]})")
    return ("; ".join(problems) or None), ", ".join(found)


# ---- running and checking --------------------------------------------------------------------------------------


def child_env() -> dict:
    env = dict(USER_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def outcome(step: Step, rc: int | None) -> str | None:
    """None when the step passed, else why not."""
    if rc is None:
        return f"timed out after {step.timeout} s"
    if rc != 0:
        return f"exit code {rc}"
    if step.output is not None:
        status_file = Path(step.output) / "grpo_ext_run.json"
        status = json.loads(status_file.read_text()).get("status") if status_file.is_file() else None
        if status != "complete":
            return f"run status {status!r} in {status_file}, expected 'complete'"
        why = check_training_log(Path(step.output) / "trainer_state.json")
        if why is not None:
            return why
    folder = Path(step.output or step.argv[step.argv.index("--out") + 1])
    missing = [name for name in step.expect_files if not (folder / name).is_file()]
    return f"missing {', '.join(missing)} in {folder}" if missing else None


def check_training_log(path: Path) -> str | None:
    """None when every logged loss is finite and some step had a gradient (norm > 0), else what is wrong."""
    if not path.is_file():
        return f"no {path.name} in {path.parent}"
    logs = [e for e in json.loads(path.read_text()).get("log_history", []) if "loss" in e]
    if not logs:
        return f"{path}: no training step was logged"
    if not all(math.isfinite(float(e["loss"])) for e in logs):
        return f"{path}: a non-finite loss: {[e['loss'] for e in logs]}"
    if not any(float(e.get("grad_norm", 0.0)) > 0 for e in logs):
        return f"{path}: the gradient was 0 in every step (nothing was learned from the rewards)"
    return None


def run_step(step: Step, logs: Path) -> tuple[str | None, float, str]:
    log = logs / f"{step.name}.log"
    start = time.perf_counter()
    with log.open("w") as f:
        f.write("$ python " + " ".join(step.argv) + "\n")
        f.flush()
        try:
            rc = subprocess.run(
                [sys.executable, *step.argv], cwd=ROOT, env=child_env(), stdout=f, stderr=subprocess.STDOUT,
                timeout=step.timeout,
            ).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            rc = None
    return outcome(step, rc), time.perf_counter() - start, last_line(log.read_text())


def dry_check(step: Step, cuda: bool) -> None:
    """Parse the step's command as its script would and resolve its inputs; raises what the script would raise."""
    if step.kind() == "harness":
        from grpo_ext.evaluation.cli import harness_settings
        from grpo_ext.evaluation.passk_majk import build_parser

        harness_settings(build_parser().parse_args(step.argv[1:]))
        return
    from grpo_ext.policy_loading import policy_init
    from grpo_ext.rewards import resolve_process_reward_funcs, resolve_reward_funcs
    from grpo_ext.script_args import parse_train_args
    from grpo_ext.tasks import get_task

    argv = step.argv[1:] + ([] if cuda else ["--use_cpu", "true", "--bf16", "false"])
    task_args, training_args, model_args = parse_train_args(argv)
    task = get_task(task_args.task, **task_args.task_kwargs)
    if len(task.load("train", 8)) == 0:
        raise ValueError(f"task {task_args.task}: no training rows")
    resolve_reward_funcs(task_args.reward_funcs, task)
    resolve_process_reward_funcs(training_args.process_reward_funcs, task)
    policy_init(model_args, training_args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="check every step's command and inputs, run nothing")
    mode.add_argument("--rehearse-on-cpu", action="store_true", help="run every step on the CPU with tiny stand-ins")
    parser.add_argument("--workdir", default=str(ROOT / "outputs" / "gpu_check"), help="emptied first; logs kept")
    parser.add_argument("--keep-models", action="store_true", help="keep the built models and the runs' weights")
    args = parser.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    work = Path(args.workdir)
    steps = plan(work, cpu=args.rehearse_on_cpu)  # a dry run checks the GPU commands as they are written
    names = ["packages", "prepare", *(s.name for s in steps)]
    if not cuda and not (args.dry_run or args.rehearse_on_cpu):
        print("gpu-check needs a CUDA GPU: torch.cuda.is_available() is False here. Nothing was run.")
        for name in names:
            print(f"skipped (no CUDA)  {name}")
        print("(python scripts/gpu_check.py --dry-run checks that every step's command parses, on any machine)")
        return 0

    shutil.rmtree(work, ignore_errors=True)
    logs = work / "logs"
    logs.mkdir(parents=True)
    small = args.dry_run or args.rehearse_on_cpu
    what = "dry run" if args.dry_run else ("CPU rehearsal" if args.rehearse_on_cpu else "CUDA")
    print(f"gpu-check ({what}); logs in {logs}", flush=True)
    failed, start = [], time.perf_counter()
    why, versions = check_packages()  # reported, not fatal: the steps that need a missing package fail by name
    if why is None:
        print(f"PASS  {'packages':16s} {0:6.1f} s  {versions}", flush=True)
    else:
        failed.append("packages")
        print(f"FAIL  {'packages':16s} {0:6.1f} s  {why} (carry the wheels: see scripts/gpu_check.py)", flush=True)
    t0 = time.perf_counter()
    try:
        device_name = prepare(work, "tiny" if small else "1.5b", "cpu" if small else "cuda", in_process=small)
        print(f"PASS  {'prepare':16s} {time.perf_counter() - t0:6.1f} s  (device: {device_name})", flush=True)
    except Exception as err:  # every later step needs these inputs
        print(f"FAIL  {'prepare':16s} {time.perf_counter() - t0:6.1f} s  {type(err).__name__}: {err}", flush=True)
        return 1
    for step in steps:
        if args.dry_run:
            t0 = time.perf_counter()
            try:
                dry_check(step, cuda)
                why = None
            except (Exception, SystemExit) as err:
                why = f"{type(err).__name__}: {err}"
            seconds, tail = time.perf_counter() - t0, ""
        else:
            why, seconds, tail = run_step(step, logs)
        if why is None:
            print(f"PASS  {step.name:16s} {seconds:6.1f} s", flush=True)
        else:
            failed.append(step.name)
            detail = "" if args.dry_run else f"; last line: {tail}; log: {logs / (step.name + '.log')}"
            print(f"FAIL  {step.name:16s} {seconds:6.1f} s  {why}{detail}", flush=True)
    total = time.perf_counter() - start
    if not args.keep_models:
        for folder in ["policy", "prm", *(s.name for s in steps)]:
            shutil.rmtree(work / folder, ignore_errors=True)
    print(f"{len(steps) + 2 - len(failed)}/{len(steps) + 2} passed in {total / 60:.1f} min" + (
        f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
