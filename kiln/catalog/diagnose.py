"""pydantic errors -> Problems in our words, located in the YAML they came from.

A pydantic error has a loc (a key path). We follow it through the composed YAML
node tree to a line and column, and rewrite the message as a cause and a fix:
unknown keys and enum values get a did-you-mean, patterns say what they expect,
values YAML read as numbers say to quote them. With `extends`, a key may come from
a parent file; the deepest match along the chain (child first) is the location.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kiln.errors import MAX_PROBLEMS, KilnError, Location, Problem, capped, did_you_mean, one_of
from kiln.schema import PATTERN_HELP

if TYPE_CHECKING:  # a type only: kiln.catalog.yaml reads files and imports this module
    from kiln.catalog.yaml import Source

M = TypeVar("M", bound=BaseModel)


def snippet(text: str, line: int, column: int) -> str:
    """The offending line with a caret under the column (both 1-based)."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    if len(src) > 120:
        start = max(0, column - 60)
        src, column = src[start : start + 120], column - start
    gutter = f"{line:>5} | "
    return f"{gutter}{src}\n{' ' * (len(gutter) + column - 1)}^"


def find(node: yaml.Node, loc: Sequence[Any]) -> tuple[yaml.Node, yaml.Node | None, int]:
    """Follow `loc` into the tree: (deepest node, its key node, how many parts matched)."""
    key_node: yaml.Node | None = None
    matched = 0
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if k.value == part), None)
            if hit is None:
                continue  # a union tag, or a key the file does not have
            key_node, node = hit
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node, key_node = node.value[part], None
        else:
            continue
        matched += 1
    return node, key_node, matched


# ---------------------------------------------------------------- the models along a loc


def _unwrap(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, list, dict, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _unwrap(arg)]


def variant_of(model: type[BaseModel]) -> str | None:
    """The tag of a discriminated-union member ('draft' for Draft), else None."""
    field = model.model_fields.get("variant")
    args = typing.get_args(field.annotation) if field else ()
    return str(args[0]) if len(args) == 1 else None


def _walk(
    root: type[BaseModel], loc: Sequence[Any]
) -> tuple[list[type[BaseModel]], tuple[Any, ...]]:
    """Models at the end of `loc`, and `loc` without the union tags pydantic inserts."""
    models, shown = [root], []
    for part in loc:
        fields = [m.model_fields[str(part)] for m in models if str(part) in m.model_fields]
        tagged = [m for m in models if variant_of(m) == part]
        if tagged and not fields:
            models = tagged
            continue
        shown.append(part)
        nxt = [m for f in fields for m in _unwrap(f.annotation)]
        models = nxt or models
    return models, tuple(shown)


def _describe(err: Any, root: type[BaseModel]) -> tuple[str, str]:
    """(cause, fix) for one pydantic error."""
    kind, loc, value = err["type"], err["loc"], err.get("input")
    name = str(loc[-1]) if loc else ""
    parents, _ = _walk(root, loc[:-1])
    parent = parents[0]
    if kind == "extra_forbidden":
        allowed = sorted(parent.model_fields)
        here = variant_of(parent)
        if here is not None:  # a parameter of another execution variant?
            owners = [
                variant_of(m) for m in _unwrap(_union_of(root, loc)) if name in m.model_fields
            ]
            if owners:
                return (
                    f"{name!r} is not a parameter of variant {here!r}",
                    f"it belongs to {one_of([str(o) for o in owners])}; remove it",
                )
        return f"unknown key {name!r}", did_you_mean(name, allowed) or f"allowed: {one_of(allowed)}"
    if kind == "missing":
        field = parent.model_fields.get(name)
        why = f" ({field.description})" if field and field.description else ""
        return f"missing required key {name!r}{why}", f"add '{name}:'"
    if kind == "literal_error":
        said = err.get("ctx", {}).get("expected", "")
        # strings come quoted ("'a' or 'b'"); numbers bare ("16, 32 or 64")
        expected = re.findall(r"'([^']*)'", said) or re.split(r", | or ", said)
        return f"{value!r} is not one of {one_of(expected)}", did_you_mean(str(value), expected)
    if kind == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        what, fix = PATTERN_HELP.get(pattern, (f"matching {pattern}", ""))
        return f"{value!r} is not {what}", fix
    if kind == "union_tag_invalid":
        expected = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected_tags", ""))
        tag = err.get("ctx", {}).get("tag", value)
        return f"{tag!r} is not one of {one_of(expected)}", did_you_mean(str(tag), expected)
    if kind == "value_error":
        return str(err["ctx"]["error"]), ""
    return err["msg"][0].lower() + err["msg"][1:], ""


_TYPED = {"string_type", "bool_type", "int_type", "float_type"}
_WANTED = {"bool_type": "a boolean", "int_type": "an integer", "float_type": "a number"}
_READ_AS = {bool: "a boolean", int: "an integer", float: "a number", str: "text"}


def _typed(kind: str, node: yaml.ScalarNode, value: Any) -> tuple[str, str] | None:
    """Say what YAML read a scalar as, and how to write what the key wants."""
    written = node.value
    read_as = _READ_AS.get(type(value))
    if read_as is None:
        return None
    if kind == "string_type":
        # YAML 1.1 reads 0123, 1e5, yes and off as numbers and booleans.
        read = type(value).__name__
        return f"{written!r} is read by YAML as {read}, not text", f"quote it: '{written}'"
    wanted = _WANTED[kind]
    if kind == "bool_type":
        fix = "write true or false, unquoted"
    elif kind == "int_type":
        fix = "write a whole number, unquoted"
    else:
        fix = "write a number, unquoted"
    quoted = " (it is quoted)" if node.style in ("'", '"') else ""
    return f"{written!r} is read by YAML as {read_as}{quoted}, not {wanted}", fix


def _union_of(root: type[BaseModel], loc: Sequence[Any]) -> Any:
    """The annotation of the union field that holds the tagged member at `loc`."""
    models = [root]
    for part in loc:
        for m in models:
            if str(part) in m.model_fields:
                ann = m.model_fields[str(part)].annotation
                if any(variant_of(x) for x in _unwrap(ann)):
                    return ann
                models = _unwrap(ann) or models
                break
    return None


def problems_of(
    exc: ValidationError, root: type[BaseModel], sources: Sequence[Source], file: str = ""
) -> list[Problem]:
    out = []
    for err in exc.errors()[: MAX_PROBLEMS + 1]:
        loc = tuple(err["loc"])
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc += (err["ctx"]["discriminator"].strip("'"),)  # point at `variant:` itself
        _, path = _walk(root, loc)
        cause, fix = _describe(err, root)
        if not sources:
            out.append(Problem(cause, Location(file, key_path=path), fix))
            continue
        # The deepest match along the extends chain; the child wins ties.
        source, (target, key_node, _n) = max(
            ((s, find(s.node, loc)) for s in sources), key=lambda pair: pair[1][2]
        )
        if isinstance(target, yaml.ScalarNode) and err["type"] in _TYPED:
            cause, fix = _typed(err["type"], target, err["input"]) or (cause, fix)
        mark = key_node if err["type"] == "extra_forbidden" and key_node else target
        out.append(Problem(cause, source.location(mark, path), fix))
    return out


def validate(model: type[M], data: Any, sources: Sequence[Source], file: str = "") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where = file or (sources[0].file if sources else "")
        raise KilnError(capped(problems_of(exc, model, sources, where), where)) from None
