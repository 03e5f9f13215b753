"""The embedded default's block: the shipped base model's pass@k / maj@k by split and the targets it was built to meet
(its ``base_model_metrics.json``)."""

from __future__ import annotations

from scripts.doc_blocks.formats import count, f3, sgn, table
from scripts.doc_blocks.registry import renderer

BASE_METRICS = "grpo_ext/assets/embedded/base_model_metrics.json"


@renderer("embedded_base", BASE_METRICS)
def embedded_base(m: dict) -> str:
    rows = [
        [f"{s}{' (seen in training)' if s == 'sft' else ' (RL' + chr(39) + 's prompts)' if s == 'train' else ''}", m[s]]
        for s in ("sft", "train", "validation", "test")
    ]
    rows += [
        ["validation, loaded in 4 bit (nf4, the main job's load)", m["four_bit"]["validation"]],
        ["test, loaded in 4 bit", m["four_bit"]["test"]],
    ]
    first = m["test"]
    body = table(
        ["split", "pass@1", f"pass@{first['n']}", f"maj@{first['n']}", "greedy"],
        [[name, f3(r["pass@1"]), f3(r[f"pass@{r['n']}"]), f3(r[f"maj@{r['n']}"]), f3(r["greedy"])] for name, r in rows],
        ["---", "---:", "---:", "---:", "---:"],
    )
    t, c = m["targets"], m["convergence_check"]
    met = {True: "met", False: "**not met**"}
    return (
        f"{count(first['n_prompts'])} problems a split, n = {first['n']}, T = {first['temperature']:g}:\n\n{body}\n\n"
        f"Targets: held-out pass@1 in [{t['held_out_pass@1']['target'][0]}, {t['held_out_pass@1']['target'][1]}] "
        f"({f3(t['held_out_pass@1']['value'])}, {met[t['held_out_pass@1']['met']]}); memorisation gap <= "
        f"{t['memorisation_gap']['target']} ({f3(t['memorisation_gap']['value'])}, "
        f"{met[t['memorisation_gap']['met']]});"
        f" pass@16 - pass@1 >= {t['room_for_rl']['target']} ({t['room_for_rl']['value']:.2f}, "
        f"{met[t['room_for_rl']['met']]}); the 4-bit load losing <= {t['four_bit_loss']['target']} of held-out pass@1 "
        f"({f3(m['four_bit_loss']['validation'])} / {f3(m['four_bit_loss']['test'])}, "
        f"{met[t['four_bit_loss']['met']]});"
        f" converged: {met[t['converged']['met']]} (one more epoch at lr {m['sft_training']['check_lr']:g}: validation "
        f"pass@1 {sgn(c['validation']['change'])}, test {sgn(c['test']['change'])}, against an evaluation noise of "
        f"{c['validation']['evaluation_noise']:.3f})."
    )
