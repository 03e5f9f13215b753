"""The user-error type, and the places where the user's own files become errors that name them.

`UserError` is raised where input is validated: a config field, a flag, a file the user gave, a reward function the
user wrote. `grpo_ext.cli.run_cli` prints it as one line and exits 2. Anything else that escapes (a plain
`ValueError`, `KeyError`, `TypeError`, `RuntimeError`) is a bug of ours and keeps its traceback. Errors of the
machine or of the user's files (`OSError`: a missing file, a read-only or full disk; `SafetensorError`: a torn
weights file) are one line too, and the helpers here turn them into a `UserError` that names the file where the
caller knows which file it was.

`UserError` subclasses `ValueError`, so code and tests that catch `ValueError` keep working.
"""

from __future__ import annotations

import collections.abc
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["UserError", "one_line", "read_json_object", "read_yaml", "user_file", "user_input"]


class UserError(ValueError):
    """Bad input from the user: one line naming the culprit and what was expected (`run_cli`: exit code 2)."""


def one_line(err: BaseException) -> str:
    """The message `grpo_ext.cli.run_cli` prints (and a failed run's record keeps): the first line of the error, with
    the file an `OSError` names."""
    if isinstance(err, OSError) and err.filename is not None:
        reason = err.strerror or type(err).__name__
        message = f"{err.filename}: {reason}"
    else:
        message = str(err).strip().splitlines()[0] if str(err).strip() else ""
        if not isinstance(err, UserError):  # an OSError without a file, a SafetensorError: say which kind
            message = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return message or type(err).__name__


@contextlib.contextmanager
def user_input(what: str | None) -> Iterator[None]:
    """Inside, a `ValueError` comes from validating the user's input (TRL's and our configs' `__post_init__`, a task's
    knobs): re-raised as a `UserError` (its message prefixed with `what` unless it names it already). Keep the block
    to the validation itself (parsing, building the task), so a `ValueError` of a real bug elsewhere keeps its
    traceback."""
    try:
        yield
    except UserError:
        raise
    except ValueError as err:
        message = str(err).strip() or type(err).__name__
        raise UserError(message if what is None or what in message else f"{what}: {message}") from err


@contextlib.contextmanager
def user_file(path: str | Path, what: str) -> Iterator[None]:
    """Inside, reading or parsing `path` (`what`: the flag or field that named it) fails with a `UserError` naming the
    file: unreadable (`OSError`), not JSON/YAML/UTF-8, or a torn safetensors file."""
    try:
        yield
    except UserError:
        raise
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise UserError(f"{what}: cannot read {path}: {reason}") from err
    except Exception as err:
        if _is_file_format_error(err):
            raise UserError(f"{what}: {path} is not a valid file ({type(err).__name__}: {err})") from err
        raise


def read_json_object(path: str | os.PathLike, what: str, holds: str = "a JSON object") -> dict:
    """The JSON object in `path`, else a `UserError` naming `what` (the flag or field that led to it) and the file:
    unreadable, not UTF-8 or not JSON (`user_file`), or JSON that is not an object (`[]`, `3`: a record of ours is
    always an object, and reading a key of a list was a traceback). `holds`: what the file should be (the message)."""
    with user_file(path, what):
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise UserError(f"{what}: {path} is not {holds}: expected a JSON object, got {type(value).__name__}")
    return value


def _is_file_format_error(err: BaseException) -> bool:
    """A safetensors or YAML parse error (checked by name: neither library is imported here)."""
    return type(err).__name__ in ("SafetensorError", "HeaderTooLarge") or type(err).__module__.startswith("yaml")


def read_yaml(path: str | os.PathLike, what: str):
    """The YAML document in `path`; a `UserError` naming the file when it cannot be read or parsed, or when a mapping
    repeats a key (YAML keeps the last one silently, so a setting the user sees in the file would not be the one
    used)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, collections.abc.Hashable):
                continue  # YAML itself refuses it
            if key in seen:
                raise UserError(
                    f"{what}: {path} line {key_node.start_mark.line + 1}: key {key!r} is given twice (YAML would keep "
                    "the last one silently); keep one"
                )
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    with user_file(path, what):
        loader = StrictLoader(Path(path).read_text())
        try:
            node = loader.get_single_node()
            if node is not None and _expanded_size(node, {}) > MAX_YAML_NODES:
                raise UserError(
                    f"{what}: {path} expands to more than {MAX_YAML_NODES:,} values through its aliases (&anchor / "
                    "*alias): not a config"
                )
            return None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()


# A config has hundreds of values; nested aliases can make a few lines stand for billions ("billion laughs"), which
# every reader of the parsed value (and an error message quoting it) would then expand.
MAX_YAML_NODES = 100_000


def _expanded_size(node, sizes: dict) -> int:
    """Values `node` stands for once every alias is expanded (an alias is the same node object as its anchor)."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a recursive alias counts once (SafeLoader then refuses or builds it, as it does)
        children = node.value if isinstance(node.value, list) else []
        items = [item for child in children for item in (child if isinstance(child, tuple) else (child,))]
        sizes[id(node)] = 1 + sum(_expanded_size(item, sizes) for item in items)
    return sizes[id(node)]
