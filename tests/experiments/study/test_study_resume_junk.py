"""A resumed study reuses only what is its own, read whole (issue 52, the last adversarial pass). Each case goes through
the study's entry points (`runs.run_jobs`, as every stage runs its jobs; `scripts/run_methods.py --report-only`) and
failed before its fix:

- an arm's evaluation file copied from another run folder of the same study (another seed or setting: the same
  settings and run name; another arm: another run name) was reused as this run's score;
- a `test.json` / `validation.json`, `study_run.json` or `training_cost.json` that is JSON but not an object (`[]`,
  `3`), or a cost record that is not JSON, was a traceback, not one line naming the file;
- a run recorded `failed` (it saved weights and its cost, then failed) was taken as trained and scored;
- a study's records named the embedded base by the clone's folder and a real model by the user's cache folder: the
  same study resumed from another clone was refused;
- `--report-only` rendered picks edited by hand (the search record's picks against what its validation records pick)
  and runs of another base (their `study_run.json`), checking neither.

Runs and the model are faked (`run_method` leaves what a finished runner leaves; the harness returns what it records
of the model it scored)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import grpo_ext.experiments.study.runs as runs
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.provenance import RUN_RECORD
from grpo_ext.methods.cost import COST_FILE
from tests.experiments.study.test_study_resume_provenance import one_line  # `call()` ends as a user error
from tests.experiments.study.test_study_resume_provenance import options as quick_options

ROOT = Path(__file__).resolve().parents[3]
STUDY = load_study(ROOT / "configs" / "compare.yaml")


def options(base: str = "embedded") -> StudyOptions:
    return quick_options(True, base)  # the --quick study's options, as the resume-provenance tests build them


def finish(folder: Path, status: str = "complete") -> None:
    """What a method runner leaves in a finished run's folder: weights, the cost record, the run's record."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / COST_FILE).write_text(json.dumps({"method": "x", "details": {}}))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "grpo_ext_run.json").write_text(json.dumps({"status": status, "global_step": 2}))


@pytest.fixture
def faked(monkeypatch):
    """`run_method` and the harness faked; returns the runs trained and the models scored, in order."""
    calls = {"trained": [], "scored": []}

    def run_method(argv):
        folder = Path(argv[argv.index("--output_dir") + 1])
        calls["trained"].append(folder)
        finish(folder)

    def evaluate_model(backend, *args, **kwargs):
        calls["scored"].append(backend)
        return {"model": backend, "pass@k": {"1": 0.5}}  # the harness records the model it loaded as `model`

    calls["run_method"] = run_method
    monkeypatch.setattr("grpo_ext.methods.run_method", run_method)
    monkeypatch.setattr("grpo_ext.evaluation.backends.load_backend", lambda model, *args, **kwargs: model)
    monkeypatch.setattr("grpo_ext.evaluation.harness.evaluate_model", evaluate_model)
    return calls


def arm_job(arm=0, seed=100, evaluation=STUDY.validation) -> runs.Job:
    arm = STUDY.arms[arm]
    return runs.Job(arm, arm.settings(STUDY.learning_rates)[0], seed, evaluation)


# ---- an evaluation is reused only in the folder of the run it scored ------------------------------------------------


@pytest.mark.parametrize("source", ["another seed", "another arm"])
def test_an_evaluation_copied_from_another_run_folder_is_refused(source, tmp_path, faked, capsys):
    this, other = arm_job(seed=101), arm_job(seed=100) if source == "another seed" else arm_job(arm=1, seed=101)
    runs.run_jobs([this, other], tmp_path, STUDY, options(), 1)
    runs.run_jobs([this, other], tmp_path, STUDY, options(), 1)  # its own files: reused, nothing scored again
    assert len(faked["scored"]) == 2
    target = runs.evaluation_file(runs.job_dir(this, tmp_path, STUDY), STUDY.validation)
    shutil.copyfile(runs.evaluation_file(runs.job_dir(other, tmp_path, STUDY), STUDY.validation), target)
    error = one_line(lambda: runs.run_jobs([this], tmp_path, STUDY, options(), 1), capsys)
    assert f"{target}: an evaluation of" in error and "copied from another run's folder" in error
    assert len(faked["scored"]) == 2  # nothing scored over it


# ---- junk records: one line naming the file ------------------------------------------------------------------------


# JSON that is not an object, for each record a resume reads; the cost record not JSON too (a study's own readers
# named the others' junk already, the report's reader of the cost record did not)
JUNK = [(name, text) for name in ("validation.json", RUN_RECORD, COST_FILE) for text in ("[]", "3")]
JUNK.append((COST_FILE, "{junk"))


@pytest.mark.parametrize(("name", "text"), JUNK)
def test_a_junk_record_of_a_finished_run_is_one_line_naming_it(name, text, tmp_path, faked, capsys):
    job = arm_job()
    runs.run_jobs([job], tmp_path, STUDY, options(), 1)
    path = runs.job_dir(job, tmp_path, STUDY) / name
    path.write_text(text)
    error = one_line(lambda: runs.run_jobs([job], tmp_path, STUDY, options(), 1), capsys)
    assert str(path) in error
    assert len(faked["trained"]) == 1 and len(faked["scored"]) == 1  # nothing trained or scored over it


