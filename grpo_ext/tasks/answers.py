"""Answer extraction shared by the tasks: numbers (canonical form, last number) and ``\\boxed{}`` answers.

Pure string functions; nothing here evaluates model text. Task-specific checking (math-verify for MATH) lives
with its task.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number: thousands groups (1,234,567) or plain digits, optional decimals; or a bare decimal (.5).
NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|-?\.\d+")
_TEXT_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


# ---- numbers -----------------------------------------------------------------------------------------------------


def normalize_number(text: str) -> str:
    """A number in canonical form: ``$1,200.`` -> ``1200``, ``12.0`` -> ``12``, ``-0`` -> ``0``, ``0.50`` -> ``0.5``.

    Strips whitespace, ``$``/``\\$``, commas, ``%``, and a trailing ``.``; text that is not a number after that is
    returned as given, only stripped (so it can still be compared and voted on).
    """
    text = text.strip()
    s = text
    for junk in ("\\$", "$", ",", "\\%", "%", "\\!", "\\,", " "):
        s = s.replace(junk, "")
    s = s.rstrip(".")
    try:
        value = Decimal(s)
    except InvalidOperation:
        return text
    if not value.is_finite():
        return text
    if value == value.to_integral_value():
        return str(int(value))  # int(Decimal("-0")) == 0
    return format(value.normalize(), "f")


def numbers_in(text: str) -> list[str]:
    """Every number in `text`, left to right; a ``-`` counts as a sign only when it follows no digit/letter/``)``."""
    out = []
    for match in NUMBER_RE.finditer(text):
        number, start = match.group(), match.start()
        if number.startswith("-") and start > 0 and (text[start - 1].isalnum() or text[start - 1] in ")]}"):
            number = number[1:]  # "5-3": a subtraction, not -3
        out.append(number)
    return out


def last_number(text: str) -> str | None:
    """The last number in `text`, normalised, or None."""
    numbers = numbers_in(text)
    return normalize_number(numbers[-1]) if numbers else None


# ---- boxed answers -----------------------------------------------------------------------------------------------


def _braced(text: str, start: int) -> str | None:
    """The content of the brace group opening at ``text[start] == "{"``, or None if it never closes.

    Escaped braces (``\\{``, ``\\}``) are literal characters and do not open or close groups.
    """
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in `text`, braces balanced; None if none.

    ``\\boxed 5`` (no braces) gives ``5`` (up to the next ``$`` or line end). A last box that never closes
    (a truncated completion) gives None: the final answer was not finished. An empty box gives None.
    """
    matches = list(_BOXED_RE.finditer(text))
    if not matches:
        return None
    end = matches[-1].end()
    rest = text[end:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        content = _braced(text, end + len(rest) - len(stripped))
    elif rest[:1].isspace():
        content = re.split(r"[$\n]", stripped, maxsplit=1)[0]
    else:
        return None
    if content is None or not content.strip():
        return None
    return content.strip()


def normalize_boxed(content: str) -> str | None:
    """A ``\\boxed{}`` content as a numeric answer key: the number it holds (``18\\text{ dollars}`` -> ``18``)."""
    content = _TEXT_WRAPPER_RE.sub(r" \1 ", content).strip()
    if not content:
        return None
    direct = normalize_number(content)
    if NUMBER_RE.fullmatch(direct):
        return direct
    number = last_number(content)
    return number if number is not None else direct
