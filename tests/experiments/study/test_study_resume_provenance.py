"""A resumed study reuses only its own finished runs and evaluations (issue 40, the adversarial pass): a `--quick`
rehearsal's run, a run of another base, an evaluation drawn at another n or of another base model are refused with one
line naming the folder, never taken for the study's; the same command resumes as before. Runs and the model are faked
(`run_method` writes what a finished runner leaves)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import grpo_ext.experiments.study.runs as runs
from grpo_ext.cli import run_cli
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.methods.cost import COST_FILE
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

ROOT = Path(__file__).resolve().parents[3]
STUDY = load_study(ROOT / "configs" / "compare.yaml")


def options(quick: bool, base: str = "embedded") -> StudyOptions:
    from tests.experiments.study.test_study_driver import fresh_driver

    driver = fresh_driver()
    return StudyOptions(
        base=base,
        configs=str(STUDY.configs_dir),
        quick=quick,
        progress=False,
        quick_flags=driver.QUICK_COMMON,
        quick_method_flags=driver.quick_method_flags(rehearsal=False),
    )


@pytest.fixture
def trained(monkeypatch):
    """`run_method` faked: it records the command and leaves a finished run (a cost record, weights and the run's
    record saying `complete`)."""
    calls = []

    def run_method(argv):
        calls.append(argv)
        folder = Path(argv[argv.index("--output_dir") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / COST_FILE).write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")
        (folder / "grpo_ext_run.json").write_text(json.dumps({"status": "complete"}))

    monkeypatch.setattr("grpo_ext.methods.run_method", run_method)
    return calls


def arm_job(seed=100):
    arm = STUDY.arms[0]
    return runs.Job(arm, arm.settings(STUDY.learning_rates)[0], seed, STUDY.validation)


def one_line(call, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda argv: call(), [])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    return errors[0]


def test_a_quick_run_is_not_taken_for_the_full_studys(tmp_path, trained, capsys, monkeypatch):
    """Through `run_jobs`, as the study runs them: a job whose run and evaluation are done is checked, not skipped."""
    drawn = []
    monkeypatch.setattr("grpo_ext.evaluation.backends.load_backend", lambda *args, **kwargs: None)
    monkeypatch.setattr("grpo_ext.evaluation.harness.evaluate_model", lambda *args, **kwargs: drawn.append(1) or {})
    job = arm_job()
    folder = runs.job_dir(job, tmp_path, STUDY)
    runs.run_jobs([job], tmp_path, STUDY, options(quick=True), 1)
    runs.run_jobs([job], tmp_path, STUDY, options(quick=True), 1)  # the same command: done, not trained again
    assert len(trained) == 1 and len(drawn) == 1
    error = one_line(lambda: runs.run_jobs([job], tmp_path, STUDY, options(quick=False), 1), capsys)
    assert f"{folder}: a finished run of another command" in error and "--max_steps" in error
    assert len(trained) == 1 and len(drawn) == 1  # nothing trained over it, nothing drawn
    quick_base = runs.Job(None, None, None, replace(STUDY.validation, limit=6))  # --quick's smaller evaluation
    runs.run_jobs([quick_base], tmp_path, STUDY, options(quick=True), 1)
    full_base = runs.Job(None, None, None, STUDY.validation)
    error = one_line(lambda: runs.run_jobs([full_base], tmp_path, STUDY, options(quick=False), 1), capsys)
    assert "base/validation.json: scored with another limit (6," in error
    assert len(drawn) == 2


def test_a_run_of_another_base_or_an_edited_method_config_is_refused(tmp_path, trained, capsys, monkeypatch):
    job = arm_job()
    folder = runs.job_dir(job, tmp_path, STUDY)
    runs._train(job, folder, STUDY, options(quick=True))
    runs._train(job, folder, STUDY, options(quick=True, base=str(EMBEDDED_MODEL_DIR) + "/"))  # the same base, spelt so
    other = tmp_path / "other_base"
    other.mkdir()
    (other / "config.json").write_text("{}")
    error = one_line(lambda: runs._train(job, folder, STUDY, options(quick=True, base=str(other))), capsys)
    assert "a finished run of another command" in error and "other_base" in error
    configs = tmp_path / "configs"
    configs.mkdir()
    for path in STUDY.configs_dir.glob("*.yaml"):
        (configs / path.name).write_text(path.read_text() + "\n# edited\n")
    edited = replace(options(quick=True), configs=str(configs))
    assert "its method config was edited since" in one_line(lambda: runs._train(job, folder, STUDY, edited), capsys)


def test_a_run_recorded_from_another_clone_resumes(tmp_path, trained, capsys):
    """A record keeps the method config's file name and sha256, not where the clone sat: the committed runs resume
    (and their report renders) from any checkout, records written with the whole path included."""
    import hashlib

    from grpo_ext.experiments.study.provenance import RUN_RECORD

    job = arm_job()
    folder = runs.job_dir(job, tmp_path, STUDY)
    runs._train(job, folder, STUDY, options(quick=True))
    record = json.loads((folder / RUN_RECORD).read_text())
    config = record["argv"][record["argv"].index("--config") + 1]
    assert config == f"{job.arm.method}.yaml"
    argv = [f"/elsewhere/configs/{a}" if a == config else a for a in record["argv"]]
    elsewhere = json.dumps({**record, "argv": argv})
    (folder / RUN_RECORD).write_text(elsewhere)  # as an earlier sitting wrote it, in another clone
    runs._train(job, folder, STUDY, options(quick=True))
    assert len(trained) == 1  # taken as done, not trained again
    digest = hashlib.sha256(b"another config").hexdigest()
    (folder / RUN_RECORD).write_text(json.dumps({**json.loads(elsewhere), "config_sha256": digest}))
    error = one_line(lambda: runs._train(job, folder, STUDY, options(quick=True)), capsys)
    assert "its method config was edited since" in error


def test_an_evaluation_of_other_settings_or_another_base_is_refused(tmp_path, monkeypatch, capsys):
    """The base's validation file of an earlier sitting: the same settings are reused (nothing drawn again); another
    temperature or another --model is refused before anything is drawn."""
    drawn = []
    monkeypatch.setattr("grpo_ext.evaluation.backends.load_backend", lambda *args, **kwargs: None)
    monkeypatch.setattr("grpo_ext.evaluation.harness.evaluate_model", lambda *args, **kwargs: drawn.append(1) or {})
    job = runs.Job(None, None, None, STUDY.validation)
    folder = runs.job_dir(job, tmp_path, STUDY)
    runs._evaluate(job, folder, STUDY, options(False))
    target = runs.evaluation_file(folder, STUDY.validation)
    assert json.loads(target.read_text())["study_evaluation"]["settings"]["limit"] == STUDY.validation.limit
    runs._evaluate(job, folder, STUDY, options(False, str(EMBEDDED_MODEL_DIR)))  # the same base: reused
    assert drawn == [1]
    other_n = replace(STUDY.validation, temperature=STUDY.validation.temperature + 0.3)
    error = one_line(lambda: runs._evaluate(runs.Job(None, None, None, other_n), folder, STUDY, options(False)), capsys)
    assert f"{target}: scored with another params" in error
    other = tmp_path / "other_base"
    other.mkdir()
    (other / "config.json").write_text("{}")
    error = one_line(lambda: runs._evaluate(job, folder, STUDY, options(False, str(other))), capsys)
    assert "scored with another model" in error and "other_base" in error
    assert drawn == [1]