@pytest.mark.parametrize("text", ["[]", "{junk"])
def test_estimate_names_a_junk_cost_record_of_the_study_under_way(text, tmp_path, capsys):
    """--estimate adds what the study in --out has spent, from its runs' cost records (the real study: it has the
    planning rates of an estimate)."""
    from tests.experiments.study.test_study_driver import fresh_driver

    path = tmp_path / "runs" / "sft" / "lr0.001" / "seed0" / COST_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)
    argv = ["--study", str(ROOT / "configs" / "real" / "study.yaml"), "--out", str(tmp_path), "--estimate"]
    assert str(path) in one_line(lambda: fresh_driver().main(argv), capsys)


# ---- a run is finished only when its record says so ----------------------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "running"])
def test_a_run_recorded_unfinished_is_trained_again_not_scored(status, tmp_path, faked, monkeypatch):
    """A run that saved its weights and its cost, then failed (a full disk writing its other records) or was killed,
    is trained again: it was scored as a trained run."""
    job = arm_job()
    folder = runs.job_dir(job, tmp_path, STUDY)
    finished = faked["run_method"]

    def stops_after_saving(argv):
        finish(folder, status)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("grpo_ext.methods.run_method", stops_after_saving)
    with pytest.raises(OSError):
        runs.run_jobs([job], tmp_path, STUDY, options(), 1)
    assert not faked["scored"]
    monkeypatch.setattr("grpo_ext.methods.run_method", finished)
    runs.run_jobs([job], tmp_path, STUDY, options(), 1)
    assert faked["trained"] == [folder] and len(faked["scored"]) == 1  # trained again, then scored
    assert json.loads((folder / "grpo_ext_run.json").read_text())["status"] == "complete"


def test_an_untrained_run_of_before_is_finished_without_a_run_record(tmp_path, faked):
    """The method runners' run without training data (the base saved as its model) wrote no run record before it
    recorded `complete`: its cost record says so, and it is reused as it was."""
    job = arm_job()
    folder = runs.job_dir(job, tmp_path, STUDY)
    finish(folder)
    (folder / "grpo_ext_run.json").unlink()
    (folder / COST_FILE).write_text(json.dumps({"details": {"no_training_data": "no pairs"}}))
    runs.run_jobs([job], tmp_path, STUDY, options(), 1)
    assert not faked["trained"] and len(faked["scored"]) == 1
    (tmp_path / "runs").rename(tmp_path / "old")
    finish(folder)
    (folder / "grpo_ext_run.json").unlink()  # weights and a cost record, no record of its end: not finished
    runs.run_jobs([job], tmp_path, STUDY, options(), 1)
    assert faked["trained"] == [folder]


# ---- records name models as every clone does -----------------------------------------------------------------------


def _set_model(path: Path, model: str) -> None:
    record = json.loads(path.read_text())
    if "argv" in record:
        record["argv"][record["argv"].index("--model_name_or_path") + 1] = model
    else:
        record["study_evaluation"]["settings"]["model"] = model
    path.write_text(json.dumps(record))


def test_records_name_the_base_as_every_clone_does_and_older_records_resume(tmp_path, faked, capsys):
    """The embedded base was recorded as this clone's folder (/work/<clone>/grpo_ext/assets/embedded), a real model as
    the user's cache folder: the same study in another clone, or another user's, was refused as another base. Records
    now name them (`embedded`, the real model's name); older records naming another clone's or user's folder of the
    same model resume; another model is still refused."""
    base, job = runs.Job(None, None, None, STUDY.validation), arm_job()
    runs.run_jobs([base, job], tmp_path, STUDY, options(), 1)
    run_record = runs.job_dir(job, tmp_path, STUDY) / RUN_RECORD
    scored = tmp_path / "base" / "validation.json"
    argv = json.loads(run_record.read_text())["argv"]
    assert argv[argv.index("--model_name_or_path") + 1] == "embedded"
    assert json.loads(scored.read_text())["study_evaluation"]["settings"]["model"] == "embedded"
    for path in (run_record, scored):  # as a sitting in another clone wrote them
        _set_model(path, "/elsewhere/grpo-ext/grpo_ext/assets/embedded")
    runs.run_jobs([base, job], tmp_path, STUDY, options(), 1)
    assert len(faked["trained"]) == 1 and len(faked["scored"]) == 2  # resumed: nothing trained or scored again
    _set_model(scored, "/elsewhere/grpo-ext/outputs/another_base")
    error = one_line(lambda: runs.run_jobs([base], tmp_path, STUDY, options(), 1), capsys)
    assert "scored with another model ('/elsewhere/grpo-ext/outputs/another_base'" in error

    real = tmp_path / "real"  # a real model: its name, whatever cache folder held it
    runs.run_jobs([base], real, STUDY, options("smollm2-135m-instruct"), 1)
    scored = real / "base" / "validation.json"
    assert json.loads(scored.read_text())["study_evaluation"]["settings"]["model"] == "smollm2-135m-instruct"
    _set_model(scored, "/home/someone/.cache/grpo-ext/models/smollm2-135m-instruct")
    runs.run_jobs([base], real, STUDY, options("smollm2-135m-instruct"), 1)
    assert len(faked["scored"]) == 3


