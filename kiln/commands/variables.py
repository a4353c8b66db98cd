"""Command-line variables (`doit VERB name=value`): declared once per verb, parsed here.

A verb declares its variables in one table of `Var`s (tasks.py holds the tables);
`resolve` turns what the command line gave into typed values. A name the verb
does not declare is an error with a did-you-mean, never ignored: `doit run ...
temprature=0.7` must not silently decode greedily. A value of the wrong type is an
error located at its variable; bools are spelled 1/0, true/false or yes/no and
nothing else, so `doit gc dry_run=yes` never deletes; a text variable with choices
(`format=markdown|json`) refuses any other value, listing the allowed ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from kiln.errors import KilnError, Location, Problem, did_you_mean, one_of

WHERE = "command line"
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
