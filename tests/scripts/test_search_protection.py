"""scripts/search.py keeps to its `--out` and looks at test once (issue 40): grid values never make paths outside
`--out`, a folder of other files is refused, and a second look at test (another pick after the grid was reordered,
or the pick retrained) needs `--test-again`, which search.json and search.md record. Training and the harness are
stood in for (each run's weights are its folder's name), so every check here takes well under a second."""

import hashlib
import json
import shlex

import pytest

from grpo_ext.cli import run_cli
from grpo_ext.errors import UserError
from tests.scripts.test_search_script import search

CONFIG = ["--config", "configs/default.yaml"]


@pytest.fixture
def fake(monkeypatch, root):
    """Training writes nothing; the harness writes a complete report (pass@1 0.5 for every model, so the grid's
    order breaks the tie); a model's fingerprint is its path's, changed by `retrained`."""
    monkeypatch.chdir(root)
    trained, harness_runs, retrained = [], [], set()

    def fingerprint(model):
        return hashlib.sha256((model + ("*" if model in retrained else "")).encode()).hexdigest()[:16]

    def run(argv, log):
        harness_runs.append(argv)
        out, models = argv[argv.index("--out") + 1], argv[2 : argv.index("--task-kwargs") : 2]
        result = {"n": 2, "ks": [1, 2], "pass@k": {"1": 0.5, "2": 0.5}}
        report = {"complete": True, "command": "python " + shlex.join(argv)}
        report["models"] = [{**result, "model": m, "model_fingerprint": fingerprint(m)} for m in models]
        (search.Path(out)).mkdir(parents=True, exist_ok=True)
        (search.Path(out) / "report.json").write_text(json.dumps(report))

    monkeypatch.setattr(search, "_train", lambda train, folder, save_steps: trained.append(folder))
    monkeypatch.setattr(search, "_run", run)
    monkeypatch.setattr(search, "_fingerprints", lambda models: [fingerprint(m) for m in models])
    return trained, harness_runs, retrained


def searching(out, *flags):
    return search.main([*CONFIG, "--out", str(out), "--limit", "2", "--n", "2", "--test-n", "2", *flags])


def test_grid_values_never_make_paths_outside_out(tmp_path, root, monkeypatch, capsys):
    """`--grid run_name=../../../../../victim` trained and wrote its validation report outside --out (and a second
    search deleted victim/validation): refused before anything is made, in one line."""
    monkeypatch.chdir(root)
    victim = tmp_path / "victim" / "validation"
    victim.mkdir(parents=True)
    (victim / "mine.txt").write_text("mine")
    for grid in ("run_name=../../../../../victim", "run_name=a\\b", "run_name=--output_dir=x", "../x=1"):
        with pytest.raises(SystemExit) as exit_info:
            run_cli(search.main, [*CONFIG, "--grid", grid, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2
        assert "error: --grid" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and (victim / "mine.txt").read_text() == "mine"
    with pytest.raises(UserError, match="makes a folder name over 200 bytes"):
        search.parse_grid(["run_name=" + "x" * 250])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--grid", 'task_kwargs={"digits":3}'], r"--grid task_kwargs=.*: sets task_kwargs to .*scored on"),
        (["--grid", "x=1", "--train-args", "--task gsm8k"], r"--train-args: sets task to 'gsm8k' .*scored on the"),
        (["--grid", "learning_rate=1e-4,0.0001"], r"--grid learning_rate: repeated value"),  # one rate, two spellings
        (["--grid", "x=1", "--train-args", "--run_name 'a"], r"--train-args: cannot split .* \(No closing quotation"),
        (["--grid", "x=1", "--limit", "0"], r"--limit: expected a number >= 1, got 0"),
        (["--grid", "x=1", "--test", "--test-n", "0"], r"--test-n: expected a number >= 1, got 0"),
        (["--grid", "x=1", "--temperature", "nan"], r"--temperature: must be a finite number"),
        (["--grid", "x=1", "--test-again"], r"--test-again: only with --test"),
    ],
    ids=["task grid", "task train-args", "two spellings", "unbalanced quotes", "limit 0", "test-n 0", "nan T", "again"],
)
def test_bad_search_flags_are_refused_before_any_training(flags, message, tmp_path, fake):
    trained, harness_runs, _ = fake
    with pytest.raises(UserError, match=message):
        search.main([*CONFIG, "--out", str(tmp_path / "out"), *flags])
    assert not trained and not harness_runs and not (tmp_path / "out").exists()


