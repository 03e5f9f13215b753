"""What moved, problem by problem: for model B against model A, the problems whose accuracy (the fraction of right
samples) rose most and fell most, each with both models' most frequent answers and one sample of each, so a reader
sees *what* changed ("56 for 34 sells 22": the trained model adds where it should subtract), not only by how much.

``comparisons[i]["moved"]`` of ``report.json``: ``{"top": MOVED_TOP, "up": [...], "down": [...]}``, each entry
``{"problem_id", "question", "attributes", "answer", "change", "a": {"accuracy", "top_answers", "sample"}, "b":
{...}}``; ``question``: the problem's question, shortened (:func:`~grpo_ext.evaluation.excerpt.question_text`, at most
:data:`QUESTION_CHARS` characters; null for a record without its prompt);
``change`` is B's accuracy minus A's; ``up`` largest rise first, ``down`` largest fall first, ties in A's problem
order; problems that did not move are left out. ``top_answers``: ``[answer, count]`` as the record keeps them;
``sample``: sample 0 of the problem as the samples excerpt keeps it (null for a result read back from a report).
"""

from __future__ import annotations

from collections.abc import Sequence

from grpo_ext.evaluation.excerpt import QUESTION_MARK, first_samples, question_text

__all__ = ["MOVED_TOP", "QUESTION_CHARS", "moved_markdown", "moved_problems"]

#: Problems listed each way.
MOVED_TOP = 10
#: A question's characters shown ("Leo has 34 apples. Then Leo sells 22 apples. How many apples ..." fits).
QUESTION_CHARS = 160


def _side(record: dict, n: int, sample: str | None) -> dict:
    top = record.get("top_answers")
    if top is None and record.get("top_answer") is not None:  # a report written before top_answers: the first only
        top = [[record["top_answer"], None]]
    return {"accuracy": record["n_correct"] / n, "top_answers": top or [], "sample": sample}


def moved_problems(a: dict, b: dict, top: int = MOVED_TOP) -> dict:
    """The ``top`` problems whose accuracy moved most up and most down from A to B (see the module docstring)."""
    b_records = {str(r["problem_id"]): r for r in b.get("per_problem") or []}
    samples_a, samples_b = first_samples(a), first_samples(b)
    moved = []
    for position, record in enumerate(a.get("per_problem") or []):
        pid = str(record["problem_id"])
        if pid not in b_records:
            continue
        side_a = _side(record, int(a["n"]), samples_a.get(pid))
        side_b = _side(b_records[pid], int(b["n"]), samples_b.get(pid))
        change = side_b["accuracy"] - side_a["accuracy"]
        if change != 0:
            entry = {
                "problem_id": pid,
                "question": question_text(record["prompt"], QUESTION_CHARS) if record.get("prompt") else None,
                "attributes": record.get("attributes") or {},
                "answer": record.get("answer"),
                "change": change,
                "a": side_a,
                "b": side_b,
            }
            moved.append((position, entry))
    up = sorted((m for m in moved if m[1]["change"] > 0), key=lambda m: (-m[1]["change"], m[0]))
    down = sorted((m for m in moved if m[1]["change"] < 0), key=lambda m: (m[1]["change"], m[0]))
    return {"top": top, "up": [e for _, e in up[:top]], "down": [e for _, e in down[:top]]}


def _code(text: str) -> str:
    """A sample as one inline code span: newlines shown as ⏎, the fence longer than any backtick run inside."""
    flat = text.replace("\r", "").replace("\n", " ⏎ ").strip()
    run = longest = 0
    for ch in flat:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    return f"{fence} {flat} {fence}" if flat else "(empty)"


def _answers(top: Sequence) -> str:
    if not top:
        return "no answer"
    return ", ".join(f"{answer} ×{count}" if count is not None else str(answer) for answer, count in top)


def moved_markdown(c: dict) -> list[str]:
    """The report's "what moved" section of one comparison (``c["moved"]`` from :func:`moved_problems`)."""
    moved = c.get("moved")
    if not moved or not (moved["up"] or moved["down"]):
        return []
    lines = [
        f"## What moved most, problem by problem: {c['b']} (B) vs {c['a']} (A)",
        "",
        f"The {moved['top']} problems whose accuracy (fraction of right samples) rose most and fell most from A to B, "
        "with each model's most frequent answers (×count) and its sample 0.",
        "",
    ]
    for title, entries in (("Up", moved["up"]), ("Down", moved["down"])):
        lines += [f"**{title}**", ""] if entries else []
        for e in entries:
            attributes = ", ".join(f"{k} {v}" for k, v in e["attributes"].items())
            where = f" ({attributes})" if attributes else ""
            lines.append(
                f"- problem {e['problem_id']}{where}, answer {e['answer']}: accuracy {e['a']['accuracy']:.3f} → "
                f"{e['b']['accuracy']:.3f} ({e['change']:+.3f})"
            )
            question = e.get("question")
            if question:  # "Question: Leo has 34 apples. ..." says what it is; a bare "34-22=" is labelled
                label = "" if question.startswith(QUESTION_MARK) else "question: "
                lines.append(f"  - {label}{_code(question)}")
            for side in ("a", "b"):
                s = e[side]
                sample = f"; sample 0: {_code(s['sample'])}" if s["sample"] is not None else ""
                lines.append(f"  - {side.upper()}: {_answers(s['top_answers'])}{sample}")
        lines += [""] if entries else []
    return lines
