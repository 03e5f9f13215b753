"""GPU smoke check: the main job, the harness, every extension and the GPU config, a few steps each on one CUDA GPU.

    make gpu-check                              # = python scripts/gpu_check.py
    python scripts/gpu_check.py --list          # the steps, what each needs and its time on an H100
    python scripts/gpu_check.py --only ext_sampler,gpu_config   # named steps (+ what they need), in plan order
    python scripts/gpu_check.py --budget 300    # steps whose H100 time would end past 300 s are skipped, not started
    python scripts/gpu_check.py --dry-run       # any machine: every step's command parses, its inputs resolve
    python scripts/gpu_check.py --rehearse-on-cpu   # every step run for real on the CPU with tiny stand-ins

One line per step, `PASS`, `FAIL` (with the last line the step printed and its log file) or `SKIP` (over the
budget), then a summary; ``--json PATH`` also writes every step's outcome there, rewritten after each step (a run cut
short keeps the steps it finished). The exit code is 1 when a step failed. Time: about 10 minutes on one H100 for
every step (2026-11-24: 7.6 min without ext_sampler; 2026-11-28: prepare and five steps in 229 s), more than one
10-minute call with a start-up holds: run named steps (``--only``) or give a ``--budget`` (benchmarks/README.md,
"GPU checks in a 15-minute budget"; scripts/gpu_session.py plans a whole GPU session). On a machine without CUDA it
says that it needs a GPU, reports every selected step as "skipped (no CUDA)" and exits 0. Nothing is downloaded: the
machine may have no hub access.

Steps (each a fresh process, as a user would run it; logs in --workdir/logs/ or --logs):
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


#: Seconds each step took on one H100 (the longer of 2026-11-24 and 2026-11-28; ext_sampler never ran there yet: the
#: process step's time plus the decode step's compilation, 55 s in gpu_step's sampler warm-up of 2026-11-28). What
#: ``--budget`` plans with and ``--list`` prints.
H100_SECONDS = {
    "packages": 0, "prepare": 35, "main_job": 37, "harness": 48, "ext_process": 42, "ext_process_prm": 38,
    "ext_skip": 39, "ext_refill": 49, "ext_adaptive_kl": 34, "ext_sampler": 120, "gpu_config": 168,
}  # fmt: skip
#: The steps whose output a step reads: ``--only`` adds them.
NEEDS = {"harness": ("main_job",)}
#: Steps that are not commands: the package check (always run: it costs nothing) and the inputs of ext_* / gpu_config.
SETUP_STEPS = ("packages", "prepare")
DESCRIPTIONS = {
    "packages": "every package the steps import is installed, in pyproject.toml's range (always run)",
    "prepare": "the 1.5B-shape random policy, a step-tag PRM and 64 GSM8K-format rows (for ext_* and gpu_config)",
    "main_job": "configs/qlora.yaml on CUDA for 5 steps (the embedded model, 4-bit + LoRA); the adapter saved",
    "harness": "evals/passk_majk.py on main_job's adapter (40 problems x 8 samples); needs main_job",
    "ext_process": "process advantages (configs/process.yaml), 2 steps on the 1.5B-shape QLoRA policy",
    "ext_process_prm": "the same with a 4-bit step-tag process reward model",
    "ext_skip": "zero-std groups skipped (configs/default.yaml + --zero_std_groups skip)",
    "ext_refill": "zero-std groups refilled (configs/refill.yaml)",
    "ext_adaptive_kl": "adaptive KL coefficient (configs/adaptive_kl.yaml)",
    "ext_sampler": "process advantages on completions drawn by grpo-ext's sampler (decode step compiled on CUDA)",
    "gpu_config": f"{GPU_CONFIG} as written (8 x 16 completions of up to 512 tokens), 2 steps",
}


@dataclass
class Step:
    name: str
    argv: list[str]  # after the interpreter
    timeout: int  # seconds
    output: str | None = None  # a training output folder whose run status must say complete
    expect_files: list[str] = field(default_factory=list)  # files the step must leave behind

    def kind(self) -> str:
        return {"scripts/train.py": "train", "evals/passk_majk.py": "harness"}.get(self.argv[0], "other")

    def uses_prepared(self) -> bool:
        """Whether the step reads what ``prepare`` builds (the policy, the PRM, the GSM8K rows)."""
        return self.name.startswith("ext_") or self.name == "gpu_config"


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
                timeout=300 if name == "ext_sampler" else 180, output=str(work / name),  # the sampler compiles
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
        status_file = ROOT / step.output / "grpo_ext_run.json"  # the steps ran in ROOT: a relative path is ROOT's
        status = json.loads(status_file.read_text()).get("status") if status_file.is_file() else None
        if status != "complete":
            return f"run status {status!r} in {status_file}, expected 'complete'"
        why = check_training_log(ROOT / step.output / "trainer_state.json")
        if why is not None:
            return why
    folder = ROOT / (step.output or step.argv[step.argv.index("--out") + 1])
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


def step_names(steps: list[Step]) -> list[str]:
    return [*SETUP_STEPS, *(s.name for s in steps)]


def select(only: str | None, steps: list[Step]) -> tuple[list[str], list[str]]:
    """(the names to run, in plan order, notes on what was added) for ``--only`` (every step when None). Raises
    ValueError naming the valid steps for an unknown name. ``packages`` always runs; ``prepare`` runs when a selected
    step reads what it builds (or when named); a step's :data:`NEEDS` are added."""
    valid = step_names(steps)
    if only is None:
        return valid, []
    asked = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in asked if name not in valid]
    if unknown or not asked:
        raise ValueError(f"unknown step(s) {unknown or [only]}; the steps are: {', '.join(valid)}")
    chosen, notes = set(asked) | {"packages"}, []
    for name in asked:
        for need in NEEDS.get(name, ()):
            if need not in chosen:
                chosen.add(need)
                notes.append(f"+ {need} ({name} reads its output)")
    if "prepare" not in chosen and any(s.uses_prepared() for s in steps if s.name in chosen):
        chosen.add("prepare")
        notes.append("+ prepare (the policy, PRM and data of the ext_* / gpu_config steps)")
    return [name for name in valid if name in chosen], notes


