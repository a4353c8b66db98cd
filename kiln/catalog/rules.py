"""Compatibility rules as data (catalog/rules.yaml), applied to recipes by `doit check`.

The table is the reviewed artifact; this module only interprets its small matcher
language. Each violation cites the rule id and points at the recipe line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from kiln.catalog import RULES_FILE
from kiln.errors import Problem

if TYPE_CHECKING:
    from kiln.catalog.yaml import Source

MISSING = object()


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[a-z0-9-]+$", description="Stable id errors cite.")
    message: str = Field(description="What is wrong when the rule is violated.")
    fix: str = Field(description="What to do about it.")
    when: dict[str, Any] = Field(description="Paths that must all match for the rule to apply.")
    then: dict[str, Any] = Field(min_length=1, description="Paths that must then all match.")


class RuleTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: int = Field(description="Rules schema version; this is version 1.")
    allowlists: dict[str, list[str]] = Field(description="Named lists rules can refer to.")
    rules: list[Rule] = Field(description="The rules, in the order they are checked.")


@dataclass(frozen=True)
class Violation:
    rule: Rule
    path: tuple[str, ...]  # the recipe key to point at


def get(data: Any, dotted: str) -> Any:
    """A dotted path into a recipe model (attributes) or dict (keys)."""
    for part in _parts(dotted):
        data = data.get(part, MISSING) if isinstance(data, dict) else getattr(data, part, MISSING)
        if data is MISSING:
            return MISSING
    return data


@cache
def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(dotted.split("."))


def matches(value: Any, matcher: Any, allowlists: dict[str, list[str]]) -> bool:
    if isinstance(matcher, dict):
        (op, arg), *rest = matcher.items()
        if rest:
            raise ValueError(f"one operator per matcher: {matcher}")
        if op == "present":
            return (value is not MISSING and value is not None) == bool(arg)
        if op == "not":
            return not matches(value, arg, allowlists)
        if op == "gt":
            return isinstance(value, int | float) and value > arg
        if op == "allowlist":
            return value in allowlists[arg]
        raise ValueError(f"unknown matcher {op!r}")
    if isinstance(matcher, list):
        return value in matcher
    return bool(value == matcher)


Test = Callable[[Any], bool]


def compiled(matcher: Any, allowlists: dict[str, list[str]]) -> Test:
    """`matches(value, matcher, allowlists)` as one function of the value, the matcher
    read once. A malformed matcher raises ValueError when it is applied, as matches
    does, not when it is compiled."""
    if isinstance(matcher, dict):
        (op, arg), *rest = matcher.items()
        if rest or op not in ("present", "not", "gt", "allowlist"):
            return lambda value: matches(value, matcher, allowlists)  # raises ValueError
        if op == "present":
            want = bool(arg)
            return lambda value: (value is not MISSING and value is not None) == want
        if op == "not":
            inner = compiled(arg, allowlists)
            return lambda value: not inner(value)
        if op == "gt":
            return lambda value: isinstance(value, int | float) and value > arg
        return lambda value: value in allowlists[arg]
    if isinstance(matcher, list):
        return lambda value: value in matcher
    return lambda value: bool(value == matcher)


@dataclass(frozen=True)
class _Compiled:
    rule: Rule
    when: tuple[tuple[str, Test], ...]
    then: tuple[tuple[str, Test], ...]


@dataclass(frozen=True)
class Rules:
    table: RuleTable

    @cached_property
    def _compiled(self) -> tuple[_Compiled, ...]:
        lists = self.table.allowlists

        def tests(paths: dict[str, Any]) -> tuple[tuple[str, Test], ...]:
            return tuple((path, compiled(m, lists)) for path, m in paths.items())

        return tuple(_Compiled(r, tests(r.when), tests(r.then)) for r in self.table.rules)

    def check(self, recipe: BaseModel) -> list[Violation]:
        out = []
        values: dict[str, Any] = {}  # rules share paths: each is read once per recipe
        for rule in self._compiled:  # plain loops: doit check runs this per recipe
            for path, test in rule.when:
                if path not in values:
                    values[path] = get(recipe, path)
                if not test(values[path]):
                    break
            else:
                failed = [path for path, test in rule.then if not test(_read(values, recipe, path))]
                if failed:
                    out.append(Violation(rule.rule, _parts(failed[0])))
        return out

    def required(self, values: dict[str, Any], path: str) -> Any:
        """The value the first rule that applies to `values` (dotted path -> value)
        demands at `path`, or MISSING: what `doit new` writes so its recipe passes."""
        for rule in self._compiled:
            if all(test(values.get(p, MISSING)) for p, test in rule.when):
                want = rule.rule.then.get(path, MISSING)
                if not isinstance(want, dict | list):
                    return want
        return MISSING


def _read(values: dict[str, Any], recipe: BaseModel, path: str) -> Any:
    if path not in values:
        values[path] = get(recipe, path)
    return values[path]


def load(
    path: Path | None = None,
    read: Callable[[Path, str], tuple[Source, Any]] | None = None,
) -> Rules:
    """The rules of `path` (default: this checkout's), read by `read` (the catalog's
    parse cache) or parsed afresh."""
    from kiln.catalog.diagnose import validate
    from kiln.catalog.yaml import read_source

    source, data = (read or read_source)(path or RULES_FILE, "catalog/rules.yaml")
    return Rules(validate(RuleTable, data, [source]))


def problem(v: Violation, location: Any) -> Problem:
    return Problem(f"rule {v.rule.id}: {v.rule.message}", location, v.rule.fix)
