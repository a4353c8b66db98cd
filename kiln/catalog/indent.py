"""Indentation mistakes, explained in our words: PyYAML says "mapping values are not
allowed in this context" where a person wrote one key a few spaces too far in.

`misindented(text, line)` walks the block structure of the lines up to PyYAML's error
and returns the first line whose indentation opens no block and matches no enclosing
level, with the indentation its siblings use. Block scalars (`key: |` and `>-`) and
comments are skipped; flow collections are not block structure and end the walk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BLOCK_SCALAR = re.compile(r":\s*[|>][+-]?\d*\s*(#.*)?$")
_OPENS = re.compile(r"(:|^-|\s-)\s*(#.*)?$")  # `key:` or a bare `-` opens a nested block


@dataclass(frozen=True)
class Misindent:
    line: int  # 1-based
    indent: int
    siblings: int

    def cause(self) -> str:
        unit = "space" if self.indent == 1 else "spaces"
        return (
            f"line {self.line} is indented {self.indent} {unit}; its siblings use {self.siblings}"
        )


def misindented(text: str, line: int) -> Misindent | None:
    """The first badly indented line at or before `line` (1-based, PyYAML's error
    line plus one: it often notices on the next line), if there is one."""
    levels = [0]
    opened = False  # did the previous content line open a nested block?
    scalar_at: int | None = None  # indentation of a block scalar's key, while inside one
    for number, raw in enumerate(text.split("\n")[: line + 1], start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("---"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if scalar_at is not None:
            if indent > scalar_at:
                continue  # the scalar's own text
            scalar_at = None
        if stripped[0] in "[{" or stripped[-1] in ",[{":
            return None  # flow style: not what this explains
        if opened and indent > levels[-1]:
            levels.append(indent)
        else:
            closed = None  # the innermost block this line falls out of
            while levels and indent < levels[-1]:
                closed = levels.pop()
            if not levels or indent != levels[-1]:
                # between two levels it most likely meant the block it fell out of
                siblings = closed if closed is not None else levels[-1] if levels else 0
                return Misindent(number, indent, siblings)
        content = stripped[2:].lstrip() if stripped.startswith("- ") else stripped
        if stripped.startswith("- ") and content and not content.startswith("#"):
            # "- key: v": the item's own keys continue at the text after the dash
            levels.append(indent + len(stripped) - len(content))
            opened = bool(_OPENS.search(content)) and not _BLOCK_SCALAR.search(content)
        else:
            opened = bool(_OPENS.search(stripped)) and not _BLOCK_SCALAR.search(stripped)
        if _BLOCK_SCALAR.search(stripped):
            scalar_at = indent
    return None
