"""Command-line variables (`doit VERB name=value`): declared once per verb, parsed here.

A verb declares its variables in one table of `Var`s (tasks.py holds the tables);
`resolve` turns what the command line gave into typed values. A name the verb
does not declare is an error with a did-you-mean, never ignored: `doit run ...
temprature=0.7` must not silently decode greedily. A value of the wrong type is an
error located at its variable; bools are spelled 1/0, true/false or yes/no and
nothing else, so `doit gc dry_run=yes` never deletes; a text variable with choices
(`format=markdown|json`) refuses any other value, listing the allowed ones.

A variable that names a file (`messages=`, `json_schema=`, `grammar=`, `audio=`) is
read through `file_of` / `read_json` / `read_text`: resolved, refused unless it is a
regular file (or, where a folder is meant, a folder of them) inside the repository or
the system temp folder, a link out named as one and a FIFO or device as such, all
before a byte is read; then read capped at MAX_FILE_BYTES, with the recipe reader's
guards (kiln.catalog.yaml). Text given inline (`prompt=`, `system=`) has the same cap.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from kiln import pins
from kiln.errors import KilnError, Location, Problem, did_you_mean, one_of
from kiln.paths import ROOT, Paths

WHERE = "command line"
# A chat file, a schema, a grammar or a prompt: 1 MiB is ~250,000 tokens of text, past
# any bundle's max_seq_len, and tokenizes in well under a second. A 10 MB chat file
# took a minute and 2 GB to tokenize before its length was refused (issue 37).
MAX_FILE_BYTES = 1 << 20
BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
METAVAR = {str: "TEXT", int: "INT", float: "NUMBER", bool: "BOOL"}


@dataclass(frozen=True)
class Var:
    """One variable of a verb: its name, type, default and what it does."""

    name: str
    type: type[Any]  # str, int, float or bool
    default: Any
    help: str
    _: KW_ONLY
    metavar: str = ""  # what to show for the value (default: from the type)
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()  # a text variable's allowed values (default: any text)

    def usage(self) -> str:
        """`name=VALUE (default d): help`, the way `doit help TASK` shows it."""
        shown = "" if self.default is None else f" (default {_shown(self.default)})"
        metavar = self.metavar or "|".join(self.choices) or METAVAR[self.type]
        return f"{self.name}={metavar}{shown}: {self.help}"

    def parse(self, text: str) -> Any:
        """The typed value of `text`, or a Problem located at this variable."""
        where = Location(WHERE, key_path=(self.name,))
        if self.type is str:
            value = text if text != "" else self.default
            if self.choices and value not in self.choices:
                raise KilnError.one(
                    f"{text!r} is not one of {one_of(self.choices)}",
                    where,
                    did_you_mean(text, self.choices) or f"e.g. {self.name}={self.choices[0]}",
                )
            return value
        if self.type is bool:
            if text.lower() not in BOOLS:
                raise KilnError.one(
                    f"{text!r} is not a bool", where, f"write {self.name}=1 or {self.name}=0"
                )
            return BOOLS[text.lower()]
        try:
            value = self.type(text.strip())
        except ValueError:
            what = "an integer" if self.type is int else "a number"
            raise KilnError.one(
                f"{text!r} is not {what}", where, f"e.g. {self.name}={_shown(self.default)}"
            ) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise KilnError.one(f"{text!r} is not a finite number", where)
        if self.minimum is not None and value < self.minimum:
            raise KilnError.one(f"{text} is below {_shown(self.minimum)}", where)
        if self.maximum is not None and value > self.maximum:
            raise KilnError.one(f"{text} is over {_shown(self.maximum)}", where)
        return value


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


def usage(table: Sequence[Var]) -> str:
    """Every variable of a table on one line (doit shows only a task's first doc line)."""
    if not table:
        return "No variables."
    return "Variables: " + "; ".join(v.usage() for v in table) + "."


def resolve(
    table: Sequence[Var], given: Mapping[str, str], verb: str, also: Iterable[str] = ()
) -> dict[str, Any]:
    """name -> typed value for every variable of `table` (its default when not given).

    `also`: names this verb accepts on behalf of another that depends on it (`doit
    serve port=8001` runs `site` first; site must not refuse serve's port). Every
    problem is reported at once."""
    known = {v.name: v for v in table}
    problems: list[Problem] = []
    for name in given:
        if name not in known and name not in set(also):
            fix = did_you_mean(name, known) or (
                f"{verb} takes {', '.join(known)}" if known else f"{verb} takes no variables"
            )
            problems.append(Problem(f"unknown variable {name!r} for {verb}", Location(WHERE), fix))
    values = {}
    for var in table:
        try:
            values[var.name] = var.parse(given[var.name]) if var.name in given else var.default
        except KilnError as exc:
            problems.extend(exc.problems)
    if problems:
        raise KilnError(problems)
    return values


# ---------------------------------------------------------------- files and text


def at(name: str) -> Location:
    return Location(WHERE, key_path=(name,))


def file_of(name: str, value: str, folder: bool = False) -> Path:
    """The file (or, `folder`, the folder) a variable names, resolved; refused before
    anything is read when it leads out of the repository and the temp folder, is a
    FIFO, a device or a socket, or is a folder where a file is meant."""
    # the catalog's root, this checkout (its shipped clips, when KILN_ROOT is elsewhere)
    roots = dict.fromkeys((Paths.from_env().root, ROOT, Path(tempfile.gettempdir())))
    try:
        found = pins.within(Path(value), list(roots), value)
    except pins.PinError as exc:
        raise KilnError.one(exc.cause, at(name), exc.fix or f"{name}=FILE") from None
    if found.is_dir() and not folder:
        raise KilnError.one(f"{value} is a folder", at(name), f"{name}=FILE")
    size = found.stat().st_size
    if found.is_file() and size > MAX_FILE_BYTES:
        raise KilnError.one(
            f"{value} is {size:,} bytes; at most {MAX_FILE_BYTES:,}",
            at(name),
            "shorten it: no bundle takes that much text",
        )
    return found


def read_text(name: str, value: str) -> str:
    from kiln.catalog import yaml

    return yaml.read_text(file_of(name, value), value, MAX_FILE_BYTES)


def read_json(name: str, value: str) -> Any:
    from kiln.catalog import yaml

    return yaml.read_json(file_of(name, value), value, MAX_FILE_BYTES)


def capped_text(name: str, text: str | None) -> str | None:
    """Text given inline, refused past MAX_FILE_BYTES before it is tokenized."""
    if text is not None and len(text) > MAX_FILE_BYTES // 4:  # cheap first: chars <= bytes
        size = len(text.encode(errors="replace"))
        if size > MAX_FILE_BYTES:
            raise KilnError.one(
                f"{name} is {size:,} bytes; at most {MAX_FILE_BYTES:,}", at(name), "shorten it"
            )
    return text


def files_in(name: str, folder: Path, pattern: str) -> list[Path]:
    """The files of a folder a variable names that match `pattern`, each checked as
    `file_of` checks one (a link out, a FIFO)."""
    found = []
    for entry in sorted(folder.glob(pattern)):
        shown = os.path.join(str(folder), entry.name)
        found.append(file_of(name, shown))
    return found