def test_a_folder_of_other_files_is_refused_and_an_earlier_search_is_not(tmp_path, fake):
    """`--out DIR` where DIR holds the user's own search.md / search.json: they were overwritten silently."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "search.md").write_text("my notes")
    (mine / "search.json").write_text('{"mine": 1}')
    with pytest.raises(UserError, match=r"mine is not empty \(search\.json, search\.md\) and holds no output of"):
        searching(mine, "--grid", "learning_rate=1e-4")
    assert (mine / "search.md").read_text() == "my notes" and (mine / "search.json").read_text() == '{"mine": 1}'
    legacy = tmp_path / "legacy"  # a search from before the marker: its search.json says what it is
    legacy.mkdir()
    (legacy / "search.json").write_text('{"grid": {}, "pick": {}}')
    (legacy / "failures.md").write_text("an analysis added since")
    searching(legacy, "--grid", "learning_rate=1e-4")
    assert (legacy / "failures.md").is_file() and "learning_rate=1e-4" in (legacy / "search.md").read_text()


def test_a_reordered_grid_does_not_look_at_test_again(tmp_path, fake):
    """A `--test` search, then the same command with the grid reordered: the tie now picks the other setting, and the
    old test report was thrown away as stale and the new pick scored on test."""
    _, harness_runs, retrained = fake
    out = tmp_path / "s"
    first = searching(out, "--grid", "learning_rate=1e-4,2e-4", "--test")
    assert first["pick"]["slug"] == "learning_rate=1e-4" and len(first["test_looks"]) == 1
    report = (out / "test" / "report.json").read_text()
    tests = sum("test" in argv for argv in harness_runs)
    with pytest.raises(UserError, match=r"--test: .*test already scored another model .*pass --test-again"):
        searching(out, "--grid", "learning_rate=2e-4,1e-4", "--test")
    assert (out / "test" / "report.json").read_text() == report  # nothing lost, nothing scored
    assert sum("test" in argv for argv in harness_runs) == tests
    searching(out, "--grid", "learning_rate=1e-4,2e-4", "--test")  # the same look: read back, not a second one
    retrained.add(str(out / "runs" / "learning_rate=1e-4" / "model"))  # the pick retrained in place
    with pytest.raises(UserError, match="would look at test twice"):
        searching(out, "--grid", "learning_rate=1e-4,2e-4", "--test")
    again = searching(out, "--grid", "learning_rate=2e-4,1e-4", "--test", "--test-again")
    assert again["pick"]["slug"] == "learning_rate=2e-4" and len(again["test_looks"]) == 2
    assert json.loads((out / "test.1" / "report.json").read_text()) == json.loads(report)  # the first look, kept
    assert "Test was looked at 2 times" in (out / "search.md").read_text()
    # without --test the ledger stays in search.json: a later look still needs the flag
    assert len(searching(out, "--grid", "learning_rate=1e-4,2e-4")["test_looks"]) == 2


def test_every_setting_is_parsed_before_the_first_run_trains(tmp_path, fake):
    """A value train.py refuses (a NaN learning rate) failed only when its run came, after the earlier ones trained."""
    trained, _, _ = fake
    with pytest.raises(UserError, match=r"--grid learning_rate=nan: learning_rate: must be a finite number"):
        searching(tmp_path / "s", "--grid", "learning_rate=1e-4,nan")
    assert not trained