def list_steps(steps: list[Step]) -> str:
    rows = [f"{'step':16s} {'H100 s':>6s}  what"]
    rows += [f"{name:16s} {H100_SECONDS.get(name, 0):6d}  {DESCRIPTIONS.get(name, '')}" for name in step_names(steps)]
    total = sum(H100_SECONDS.get(name, 0) for name in step_names(steps))
    rows.append(f"{'all':16s} {total:6d}  (H100: the longer of 2026-11-24 and 2026-11-28; ext_sampler estimated)")
    return "\n".join(rows)


def as_argument(path: Path) -> Path:
    """``path`` as the steps' commands name it: relative to the repository when it lies inside it and this process
    runs there (the steps run in ROOT; their logs then name no folder of the machine), else absolute."""
    path = path.resolve()
    if Path.cwd().resolve() == ROOT and path.is_relative_to(ROOT):
        return path.relative_to(ROOT)
    return path


class Record:
    """The run's outcome per step, written to ``--json`` (when given) after every step."""

    def __init__(self, path: str | None, mode: str, names: list[str], budget: float | None, logs: Path):
        self.path = Path(path) if path else None
        self.data = {"mode": mode, "selected": names, "budget_s": budget, "logs": str(logs), "device": None,
                     "steps": {}, "finished": False}  # fmt: skip
        self.write()

    def add(self, name: str, status: str, seconds: float, why: str | None = None, **extra) -> None:
        entry = {"status": status, "seconds": round(seconds, 1), "h100_seconds": H100_SECONDS.get(name)}
        self.data["steps"][name] = entry | ({"why": why} if why else {}) | extra
        self.write()

    def finish(self, total: float) -> None:
        steps = self.data["steps"]
        self.data |= {
            "finished": True,
            "total_seconds": round(total, 1),
            "passed": [n for n, e in steps.items() if e["status"] == "pass"],
            "failed": [n for n, e in steps.items() if e["status"] == "fail"],
            "skipped": [n for n, e in steps.items() if e["status"] == "skipped"],
        }
        self.write()

    def write(self) -> None:
        if self.path is not None:
            from grpo_ext.io import atomic_write_json

            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, self.data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="check every step's command and inputs, run nothing")
    mode.add_argument("--rehearse-on-cpu", action="store_true", help="run every step on the CPU with tiny stand-ins")
    mode.add_argument("--list", action="store_true", help="print the steps with their H100 times and exit")
    parser.add_argument("--only", help="comma-separated steps to run (see --list); what they need is added")
    parser.add_argument(
        "--budget", type=float, help="seconds: a step whose H100 time would end past it is skipped, not started"
    )
    parser.add_argument("--json", help="write every step's outcome to this file (rewritten after each step)")
    parser.add_argument("--workdir", default=str(ROOT / "outputs" / "gpu_check"), help="emptied first; logs kept")
    parser.add_argument("--logs", help="where the steps' logs go (default: <workdir>/logs)")
    parser.add_argument("--keep-models", action="store_true", help="keep the built models and the runs' weights")
    parser.add_argument(
        "--reuse-prepared",
        action="store_true",
        help="keep the workdir; reuse what a run with --keep-models prepared there (prepare then costs 0 s)",
    )
    args = parser.parse_args(argv)

    work = Path(args.workdir).resolve()
    work_arg = as_argument(work)
    steps = plan(work_arg, cpu=args.rehearse_on_cpu)  # a dry run checks the GPU commands as they are written
    if args.list:
        print(list_steps(steps))
        return 0
    try:
        names, notes = select(args.only, steps)
    except ValueError as err:
        parser.error(f"--only: {err}")
    steps = [s for s in steps if s.name in names]

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not (args.dry_run or args.rehearse_on_cpu):
        print("gpu-check needs a CUDA GPU: torch.cuda.is_available() is False here. Nothing was run.")
        for name in names:
            print(f"skipped (no CUDA)  {name}")
        print("(python scripts/gpu_check.py --dry-run checks that every step's command parses, on any machine)")
        return 0

    prepared = all((work / name).exists() for name in ("policy/config.json", "prm", "gsm8k.jsonl"))
    reuse = args.reuse_prepared and prepared
    if reuse:  # only the selected steps' own folders are cleared
        for step in steps:
            shutil.rmtree(work / step.name, ignore_errors=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    logs = Path(args.logs).resolve() if args.logs else work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    small = args.dry_run or args.rehearse_on_cpu
    what = "dry run" if args.dry_run else ("CPU rehearsal" if args.rehearse_on_cpu else "CUDA")
    record = Record(args.json, what, names, args.budget, as_argument(logs))
    print(f"gpu-check ({what}); logs in {as_argument(logs)}" + (f"; steps: {', '.join(names)}" if args.only else ""),
          flush=True)  # fmt: skip
    for note in notes:
        print(f"      {note}", flush=True)
    failed, skipped, start = [], [], time.perf_counter()

    def over_budget(name: str) -> str | None:
        if args.budget is None:
            return None
        left = args.budget - (time.perf_counter() - start)
        need = H100_SECONDS.get(name, 0)
        return None if need <= left else f"over --budget: {need} s on an H100, {max(left, 0):.0f} s left"

    def skip(name: str, why: str) -> None:
        skipped.append(name)
        record.add(name, "skipped", 0.0, why)
        print(f"SKIP  {name:16s} {0:6.1f} s  {why}", flush=True)

    why, versions = check_packages()  # reported, not fatal: the steps that need a missing package fail by name
    if why is None:
        record.add("packages", "pass", 0.0, versions=versions)
        print(f"PASS  {'packages':16s} {0:6.1f} s  {versions}", flush=True)
    else:
        failed.append("packages")
        record.add("packages", "fail", 0.0, why, versions=versions)
        print(f"FAIL  {'packages':16s} {0:6.1f} s  {why} (carry the wheels: see scripts/gpu_check.py)", flush=True)
    if "prepare" in names:
        t0 = time.perf_counter()
        if reuse:
            record.add("prepare", "pass", 0.0, reused=True)
            print(f"PASS  {'prepare':16s} {0:6.1f} s  (reused: {as_argument(work)})", flush=True)
        elif (why := over_budget("prepare")) is not None:
            skip("prepare", why)
        else:
            try:
                device_name = prepare(work, "tiny" if small else "1.5b", "cpu" if small else "cuda", in_process=small)
                record.data["device"] = device_name
                record.add("prepare", "pass", time.perf_counter() - t0)
                print(f"PASS  {'prepare':16s} {time.perf_counter() - t0:6.1f} s  (device: {device_name})", flush=True)
            except Exception as err:  # every later step that reads these inputs fails without them
                why = f"{type(err).__name__}: {err}"
                failed.append("prepare")
                record.add("prepare", "fail", time.perf_counter() - t0, why)
                print(f"FAIL  {'prepare':16s} {time.perf_counter() - t0:6.1f} s  {why}", flush=True)
    for step in steps:
        if step.uses_prepared() and "prepare" in skipped:
            skip(step.name, "needs prepare, which was skipped")
            continue
        if step.uses_prepared() and "prepare" in failed:
            failed.append(step.name)
            record.add(step.name, "fail", 0.0, "needs prepare, which failed")
            print(f"FAIL  {step.name:16s} {0:6.1f} s  needs prepare, which failed", flush=True)
            continue
        if (why := over_budget(step.name)) is not None:
            skip(step.name, why)
            continue
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
        log = as_argument(logs / f"{step.name}.log")
        extra = {} if args.dry_run else {"last_line": tail, "log": str(log)}
        if why is None:
            record.add(step.name, "pass", seconds, **extra)
            print(f"PASS  {step.name:16s} {seconds:6.1f} s", flush=True)
        else:
            failed.append(step.name)
            record.add(step.name, "fail", seconds, why, **extra)
            detail = "" if args.dry_run else f"; last line: {tail}; log: {log}"
            print(f"FAIL  {step.name:16s} {seconds:6.1f} s  {why}{detail}", flush=True)
    total = time.perf_counter() - start
    if not args.keep_models:
        for folder in ["policy", "prm", *(s.name for s in steps)]:
            shutil.rmtree(work / folder, ignore_errors=True)
    record.finish(total)
    ran = len(names) - len(skipped)
    print(f"{ran - len(failed)}/{ran} passed in {total / 60:.1f} min" + (
        f"; failed: {', '.join(failed)}" if failed else "") + (
        f"; skipped: {', '.join(skipped)}" if skipped else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
