"""Entry-point plumbing: bad input ends a CLI with one readable line (the traceback only with --debug).

One line and exit code 2 for what the user can fix: a `UserError` (raised where input is validated), an `OSError`
(a missing or unreadable file, a read-only or full disk) and a torn weights file (`SafetensorError`). Everything
else is a bug of ours and keeps its traceback: a stray `KeyError` or `TypeError` is not dressed up as bad input.
Ctrl-C is "stopped" and exit code 130 (128 + SIGINT), as a shell reports it, not a `KeyboardInterrupt` traceback.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from grpo_ext.errors import UserError, one_line, read_yaml, user_file, user_input

__all__ = ["parse_trl_config", "run_cli"]


def _is_user_side(err: BaseException) -> bool:
    return isinstance(err, (UserError, OSError)) or type(err).__name__ == "SafetensorError"


def run_cli(main: Callable[[list[str]], object], argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
        main(argv)
        return
    try:
        main(argv)
    except KeyboardInterrupt:  # Ctrl-C: what was running recorded it (a training run: `failed`, stopped)
        print("stopped (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except Exception as err:
        if not _is_user_side(err):
            raise
        print(f"error: {one_line(err)} (rerun with --debug for the traceback)", file=sys.stderr)
        sys.exit(2)


# List fields whose library takes one string too (PEFT's `all-linear`, DPO's `sigmoid`, transformers' debug options).
_SCALAR_TAKEN = ("lora_target_modules", "loss_type", "debug")


def parse_trl_config(
    dataclass_types: Sequence[type], argv: list[str], check_ranges: Callable[[Any], None] | None = None
) -> tuple:
    """`trl.TrlParser(dataclass_types).parse_args_and_config(argv)`, where everything the user can get wrong is a
    `UserError`: a flag argparse rejects (one line, not the usage text), an abbreviated flag (argparse would take
    `--learning_rat` for `--learning_rate`), a `--config` file that cannot be read or parsed or that repeats a key, a
    single value where the field takes a list (it would be split into characters), a value a dataclass's
    `__post_init__` rejects (TRL's checks and ours), and a training config's numbers out of range
    (`check_ranges`, for each parsed `TrainingArguments`: by default `grpo_ext.validation.check_training_ranges`; a
    method of the paradigm passes its entry's `check_config`, which knows its trainer's loss types and beta rule)."""
    from transformers import TrainingArguments
    from trl import TrlParser

    from grpo_ext.validation import check_training_ranges

    config = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"), None)

    class Parser(TrlParser):
        def error(self, message):  # argparse would print the usage and exit
            raise UserError(message)

        def set_defaults_with_config(self, **values):
            for action in self._actions:
                value = values.get(action.dest)
                listed = action.nargs in ("+", "*") and action.dest not in _SCALAR_TAKEN
                if listed and value is not None and not isinstance(value, list):
                    raise UserError(
                        f"{action.dest}: {config} gives the single value {value!r} where a list is expected "
                        f"(write {action.dest}: [{value}])"
                    )
                # argparse converts a string default ("no" -> False) but keeps any other as it is: 3 or [] would be
                # taken as true
                boolean = getattr(action.type, "__name__", None) == "string_to_bool"  # HfArgumentParser's (TRL's copy)
                if boolean and value is not None and not isinstance(value, (bool, str)):
                    raise UserError(f"{action.dest}: {config} gives {value!r} where true or false is expected")
            return super().set_defaults_with_config(**values)

    parser = Parser(list(dataclass_types), allow_abbrev=False)
    values = read_yaml(config, "--config") if config else None  # a repeated key or a parse error, named
    json_fields = {name for t in dataclass_types for name in getattr(t, "_VALID_DICT_FIELDS", ())}
    _check_json_values(json_fields, argv, values if isinstance(values, dict) else {})
    with user_file(config, "--config") if config else contextlib.nullcontext(), user_input(None):
        parsed = parser.parse_args_and_config(argv)
    for args in parsed:
        if isinstance(args, TrainingArguments):
            (check_ranges or check_training_ranges)(args)
    return tuple(parsed)


# Dict fields that also take a file path (transformers reads a JSON file there).
_PATH_TAKEN = {"deepspeed", "fsdp_config", "accelerator_config"}


def _check_json_values(fields: set[str], argv: list[str], yaml_values: dict) -> None:
    """A dict field (`generation_kwargs`, `model_init_kwargs`, ...) given on the command line or in the YAML is a JSON
    object (text that parses to one), else a `UserError` naming the field: transformers' own `json.loads` error names
    none, and a text that does not start with `{` (or a YAML list) stayed text and failed later with a traceback.
    `deepspeed`, `fsdp_config` and `accelerator_config` also take a file path."""
    given = {name: value for name, value in yaml_values.items() if name in fields}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        flag, eq, value = arg[2:].partition("=")
        name = flag.replace("-", "_")
        if name in fields and (eq or i + 1 < len(argv)):
            given[name] = value if eq else argv[i + 1]
    for name, value in given.items():
        text = value.strip() if isinstance(value, str) else None
        if text is not None and text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                raise UserError(f"{name}: not valid JSON ({err.msg} at column {err.colno}): {text!r}") from None
        if name in _PATH_TAKEN and text is not None:
            continue  # a file path
        if value is not None and not isinstance(value, dict):
            raise UserError(f"{name}: expected a JSON object like '{{\"key\": value}}', got {value!r}")
