"""Issue 52's data-loss and security cases, each refused through its entry point, naming what it protects:

1. `scripts/search.py --train-args` moves a run (`--output-dir`, `--overwrite-output-dir`) or changes the model or task
   it is compared on, whatever the flag's spelling: the protected fields are checked on the parsed arguments.
2. `evals/passk_majk.py --out DIR` and `scripts/iterative.py --report_dir DIR` never write into a folder holding a
   user's files (report.md, a samples.jsonl that is not a sample cache, a link out of the folder).
3. scripts/search.py never follows a `runs/<slug>` link out of `--out` (it deleted the target's validation/).
4. A study arm named `../../evil` is refused before anything is written outside `--out`.
5. scripts/publish.py never follows a link out of the checkpoint into the upload.
6. `scripts/run_methods.py --report-only --quick` never rewrites a full study's report as a quick one.

Training, sampling and uploads are stood in for where the case is decided before them, so each test takes seconds."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from grpo_ext.errors import UserError
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from tests.scripts.test_search_script import search

CONFIG = ["--config", "configs/default.yaml"]
FOLDER_RECORD = ".grpo_ext_folder.json"  # grpo_ext.run_folder's (spelled here: these tests also ran on HEAD)


def no_training(monkeypatch):
    """scripts/search.py's training and harness processes: reaching one means nothing was refused."""

    def run(argv, log):
        raise AssertionError(f"search started {argv[0]}: nothing was refused")

    monkeypatch.setattr(search, "_run", run)


