"""A config file's text checked before it is parsed: nesting depth and number sizes.

``tomllib`` and ``json`` recurse once per level of nested arrays and tables, and turn a
literal's digits into a Python int: a 1,000-deep value ended in a bare ``RecursionError``, and
an integer of more than 4,300 digits in a bare ``ValueError`` (Python's limit on int/str
conversion). No config needs either, so they are refused up front with the file and the key,
as every config error is (``ConfigError``): the key is read from the text (the current
``[table]`` header and the ``key =`` of the line), a best effort that is right for every
config this project documents.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NESTING", "MAX_DIGITS", "text_problem"]

MAX_NESTING = 64  # arrays and tables within each other; a config needs fewer than 10
MAX_DIGITS = 400  # the longest run of digits a literal may hold

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r'^\s*("?[A-Za-z0-9_.\- "]+?"?)\s*[=:]')
_JSON_KEY = re.compile(r'"([^"\\]+)"\s*:')
_DIGITS = re.compile(rf"\d{{{MAX_DIGITS + 1},}}")


def text_problem(text: str) -> tuple[str, str] | None:
    """``(key, rule)`` for the first value nested more than ``MAX_NESTING`` deep or holding a
    number of more than ``MAX_DIGITS`` digits, else None."""
    depth = 0
    section = ""
    key = ""
    for line in text.splitlines():
        header = _HEADER.match(line) if depth == 0 else None
        if header:
            section, key = header.group(1).strip(), ""
            continue
        found = _KEY.match(line) or _JSON_KEY.search(line)
        if found:
            key = found.group(1).strip().strip('"')
        where = ".".join(p for p in (section, key) if p) or "(top level)"
        digits = _DIGITS.search(_code(line))
        if digits:
            return where, (
                f"holds a number of {len(digits.group())} digits; at most {MAX_DIGITS} are read "
                '(a budget is a fraction such as "1/2" or a decimal such as 0.25)'
            )
        for ch in _code(line):
            if ch in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    return where, (
                        f"is nested more than {MAX_NESTING} levels deep (arrays or tables within "
                        "each other); no config value needs that many"
                    )
            elif ch in "]}":
                depth = max(0, depth - 1)
    return None


def _code(line: str) -> str:
    """The line without its quoted strings and its comment (brackets there do not nest)."""
    out = []
    quote = ""
    escaped = False
    for ch in line:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        else:
            out.append(ch)
    return "".join(out)
