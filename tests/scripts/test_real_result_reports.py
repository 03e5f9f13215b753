"""scripts/real_result.py --from-reports: the samples are gone, so the test and harder reports are re-rendered from
their committed report.json alone (slices read from the prompts, what moved with the questions), under their original
command, and what needs the samples (the strict form, the anatomy, the excerpt) is said to be missing, never made up."""

import json

import pytest

from grpo_ext.evaluation.analysis import BootstrapSettings
from grpo_ext.evaluation.report import write_reports
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, problem_from_question
from tests.harness_results import harness_result

KNOBS = {"balance_operations": True}  # problems in turn: an addition, a subtraction, ...
TASK = WordArithmeticTask(**KNOBS)
COMMAND = (
    "python evals/passk_majk.py --model base --model rl --task word_arithmetic --task-kwargs "
    f"'{json.dumps(KNOBS)}' --split test --n 2 --limit 4 --out results/x/test"
)
# what the harness added since the committed reports were written: taken out again to make one of them
NEW_RESULT_KEYS = ("strict_accuracy", "strict_share", "strict_form", "anatomy", "anatomy_budget", "slices")
NEW_RECORD_KEYS = ("attributes", "n_strict", "n_correct_strict", "top_answers", "anatomy")


def _results() -> list[dict]:
    """base: right on every problem, strict form; rl: the sum of the two numbers, unformatted (the shortcut)."""
    problems = list(TASK.load("test", 4))
    base = [[f"#### {p['answer']}"] * 2 for p in problems]
    rl = [[str(sum(problem_from_question(p["question"]).operands))] * 2 for p in problems]
    return [
        harness_result(name, TASK, problems, c, [1, 2], strict_form=TASK.strict_form)
        for name, c in (("base", base), ("rl", rl))
    ]


def _committed(folder, results, *, old: bool, excerpt: list[dict] | None = None) -> dict:
    """A harness folder as committed: report.json (``old``: as written before slices, the strict form and the
    anatomy) and, where given, an excerpt; no samples.jsonl."""
    write_reports(results, folder, command=COMMAND, extra={"cache": "x.jsonl"}, bootstrap=BootstrapSettings(1000))
    payload = json.loads((folder / "report.json").read_text())
    if old:
        for key in ("slices", "paired_slices", "moved"):
            del payload[key]
        for model in payload["models"]:
            for key in NEW_RESULT_KEYS:
                model.pop(key, None)
            for record in model["per_problem"]:
                for key in NEW_RECORD_KEYS:
                    record.pop(key, None)
    (folder / "report.json").write_text(json.dumps(payload))
    if excerpt is not None:
        (folder / "samples_excerpt.jsonl").write_text("".join(json.dumps(row) + "\n" for row in excerpt))
    return payload


def test_from_reports_re_renders_without_sampling_and_makes_up_no_number(tmp_path, monkeypatch):
    from scripts.real_result import main

    def no_sampling(argv):
        raise AssertionError("--from-reports must not sample")

    monkeypatch.setattr("grpo_ext.evaluation.passk_majk.main", no_sampling)
    search = tmp_path / "search"
    results = _results()
    old = _committed(search / "test", results, old=True)
    excerpt = [
        {"model": model, "problem_id": "1", "sample_index": 0, "completion": completion}
        for model, completion in (("base", "#### 12"), ("rl", "55"))
    ]
    new = _committed(search / "harder", results, old=False, excerpt=excerpt)
    assert "anatomy" in new["models"][1] and "anatomy" not in old["models"][1]

    out = main(["--search", str(search), "--from-reports"])

    # test/: the old report, re-rendered with today's report under its own command; the same numbers
    payload = json.loads((search / "test" / "report.json").read_text())
    assert payload["command"] == COMMAND and payload["cache"] == "x.jsonl" and payload["complete"] is True
    for before, after in zip(old["models"], payload["models"], strict=True):
        assert after["pass@k"] == before["pass@k"] and after["maj@k"] == before["maj@k"]
        assert not {"strict_accuracy", "anatomy"} & set(after)  # nothing that needs the samples' text
    (note,) = payload["notes"]
    assert f"--search {search} --from-reports" in note and "nothing was sampled" in note
    assert "no strict answer form" in note and "no failure anatomy" in note and "no samples excerpt" in note
    # slices read from the prompts: rl gets every addition and no subtraction
    by_operation = {e["value"]: e for e in payload["models"][1]["slices"]["operation"]}
    assert (by_operation["+"]["mean_accuracy"], by_operation["-"]["mean_accuracy"]) == (1.0, 0.0)
    paired = {e["value"]: e for e in payload["paired_slices"][0]["slices"]["operation"]}
    assert paired["-"]["difference"]["mean_accuracy"]["difference"] == pytest.approx(-1.0)
    # what moved: each subtraction fell, with its question and rl's top answer, the sum (no count was kept)
    down = payload["moved"][0]["down"]
    assert len(down) == 2 and all(e["attributes"]["operation"] == "-" for e in down)
    first = down[0]
    x, y = problem_from_question(first["question"]).operands
    assert first["question"].startswith("Question: ") and first["b"]["top_answers"] == [[str(x + y), None]]
    md = (search / "test" / "report.md").read_text()
    assert "> **Note.** Re-rendered from this folder's committed report.json" in md
    assert "### B against A by operation: rl (B) vs base (A)" in md and first["question"] in md
    assert "## Failure anatomy" not in md and "- strict form (" not in md  # the model sections have no strict line
    assert not (search / "test" / "samples_excerpt.jsonl").exists()

    # harder/: a report with the anatomy and its excerpt keeps both; nothing is missing
    harder = json.loads((search / "harder" / "report.json").read_text())
    assert harder["models"][1]["anatomy"] == new["models"][1]["anatomy"]
    assert harder["notes"][0].endswith("nothing was sampled.")
    kept = (search / "harder" / "samples_excerpt.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in kept] == excerpt
    assert "## Failure anatomy (content first)" in (search / "harder" / "report.md").read_text()

    # failures.md / failures.json: no anatomy number where the samples are gone; a pointer where the report has it
    failures = (search / "failures.md").read_text()
    test_part, harder_part = failures.split("## harder split (3 operands)")
    assert "**Not computed.**" in test_part and "samples.jsonl is not committed" in test_part and "|" not in failures
    assert 'In its report\'s section "Failure anatomy (content first)"' in harder_part
    assert json.loads((search / "failures.json").read_text()) == out
    assert out["parts"]["test"] == {
        "report": str(search / "test" / "report.md"),
        "anatomy": False,
        "not_shown": ["strict_accuracy", "anatomy", "excerpt"],
    }
    assert out["parts"]["harder"]["anatomy"] is True and out["parts"]["harder"]["not_shown"] == []


def test_from_reports_needs_a_report_and_its_command(tmp_path):
    from grpo_ext.errors import UserError
    from scripts.real_result import main

    with pytest.raises(UserError, match="no report.json in"):
        main(["--search", str(tmp_path), "--from-reports"])
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "report.json").write_text(json.dumps({"command": "python other.py", "models": []}))
    with pytest.raises(UserError, match="not an evals/passk_majk.py command"):
        main(["--search", str(tmp_path), "--from-reports"])