def finished_run(folder: Path) -> Path:
    """A user's finished training run, with their own notes in it."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "grpo_ext_run.json").write_text('{"status": "complete", "global_step": 12}')
    (folder / "NOTES.txt").write_text("my notes")
    return folder


# ---- 1. protected fields of --train-args, however spelled ---------------------------------------------------------


@pytest.mark.parametrize(
    "flags, field",
    [
        ("--output-dir {x} --overwrite-output-dir true", "output_dir"),
        ("--output-dir={x}", "output_dir"),
        ("--overwrite-output-dir true", "overwrite_output_dir"),
        ("--model-name-or-path {x}", "model_name_or_path"),
        ("--task-kwargs '{{\"digits\": 3}}'", "task_kwargs"),
        ("--save-steps 1", "save_steps"),
    ],
    ids=["output-dir+overwrite", "output-dir=", "overwrite", "model", "task-kwargs", "save-steps"],
)
def test_train_args_cannot_move_a_run_or_change_what_it_is_compared_on(flags, field, tmp_path, root, monkeypatch):
    monkeypatch.chdir(root)
    no_training(monkeypatch)
    mine = finished_run(tmp_path / "X")
    flags = flags.format(x=mine)
    with pytest.raises(UserError, match=rf"--train-args: sets {field} "):
        search.main([*CONFIG, "--grid", "learning_rate=1e-4", "--out", str(tmp_path / "out"), "--train-args=" + flags])
    assert (mine / "NOTES.txt").read_text() == "my notes" and (mine / "model.safetensors").read_bytes() == b"weights"
    assert not (tmp_path / "out").exists()


def test_a_grid_axis_is_checked_on_the_parsed_field_too(tmp_path, root, monkeypatch):
    """A grid axis reaches train.py as a flag as well: the field it sets is checked, not the axis's spelling."""
    monkeypatch.chdir(root)
    no_training(monkeypatch)
    with pytest.raises(UserError, match=r"--grid model_name_or_path=a: sets model_name_or_path to 'a' \(the config's"):
        search.main([*CONFIG, "--grid", "model_name_or_path=a,b", "--out", str(tmp_path / "out")])
    with pytest.raises(UserError, match=r"--grid seed=1: sets seed .*--search-seed"):
        search.main([*CONFIG, "--grid", "seed=1", "--search-seed", "7", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_train_args_that_keep_the_protected_fields_are_accepted(tmp_path, root, monkeypatch):
    """The config's own base, spelled as a flag, changes nothing: not refused (the first run then starts)."""
    monkeypatch.chdir(root)
    no_training(monkeypatch)
    with pytest.raises(AssertionError, match="search started scripts/train.py"):
        search.main(
            [*CONFIG, "--grid", "learning_rate=1e-4", "--out", str(tmp_path / "out")]
            + ["--train-args", "--model-name-or-path embedded --max-steps 2"]
        )


# ---- 2. the harness's --out and the iterative report_dir ---------------------------------------------------------

HARNESS = ["--limit", "1", "--n", "1", "--k", "1", "--bootstrap-resamples", "10", "--no-progress"]


def harness(out, *flags):
    from evals import passk_majk

    return passk_majk.main([*HARNESS, "--out", str(out), *flags])


def test_the_harness_never_writes_into_a_folder_of_the_users_files(tmp_path):
    users = tmp_path / "mine"
    users.mkdir()
    (users / "report.md").write_text("my report")
    with pytest.raises(UserError, match=r"--out: .*mine is not empty \(report\.md\) and holds no output of evals/"):
        harness(users)
    assert (users / "report.md").read_text() == "my report" and sorted(os.listdir(users)) == ["report.md"]

    cache = tmp_path / "cache"  # a user's own samples.jsonl: valid JSON, no trailing newline
    cache.mkdir()
    (cache / "samples.jsonl").write_text('{"mine": 1}')
    with pytest.raises(UserError, match=r"cache is not empty \(samples\.jsonl\)"):
        harness(cache)
    assert (cache / "samples.jsonl").read_text() == '{"mine": 1}'


def test_the_harness_never_follows_a_link_out_of_its_folder(tmp_path):
    """A samples.jsonl linked to a file outside --out was truncated and appended to; now refused, even in a folder the
    harness made (the link put there since)."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text('{"precious": 1}')
    out = tmp_path / "eval"
    harness(out)  # a folder the harness made: its own, resumable
    (out / "samples.jsonl").unlink()
    (out / "samples.jsonl").symlink_to(outside)
    with pytest.raises(UserError, match=r"--out: .*samples\.jsonl leads to .*outside\.jsonl, outside .*eval"):
        harness(out)
    assert outside.read_text() == '{"precious": 1}'
    assert json.loads((out / FOLDER_RECORD).read_text()) == {"writer": "evals/passk_majk.py"}
    (out / "samples.jsonl").unlink()
    harness(out)  # the link gone, the same command runs again in the folder it made
    assert not (out / "samples.jsonl").is_symlink() and len((out / "samples.jsonl").read_text().splitlines()) == 1


def test_an_earlier_harness_folder_without_the_record_is_taken_over(tmp_path):
    """A report folder from before the record (committed results, a search's validation/) is the harness's own."""
    out = tmp_path / "eval"
    harness(out)
    (out / FOLDER_RECORD).unlink()
    harness(out)
    assert json.loads((out / FOLDER_RECORD).read_text())["writer"] == "evals/passk_majk.py"


def test_the_iterative_report_dir_is_refused_before_anything_trains(tmp_path, root, monkeypatch):
    from grpo_ext.experiments.iterative import Experiment
    from scripts import iterative

    monkeypatch.chdir(root)
    monkeypatch.setattr(Experiment, "run", lambda self: (_ for _ in ()).throw(AssertionError("the experiment ran")))
    users = tmp_path / "mine"
    users.mkdir()
    (users / "report.md").write_text("my report")
    argv = ["--config", "configs/iterative_quick.yaml", "--output_dir", str(tmp_path / "run")]
    with pytest.raises(UserError, match=r"report_dir: .*mine is not empty \(report\.md\) and holds no output of"):
        iterative.main([*argv, "--report_dir", str(users)])
    assert (users / "report.md").read_text() == "my report"


def test_the_iterative_report_is_written_only_into_its_own_folder(tmp_path):
    """The writer itself refuses too (a report_dir filled while the experiment trained)."""
    from grpo_ext.experiments.iterative.arms_report import write_experiment_report

    users = tmp_path / "mine"
    users.mkdir()
    (users / "report.md").write_text("my report")
    with pytest.raises(UserError, match=r"report_dir: .*mine is not empty"):
        write_experiment_report({}, users, None, [], [])
    assert (users / "report.md").read_text() == "my report"


# ---- 3. search never follows runs/<slug> out of --out ------------------------------------------------------------


def test_search_never_follows_a_run_folder_link_out_of_out(tmp_path, root, monkeypatch):
    monkeypatch.chdir(root)
    no_training(monkeypatch)
    victim = tmp_path / "victim"
    (victim / "validation").mkdir(parents=True)
    (victim / "validation" / "mine.txt").write_text("mine")
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "search.json").write_text('{"grid": {}, "pick": {}}')  # an earlier search's folder
    (out / "runs" / "learning_rate=1e-4").symlink_to(victim)
    with pytest.raises(UserError, match=r"--out: .*learning_rate=1e-4.* leads to .*victim.*, outside .*out"):
        search.main([*CONFIG, "--grid", "learning_rate=1e-4", "--out", str(out), "--limit", "2", "--n", "2"])
    assert (victim / "validation" / "mine.txt").read_text() == "mine"


# ---- 4. names from a config become folder names, never paths -----------------------------------------------------


def test_a_study_arm_named_as_a_path_is_refused(tmp_path, root, monkeypatch):
    from scripts import run_methods

    monkeypatch.chdir(root)
    study = yaml.safe_load((root / "configs" / "compare.yaml").read_text())
    study = {k: v for k, v in study.items() if k not in ("signal", "extensions", "expectations")}
    study["configs"] = str(root / "configs" / "methods")
    study["arms"] = {"../../evil": {"method": "sft"}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(UserError, match=r"arms\.\.\./\.\./evil: '\.\./\.\./evil' cannot be a folder name"):
        run_methods.main(["--study", str(path), "--out", str(tmp_path / "out"), "--estimate"])


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", "..", ".", "", "x\0y", "x" * 201, 3])
def test_path_part_refuses_anything_but_one_folder_name(name):
    from grpo_ext.run_folder import path_part

    with pytest.raises(UserError, match="^arms.x: "):
        path_part(name, "arms.x")


def test_path_part_keeps_a_name_and_inside_keeps_a_link_that_stays_in(tmp_path):
    from grpo_ext.run_folder import inside, path_part

    assert path_part("lr=1e-4,beta=0.1 ..x", "f") == "lr=1e-4,beta=0.1 ..x"
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")  # a link inside the folder, to inside it: harmless
    assert inside(tmp_path, "alias", "x", field_name="f") == tmp_path / "alias" / "x"


def test_an_output_folder_of_another_writer_is_refused(tmp_path):
    from grpo_ext.run_folder import OutputFolder

    with OutputFolder(tmp_path / "o", writer="scripts/search.py", field_name="--out"):
        pass
    with pytest.raises(UserError, match=r"--out: .*o holds the output of scripts/search\.py .*, not of evals/"):
        OutputFolder(tmp_path / "o", writer="evals/passk_majk.py", field_name="--out").check()


def test_a_study_never_writes_into_a_folder_of_other_files(tmp_path, root, monkeypatch):
    """The study's --out is owned like every other writer's: a folder of the user's files is refused before any run."""
    from grpo_ext.experiments.study import stages
    from scripts import run_methods

    monkeypatch.chdir(root)
    users = tmp_path / "mine"
    users.mkdir()
    (users / "report.md").write_text("my report")
    monkeypatch.setattr(stages, "run_study", lambda *a: (_ for _ in ()).throw(AssertionError("the study ran")))
    with pytest.raises(UserError, match=r"--out: .*mine is not empty \(report\.md\) and holds no output of scripts"):
        run_methods.main(["--study", "configs/compare.yaml", "--out", str(users), "--quick"])
    assert sorted(os.listdir(users)) == ["report.md"]
    (users / "search.json").write_text('{"picks": {}, "test_seeds": [0]}')  # a study's from before the record
    with pytest.raises(AssertionError, match="the study ran"):
        run_methods.main(["--study", "configs/compare.yaml", "--out", str(users), "--quick"])


# ---- 5. publish never follows a link out of the checkpoint -------------------------------------------------------


@pytest.mark.parametrize("name", ["grpo_ext_config.yaml", "generation_config.json"])
def test_publish_never_uploads_a_file_linked_from_outside_the_checkpoint(name, tmp_path):
    from scripts import publish

    secret = tmp_path / "secret.txt"
    secret.write_text('{"token": "hf_secret"}')
    checkpoint = tmp_path / "run"
    shutil.copytree(EMBEDDED_MODEL_DIR, checkpoint)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 3}')
    (checkpoint / name).unlink(missing_ok=True)
    (checkpoint / name).symlink_to(secret)
    out = tmp_path / "export"
    with pytest.raises(UserError, match=rf"CHECKPOINT: .*{name} leads to .*secret\.txt, outside .*run"):
        publish.main([str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out)])
    assert not out.exists()
    assert not any("hf_secret" in p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file() and
                   p != secret and not p.is_symlink() and p.stat().st_size < 1 << 20)  # fmt: skip


def test_publish_overwrite_still_replaces_an_export_of_an_earlier_version(tmp_path):
    """Dry runs before the shared record listed their files in .grpo_ext_export.json: --overwrite honours it."""
    from scripts import publish

    checkpoint = tmp_path / "run"
    shutil.copytree(EMBEDDED_MODEL_DIR, checkpoint)
    out = tmp_path / "export"
    dry_run = [str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out)]
    publish.main(dry_run)
    record = json.loads((out / FOLDER_RECORD).read_text())
    assert record["writer"] == "scripts/publish.py" and "model.safetensors" in record["files"]
    (out / FOLDER_RECORD).rename(out / ".grpo_ext_export.json")
    (out / ".grpo_ext_export.json").write_text(json.dumps({"files": record["files"]}))
    assert publish.main([*dry_run, "--overwrite"]) == out and (out / FOLDER_RECORD).is_file()


# ---- 6. --report-only never rewrites a study with other settings ---------------------------------------------------


def test_report_only_quick_never_rewrites_a_full_studys_report(tmp_path, root, monkeypatch):
    from scripts import run_methods

    monkeypatch.chdir(root)
    study = tmp_path / "real_study"  # the committed study's records (no plots, no sample caches)
    shutil.copytree(root / "results" / "real_study", study, ignore=shutil.ignore_patterns("*.png", "*.jsonl"))
    report = (study / "report.md").read_text()
    with pytest.raises(UserError, match=r"--report-only: .*search\.json records .*test_seeds \[0, 1, 2\].* \[0, 1\]"):
        run_methods.main(["--study", "configs/real/study.yaml", "--out", str(study), "--report-only", "--quick"])
    assert (study / "report.md").read_text() == report
