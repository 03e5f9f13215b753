"""One GPU session's checks and benchmarks (issue 49.6), as named parts within a device-time budget, JSON under --out.

A session lent a GPU has 15 minutes of it, start-up and idle included, and one command runs at most 10 minutes. This
runs the parts in order, starts a part only when its H100 time (measured 2026-11-24 / 2026-11-28, or estimated)
fits in what is left of ``--budget``, stops a part that runs past ``--hard-limit`` (so that this script always ends,
and writes what it has, before the call's own limit), and says which parts are left for a next call.

    python scripts/gpu_session.py --list                       # the parts, their H100 times and commands
    python scripts/gpu_session.py --dry-run                    # the commands of the default parts, nothing run
    python scripts/gpu_session.py --rehearse-on-cpu --out /tmp/gpu_session   # every part on the CPU, tiny shapes
    # on the GPU machine (wheels carried in .whl, see benchmarks/README.md "GPU checks in a 15-minute budget"):
    python3 scripts/gpu_session.py --out $OUT --wheels .whl    # the default parts, --budget 510 s
    python3 scripts/gpu_session.py --out $OUT --wheels .whl --parts lora_step,gpu_config   # what a first call left

Parts (default: every part of issue 49.6, most wanted first; ``--parts`` names others or another order):
- setup (always first): the carried wheels installed (``--wheels``: pip ``--target`` a folder put first on every
  part's PYTHONPATH) when a needed package is missing or out of pyproject.toml's range; package versions and device.
- qlora_step: ``benchmarks.gpu_step --shapes 1.5b --kinds qlora --variants off,sampler``: the sampler against TRL's
  generate on the 1.5B-shape QLoRA policy (issue 29's >= 2x, peak memory within 10%).
- ext_sampler, ext_adaptive_kl, gpu_config (and any other step of scripts/gpu_check.py): the smoke check's steps,
  consecutive ones in one ``gpu_check.py --only`` call, the 1.5B policy prepared once (``--reuse-prepared``).
- lora_step: ``benchmarks.gpu_step --shapes 1.5b --kinds lora --variants static,sampler``: the sampler against TRL's
  generate with a static cache on the bf16 + LoRA policy.
- tests (not a default): the device-strict and sampler-rollout tests with CUDA visible (22 on 2026-11-28, 41 s).

Under ``--out`` (at most 8 files come back from a device call; this writes at most 6): ``session.json`` (every part's
status, seconds, H100 estimate, command, and ``left``: the parts still to run; rewritten after every part),
``qlora_step.json`` / ``lora_step.json`` (gpu_step's results), ``gpu_check.json`` (the smoke check's steps),
``tests.log``, and ``logs.tar.gz`` (every part's log and every smoke-check step's log). Every file written there is
passed through :func:`benchmarks._gpu.portable_text` (no folder of the machine in it), ready to commit under
``benchmarks/results/gpu_<date>/``.

--rehearse-on-cpu runs the same parts on the CPU (gpu_step at the tiny shape with small batches, gpu_check
--rehearse-on-cpu; no budget unless one is given): what a GPU session will run starts and writes its files.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runs from a checkout without `pip install -e .` (a bare GPU machine)
    sys.path.insert(0, str(ROOT))

from benchmarks._gpu import portable_text  # noqa: E402  (imports no torch: this process stays light)

try:
    from scripts import gpu_check
except ImportError:  # another installed package is called `scripts`: load ours from its file
    import importlib.util

    _spec = importlib.util.spec_from_file_location("grpo_ext_gpu_check", ROOT / "scripts" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(gpu_check)

#: Where carried wheels are installed (``pip install --target``): first on every part's PYTHONPATH.
SITE = Path("/tmp/grpo_ext_site")
SCRATCH = Path("outputs") / "gpu_session"  # relative to ROOT (git ignores outputs/); models and logs before --out
DEFAULT_BUDGET, DEFAULT_HARD_LIMIT = 510.0, 560.0
clock = time.perf_counter  # what the budget is counted with (a test's clock can stand in)


@dataclass(frozen=True)
class Part:
    name: str
    h100_seconds: int  # what --budget plans with
    what: str
    gpu_step: tuple[str, ...] = ()  # gpu_step's arguments (a gpu_step part)


GPU_STEP_PARTS = {
    "qlora_step": Part(
        "qlora_step",
        200,
        "1.5B QLoRA: sampler vs TRL generate (issue 29's >= 2x); estimated: build 25 s, 2 trainers loaded and warmed "
        "up 19 s + ~70 s (the sampler compiles), 3 reps x (13.6 + ~4 s)",
        ("--shapes", "1.5b", "--kinds", "qlora", "--variants", "off,sampler"),
    ),
    "lora_step": Part(
        "lora_step",
        180,
        "1.5B bf16 + LoRA: sampler vs TRL generate(cache_implementation=static); estimated: build 25 s, warm-ups "
        "11 s + ~70 s, 3 reps x (10.3 + ~3 s)",
        ("--shapes", "1.5b", "--kinds", "lora", "--variants", "static,sampler"),
    ),
}
OTHER_PARTS = {
    "setup": Part("setup", 30, "carried wheels installed when needed (estimated), versions, device facts"),
    "tests": Part("tests", 60, "tests/test_device_strict.py + tests/test_sampler_rollouts.py with CUDA visible"),
}
TESTS = ("tests/test_device_strict.py", "tests/test_sampler_rollouts.py")
#: the smoke check's steps that can be parts (packages runs in setup; prepare comes with the steps that need it)
CHECK_STEPS = [s.name for s in gpu_check.plan(Path("w"), cpu=False)]
DEFAULT_PARTS = ("setup", "qlora_step", "ext_sampler", "lora_step", "ext_adaptive_kl", "gpu_config")


def all_parts() -> dict[str, Part]:
    checks = {
        name: Part(name, gpu_check.H100_SECONDS[name], f"gpu_check: {gpu_check.DESCRIPTIONS[name]}")
        for name in CHECK_STEPS
    }
    return {"setup": OTHER_PARTS["setup"], **GPU_STEP_PARTS, **checks, "tests": OTHER_PARTS["tests"]}


def parse_parts(text: str | None) -> list[str]:
    """The parts to run, in the order given, setup first (always); ValueError naming the parts for an unknown one."""
    if text is None:
        return list(DEFAULT_PARTS)
    valid = all_parts()
    asked = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in asked if name not in valid]
    if unknown or not asked:
        raise ValueError(f"unknown part(s) {unknown or [text]}; the parts are: {', '.join(valid)}")
    return ["setup", *dict.fromkeys(name for name in asked if name != "setup")]


def groups(parts: list[str]) -> list[list[str]]:
    """Consecutive smoke-check steps run as one gpu_check call; every other part on its own."""
    out: list[list[str]] = []
    for name in parts:
        if name in CHECK_STEPS and out and out[-1][0] in CHECK_STEPS:
            out[-1].append(name)
        else:
            out.append([name])
    return out


def command(group: list[str], cpu: bool, reps: int, budget_left: float | None, scratch: Path = SCRATCH) -> list[str]:
    """The argv (after the interpreter) of a gpu_step, gpu_check or tests part, run in ROOT (``scratch``: the folder
    of the models, results and logs before they are copied to --out, relative to ROOT or absolute)."""
    name = group[0]
    if name in GPU_STEP_PARTS:
        argv = ["-m", "benchmarks.gpu_step", *GPU_STEP_PARTS[name].gpu_step, "--reps", str(reps)]
        if cpu:  # the tiny shape and small batches: the code paths, not the costs
            argv[argv.index("1.5b")] = "tiny"
            argv += ["--device", "cpu", "--batch", "8", "--group", "4", "--completion", "6"]
        return argv + ["--results-dir", str(scratch / name)]
    if name in CHECK_STEPS:
        argv = ["scripts/gpu_check.py", "--only", ",".join(group), "--workdir", str(scratch / "gpu_check"),
                "--logs", str(scratch / "logs" / "gpu_check"), "--json", str(scratch / f"gpu_check_{name}.json"),
                "--keep-models", "--reuse-prepared"]  # fmt: skip
        if budget_left is not None:
            argv += ["--budget", f"{max(budget_left, 0):.0f}"]
        return argv + (["--rehearse-on-cpu"] if cpu else [])
    if name == "tests":
        return ["-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    raise ValueError(f"no command for part {name!r}")


def group_estimate(group: list[str], prepared: bool) -> int:
    """H100 seconds the group needs to do anything: a gpu_step or tests part its own time; a gpu_check call its
    shortest step's (+ prepare's when not yet prepared), since gpu_check skips the steps that do not fit itself."""
    parts = all_parts()
    if group[0] not in CHECK_STEPS:
        return parts[group[0]].h100_seconds
    return min(parts[n].h100_seconds for n in group) + (0 if prepared else gpu_check.H100_SECONDS["prepare"])


def catalogue(names: list[str], cpu: bool, reps: int, budget: float | None) -> str:
    """The parts with their H100 times and commands (``*``: a default part)."""
    parts, lines = all_parts(), []
    for name in names:
        lines.append(
            f"{'*' if name in DEFAULT_PARTS else ' '} {name:16s} {parts[name].h100_seconds:4d} s  {parts[name].what}"
        )
        if name != "setup":
            lines.append(f"  {'':16s}         $ python {shlex.join(command([name], cpu, reps, budget))}")
    total = sum(parts[n].h100_seconds for n in DEFAULT_PARTS) + gpu_check.H100_SECONDS["prepare"]
    lines.append(f"(* the default parts: {total} s on an H100 with the smoke check's prepare; --budget {budget} s)")
    return "\n".join(lines)


# ---- running -----------------------------------------------------------------------------------------------------


def read_log(path: Path) -> str:
    """A log as written (progress bars' carriage returns kept, undecodable bytes replaced)."""
    with open(path, newline="", errors="replace") as f:
        return f.read()


def child_env() -> dict:
    env = dict(os.environ)
    paths = [str(SITE)] if SITE.is_dir() else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_logged(argv: list[str], log: Path, timeout: float) -> tuple[int | None, float]:
    """Run ``python argv`` in ROOT, stdout and stderr to ``log``; (exit code or None when stopped at ``timeout``,
    seconds). A part stopped at its limit is ended with its children (its own process group)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as f:
        f.write("$ python " + shlex.join(argv) + "\n")
        f.flush()
        proc = subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=child_env(), stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
    return rc, time.perf_counter() - start


def setup(wheels: str | None, log: Path) -> dict:
    """Install the carried wheels when a needed package is missing or out of range; versions and device facts."""
    lines = []
    if SITE.is_dir() and str(SITE) not in sys.path:
        sys.path.insert(0, str(SITE))  # a warm machine: an earlier call installed them
    why, versions = gpu_check.check_packages()
    installed = False
    if why is not None and wheels:
        found = sorted(Path(wheels).glob("*.whl"))
        lines.append(f"packages: {why}; installing {len(found)} wheels from {wheels} into {SITE}")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
             "--no-cache-dir", "--upgrade", "--target", str(SITE), *map(str, found)],
            capture_output=True, text=True,
        )  # fmt: skip
        lines += [proc.stdout, proc.stderr]
        installed = proc.returncode == 0
        if str(SITE) not in sys.path:
            sys.path.insert(0, str(SITE))
        import importlib

        importlib.invalidate_caches()
        why, versions = gpu_check.check_packages()
    facts_code = (
        "import json, torch; from benchmarks._gpu import device_facts; "
        "print(json.dumps(device_facts('cuda' if torch.cuda.is_available() else 'cpu')))"
    )
    proc = subprocess.run([sys.executable, "-c", facts_code], cwd=ROOT, env=child_env(), capture_output=True, text=True)
    lines += [proc.stdout, proc.stderr]
    try:
        device = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        device = {"error": gpu_check.last_line(proc.stderr)}
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\n".join(x for x in lines if x))
    return {"packages_problem": why, "versions": versions, "wheels_installed": installed, "device": device}


class Session:
    """What is written under --out, rewritten after every part."""

    def __init__(self, out: Path, args, parts: list[str]):
        self.out, self.parts = out, parts
        self.scratch = ROOT / args.scratch  # ROOT / an absolute path is that path
        self.data = {
            "mode": "CPU rehearsal" if args.rehearse_on_cpu else "CUDA",
            "budget_s": args.budget,
            "hard_limit_s": args.hard_limit,
            "parts_asked": parts,
            "parts": {},
            "left": [],
            "finished": False,
        }
        self.checks: dict = {}

    def add(self, name: str, status: str, seconds: float, **extra) -> None:
        estimate = all_parts()[name].h100_seconds
        self.data["parts"][name] = {"status": status, "seconds": round(seconds, 1), "h100_seconds": estimate} | extra

    def write(self, finished: bool = False) -> None:
        done = {n for n, e in self.data["parts"].items() if e["status"] in ("pass", "fail")}
        self.data["left"] = [n for n in self.parts if n not in done and n != "setup"]
        self.data["finished"] = finished
        self.data.pop("next", None)
        if self.data["left"]:
            self.data["next"] = (
                f"python3 scripts/gpu_session.py --out $OUT --wheels .whl --parts {','.join(self.data['left'])}"
            )
        self.out.mkdir(parents=True, exist_ok=True)
        self.put("session.json", json.dumps(self.data, indent=2) + "\n")
        if self.checks:
            self.put("gpu_check.json", json.dumps(self.checks, indent=2) + "\n")
        self.bundle_logs()

    def say(self, name: str, detail: str = "") -> None:
        entry = self.data["parts"][name]
        label = {"skipped": "SKIP"}.get(entry["status"], entry["status"].upper())
        print(f"{label:5s} {name:16s} {entry['seconds']:6.1f} s  {detail}".rstrip(), flush=True)

    def put(self, name: str, text: str) -> None:
        tmp = self.out / f".{name}.tmp"
        tmp.write_text(portable_text(text, ROOT), newline="")
        tmp.replace(self.out / name)

    def bundle_logs(self) -> None:
        logs = self.scratch / "logs"
        if not logs.is_dir():
            return
        tmp = self.out / ".logs.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for path in sorted(logs.rglob("*.log")):
                data = portable_text(read_log(path), ROOT).encode()
                info = tarfile.TarInfo(str(Path("logs") / path.relative_to(logs)))
                info.size, info.mtime = len(data), int(path.stat().st_mtime)
                tar.addfile(info, io.BytesIO(data))
        tmp.replace(self.out / "logs.tar.gz")


def run_checks(session: Session, group: list[str], argv: list[str], timeout: float) -> None:
    """A gpu_check call for consecutive smoke-check steps; each step's outcome recorded as a part."""
    name = group[0]
    log = session.scratch / "logs" / f"gpu_check_{name}.log"
    rc, _ = run_logged(argv, log, timeout)
    tail = gpu_check.last_line(read_log(log))
    record_path = session.scratch / f"gpu_check_{name}.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"steps": {}}
    record["command"] = "python " + shlex.join(argv)
    session.checks.setdefault("runs", []).append(record)
    session.checks.setdefault("steps", {}).update(record["steps"])
    for step in group:
        entry = record["steps"].get(step)
        if entry is None:
            why = "stopped at --hard-limit" if rc is None else f"not run (gpu_check exit code {rc}): {tail}"
            session.add(step, "cut" if rc is None else "fail", 0.0, why=why)
        else:
            kept = {k: v for k, v in entry.items() if k in ("why", "last_line")}
            session.add(step, entry["status"], entry["seconds"], **kept)
        session.say(step)


def run_part(session: Session, name: str, argv: list[str], timeout: float) -> None:
    """A gpu_step or tests part: its log, its exit code, its result copied under --out."""
    log = session.scratch / "logs" / f"{name}.log"
    rc, seconds = run_logged(argv, log, timeout)
    tail = gpu_check.last_line(read_log(log))
    ok, extra = rc == 0, {"command": "python " + shlex.join(argv), "exit_code": rc, "last_line": tail}
    if name in GPU_STEP_PARTS:
        results = sorted((session.scratch / name).glob("gpu_step_*.json"))
        ok = ok and bool(results)
        if results:
            result = json.loads(results[-1].read_text())
            errors = {k: r.get("errors") or r.get("error") for k, r in result.get("kinds", {}).items()}
            ok = ok and not any(errors.values())
            session.put(f"{name}.json", json.dumps(result, indent=2) + "\n")
            extra |= {"result": f"{name}.json", "sampler_vs": result.get("sampler_vs"), "errors": errors}
    if name == "tests":
        session.put("tests.log", read_log(log))
    session.add(name, "cut" if rc is None else ("pass" if ok else "fail"), seconds, **extra)
    session.say(name, tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print the parts, their H100 times and commands")
    mode.add_argument("--dry-run", action="store_true", help="print the commands of the parts, run nothing")
    mode.add_argument("--rehearse-on-cpu", action="store_true", help="run the parts on the CPU with tiny stand-ins")
    parser.add_argument("--parts", help=f"comma-separated, in order (default {','.join(DEFAULT_PARTS)}; see --list)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="where the JSON and logs go (default $OUT)")
    parser.add_argument("--wheels", help="a folder of carried wheels, installed when a needed package is missing")
    parser.add_argument("--budget", type=float, help=f"seconds: start a part only if its H100 time fits (CUDA: "
                        f"default {DEFAULT_BUDGET:.0f}; CPU rehearsal: none)")  # fmt: skip
    parser.add_argument("--hard-limit", type=float, help=f"seconds: stop a part still running then (CUDA: default "
                        f"{DEFAULT_HARD_LIMIT:.0f}; keep it under the call's timeout_s)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions of the gpu_step parts")
    parser.add_argument("--scratch", default=str(SCRATCH), help="models, results and logs before --out (in ROOT)")
    args = parser.parse_args(argv)
    try:
        parts = parse_parts(args.parts)
    except ValueError as err:
        parser.error(f"--parts: {err}")
    cpu = args.rehearse_on_cpu
    if not cpu:
        args.budget = DEFAULT_BUDGET if args.budget is None else args.budget
        args.hard_limit = DEFAULT_HARD_LIMIT if args.hard_limit is None else args.hard_limit
    if args.list or args.dry_run:
        print(catalogue(list(all_parts()) if args.list else parts, cpu, args.reps, args.budget))
        return 0
    if not args.out:
        parser.error("--out (or $OUT) is needed: where the JSON and logs go")

    session = Session(Path(args.out), args, parts)
    scratch = session.scratch
    for stale in [
        *scratch.glob("logs/**/*.log"),
        *scratch.glob("gpu_check_*.json"),
        *scratch.glob("*/gpu_step_*.json"),
    ]:
        stale.unlink()  # a part that fails must not find an earlier call's result
    start = clock()
    print(f"gpu-session ({session.data['mode']}): parts {', '.join(parts)}; budget {args.budget} s, hard limit "
          f"{args.hard_limit} s; out {args.out}", flush=True)  # fmt: skip

    facts = setup(args.wheels, scratch / "logs" / "setup.log")
    session.data |= {"device": facts["device"], "versions": facts["versions"]}
    extra = {k: v for k, v in facts.items() if k != "device"}
    session.add("setup", "pass" if facts["packages_problem"] is None else "fail", clock() - start, **extra)
    session.say("setup", f"device {facts['device'].get('name', facts['device'])}; "
                f"{facts['packages_problem'] or 'packages in range'}")  # fmt: skip
    session.write()
    prepared = False
    for group in groups(parts[1:]):
        elapsed = clock() - start
        left = None if args.budget is None else args.budget - elapsed
        need = group_estimate(group, prepared)
        timeout = 10**6 if args.hard_limit is None else args.hard_limit - elapsed
        argv = command(group, cpu, args.reps, left, Path(args.scratch))
        if left is not None and need > left:
            for name in group:
                session.add(name, "skipped", 0.0, why=f"over --budget: {need} s on an H100, {max(left, 0):.0f} s left")
                session.say(name, session.data["parts"][name]["why"])
        elif group[0] in CHECK_STEPS:
            run_checks(session, group, argv, timeout)
            prepared = True
        else:
            run_part(session, group[0], argv, timeout)
        session.write()
    session.data["total_seconds"] = round(clock() - start, 1)
    session.write(finished=True)
    written = sorted(p.name for p in session.out.iterdir() if not p.name.startswith("."))
    print(f"done in {session.data['total_seconds'] / 60:.1f} min; wrote {', '.join(written)} in {args.out}")
    if session.data["left"]:
        print(f"left for a next call: {', '.join(session.data['left'])}\n$ {session.data['next']}")
    return 1 if any(e["status"] == "fail" for e in session.data["parts"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