def test_a_start_recorded_in_another_clone_is_the_studys_start(tmp_path, monkeypatch):
    """The start's record (start.json) keeps the command that made it, the base resolved: one made in another clone
    is this study's start (it goes on to its run: the adapter is not here), one of another base is refused."""
    import grpo_ext.methods as methods
    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.method_configs import method_config_path
    from grpo_ext.experiments.study.provenance import training_record
    from grpo_ext.experiments.study.start import START_RECORD, Start, build_start, start_argv

    start = Start("sft", 1e-2, 0, {"train_size": 8})
    out = tmp_path / "out"
    argv = start_argv(start, "embedded", STUDY.configs_dir, out / "start" / "adapter", [])
    command = training_record(argv, method_config_path("sft", STUDY.configs_dir))
    assert "embedded" in command["argv"]
    command["argv"][command["argv"].index("embedded")] = "/elsewhere/grpo-ext/grpo_ext/assets/embedded"
    record = {"command": command, "train_prompts": {"offset": 0, "size": 8}, "adapter_sha256": "a" * 64}
    (out / "start").mkdir(parents=True)
    (out / "start" / START_RECORD).write_text(json.dumps({**record, "model_sha256": "b" * 64}))

    class Trains(Exception):
        pass

    def run_method(argv):
        raise Trains

    monkeypatch.setattr(methods, "run_method", run_method)
    with pytest.raises(Trains):
        build_start(start, "embedded", STUDY.configs_dir, out, [])
    command["argv"][command["argv"].index("/elsewhere/grpo-ext/grpo_ext/assets/embedded")] = "/elsewhere/other_base"
    (out / "start" / START_RECORD).write_text(json.dumps({**record, "model_sha256": "b" * 64}))
    with pytest.raises(UserError, match="start.json: the start was made by another command"):
        build_start(start, "embedded", STUDY.configs_dir, out, [])


# ---- --report-only checks what a resumed study checks, and the picks --------------------------------------------


def _real_study_copy(tmp_path, root: Path) -> Path:
    """The committed real study's records (no plots, no sample caches), as a clone holds them."""
    study = tmp_path / "real_study"
    shutil.copytree(root / "results" / "real_study", study, ignore=shutil.ignore_patterns("*.png", "*.jsonl"))
    return study


def _report_only(study: Path):
    from scripts import run_methods

    return run_methods.main(["--study", "configs/real/study.yaml", "--out", str(study), "--report-only"])


def test_report_only_refuses_a_pick_its_validation_records_do_not_make(tmp_path, monkeypatch, capsys):
    """The search record's pick of sft edited by hand (lr0.001 -> lr0.0003, whose validation pass@1 was 0.21 against
    0.32), with test runs made at that pick: every record agrees but the pick was never the search's."""
    monkeypatch.chdir(ROOT)
    study = _real_study_copy(tmp_path, ROOT)
    search = json.loads((study / "search.json").read_text())
    search["picks"]["sft"] = {"slug": "lr0.0003", "lr": 0.0003}
    (study / "search.json").write_text(json.dumps(search))
    for seed in (0, 1, 2):  # the test runs, as if trained and scored at the edited pick
        picked, edited = study / "runs/sft/lr0.001" / f"seed{seed}", study / "runs/sft/lr0.0003" / f"seed{seed}"
        shutil.copytree(picked, edited)
        record = json.loads((edited / RUN_RECORD).read_text())
        record["argv"][record["argv"].index("--learning_rate") + 1] = "0.0003"
        (edited / RUN_RECORD).write_text(json.dumps(record))
        result = json.loads((edited / "test.json").read_text())
        result["model"] = result["model"].replace("lr0.001", "lr0.0003")
        (edited / "test.json").write_text(json.dumps(result))
    report = (study / "report.md").read_text()
    error = one_line(lambda: _report_only(study), capsys)
    assert "search.json picks lr0.0003 for arm 'sft' where its validation records pick lr0.001" in error
    assert (study / "report.md").read_text() == report


def test_report_only_refuses_a_run_of_another_base(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    study = _real_study_copy(tmp_path, ROOT)
    folder = study / "runs" / "grpo_outcome" / "lr0.0003" / "seed1"
    _set_model(folder / RUN_RECORD, "/elsewhere/models/another-base")
    report = (study / "report.md").read_text()
    error = one_line(lambda: _report_only(study), capsys)
    assert f"{folder}: a finished run of another command" in error and "another-base" in error
    assert (study / "report.md").read_text() == report
