"""YAML -> models. Errors carry file:line:col, the key path, a cause and a fix.

Parsing is PyYAML's C loader in safe mode: compose a node tree once (the nodes keep
their marks), check it for what recipes may not contain, construct plain data,
validate it with pydantic, and map every pydantic error back to the node it came
from. DVC's YAML errors are the model.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kiln.errors import KilnError, Location, Problem, did_you_mean, one_of
from kiln.schema import PATTERN_HELP

try:  # the C loader is ~10x faster; PyYAML wheels ship it
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - only on exotic builds
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

M = TypeVar("M", bound=BaseModel)

NO_ALIASES = "YAML anchors and aliases are not allowed"
MAX_BYTES = 1 << 20
MAX_DEPTH = 32
# Hostile input (issue 7): 80,000 aliases gave 80,000 problems, each with a snippet cut
# from the whole text, and took 257 s. Report the first ones and say how many more.
MAX_PROBLEMS = 50
MAX_EVENTS = 20_000  # a recipe holds a few dozen values; a prompt set a few hundred
MAX_INT_DIGITS = 100  # Python refuses to parse ints over 4,300 digits with a ValueError
_STD_TAGS = {
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")
}
_CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)


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


def _location(file: str, text: str, mark: Any, path: tuple[str | int, ...] = ()) -> Location:
    line, col = mark.line + 1, mark.column + 1
    return Location(file, line, col, path, snippet(text, line, col))


def _offset_location(file: str, text: str, offset: int) -> Location:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Location(file, line, col, (), snippet(text, line, col))


# ---------------------------------------------------------------- text and nodes


def _too_big(file: str, size: int) -> KilnError:
    return KilnError.one(
        f"file is {size} bytes, over the {MAX_BYTES}-byte limit",
        Location(file, 1, 1),
        "recipes are small; split the data or remove what is not needed",
    )


def decode(file: str, raw: bytes) -> str:
    """Bytes -> text, refusing what a recipe must never be."""
    if len(raw) > MAX_BYTES:
        raise _too_big(file, len(raw))
    if raw.startswith(b"\xef\xbb\xbf"):
        raise KilnError.one(
            "file starts with a UTF-8 byte-order mark", Location(file, 1, 1), "save it without BOM"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise KilnError.one(
            f"invalid UTF-8 at byte {exc.start}", Location(file, line), "save the file as UTF-8"
        ) from None
    for char, what in (("\x00", "a NUL byte"), ("\t", "a tab")):
        at = text.find(char)
        if at >= 0:
            raise KilnError.one(
                f"file contains {what}", _offset_location(file, text, at), "use spaces"
            )
    conflict = _CONFLICT.search(text)
    if conflict:
        raise KilnError.one(
            "merge-conflict marker",
            _offset_location(file, text, conflict.start()),
            "resolve the conflict first",
        )
    return text


def _check_depth(file: str, text: str) -> None:
    """Reject deep nesting before the recursive composer sees it, and more values than
    any recipe holds before composing them costs seconds (60,000 keys: 1.7 s).

    Only run when the text could nest deeply: flow brackets or deep indentation.
    """
    if text.count("[") + text.count("{") < MAX_DEPTH and len(text) < 64 * MAX_DEPTH:
        return
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_Loader)):
        if count > MAX_EVENTS:
            raise KilnError.one(
                f"more than {MAX_EVENTS} YAML values", _location(file, text, event.start_mark)
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise KilnError.one(
                    f"nesting depth over {MAX_DEPTH} levels",
                    _location(file, text, event.start_mark),
                    "flatten the document",
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def compose(file: str, text: str) -> yaml.Node:
    try:
        _check_depth(file, text)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _location(file, text, mark) if mark else Location(file)
        raise KilnError.one(f"YAML syntax: {exc.problem or exc.context}", where) from None
    except yaml.reader.ReaderError as exc:  # a control character: it knows its offset
        where = _offset_location(file, text, exc.position)
        raise KilnError.one(f"YAML syntax: {exc.reason}", where, "remove the character") from None
    except yaml.YAMLError as exc:
        raise KilnError.one(f"YAML syntax: {exc}", Location(file)) from None
    if node is None or not isinstance(node, yaml.MappingNode):
        where = _location(file, text, node.start_mark) if node else Location(file, 1, 1)
        raise KilnError.one("the document is not a mapping", where, "write 'key: value' pairs")
    problems: list[Problem] = []
    _check_nodes(file, text, node, (), set(), problems)
    if problems:
        raise KilnError(_capped(problems, file))
    return node


def _check_nodes(
    file: str,
    text: str,
    node: yaml.Node,
    path: tuple[str | int, ...],
    seen: set[int],
    problems: list[Problem],
) -> None:
    def here(n: yaml.Node, p: tuple[str | int, ...] = path) -> Location:
        return _location(file, text, n.start_mark, p)

    if len(problems) > MAX_PROBLEMS:
        return
    if id(node) in seen:
        problems.append(Problem(NO_ALIASES, here(node), "write the value out"))
        return
    seen.add(id(node))
    if node.tag not in _STD_TAGS:
        problems.append(Problem(f"tag {node.tag!r} is not allowed", here(node), "remove the tag"))
        return
    if node.tag.endswith(":int") and len(node.value) > MAX_INT_DIGITS:
        problems.append(Problem(f"an integer of {len(node.value)} digits", here(node)))
        return
    if isinstance(node, yaml.MappingNode):
        keys: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key_node.tag == "tag:yaml.org,2002:merge" or key == "<<":
                problems.append(Problem("merge keys ('<<') are not allowed", here(key_node)))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(Problem("keys must be plain strings", here(key_node)))
                continue
            if key in keys:
                first = keys[key].start_mark.line + 1
                problems.append(
                    Problem(
                        f"duplicate key {key!r} (first at line {first})",
                        here(key_node, (*path, key)),
                        "keep one of them",
                    )
                )
            keys[key] = key_node
            _check_nodes(file, text, value_node, (*path, key), seen, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(file, text, item, (*path, i), seen, problems)


def _capped(problems: list[Problem], file: str) -> list[Problem]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    more = Problem(
        f"and more problems after these {MAX_PROBLEMS}", Location(file), "fix these first"
    )
    return [*problems[:MAX_PROBLEMS], more]


def construct(node: yaml.Node) -> Any:
    loader = _Loader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _anchors(text: str) -> re.Match[str] | None:
    return re.search(r"(^|[\s\[{,:-])&[^\s]", text)


def read_yaml(file: str, raw: bytes) -> tuple[str, yaml.Node, Any]:
    """Bytes of one YAML file -> (text, node tree, plain data), or KilnError."""
    text = decode(file, raw)
    node = compose(file, text)
    anchor = _anchors(text)
    if anchor:
        # An anchor with no alias composes to an ordinary node, so find it in the text.
        raise KilnError.one(
            NO_ALIASES,
            _offset_location(file, text, anchor.start() + len(anchor.group(1))),
            "write the value out",
        )
    return text, node, construct(node)


# ---------------------------------------------------------------- pydantic errors


def _node_at(node: yaml.Node, loc: tuple[Any, ...]) -> tuple[yaml.Node, yaml.Node | None]:
    """Follow a pydantic loc into the node tree: (deepest node found, its key node)."""
    key_node: yaml.Node | None = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == part:
                    node, key_node = v, k
                    break
            else:
                continue  # a union tag or a missing key: stay on this node
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node, key_node = node.value[part], None
    return node, key_node


def _unwrap(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, list, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _unwrap(arg)]


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    models = [root]
    for part in loc:
        nxt: list[type[BaseModel]] = []
        for model in models:
            field = model.model_fields.get(str(part))
            if field is not None:
                nxt.extend(_unwrap(field.annotation))
            elif isinstance(part, str):  # a discriminated-union tag
                nxt.extend(m for m in models if part in str(m.model_fields.get("variant", "")))
        if nxt:
            models = nxt
    return models[0] if models else None


def _describe(err: Any, root: type[BaseModel]) -> tuple[str, str]:
    """(cause, fix) for one pydantic error, in our words."""
    kind, loc, value = err["type"], err["loc"], err.get("input")
    name = str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        return f"unknown key {name!r}", did_you_mean(name, allowed) or f"allowed: {one_of(allowed)}"
    if kind == "missing":
        parent = _model_at(root, loc[:-1])
        field = parent.model_fields.get(name) if parent else None
        why = f" ({field.description})" if field and field.description else ""
        return f"missing required key {name!r}{why}", f"add '{name}:'"
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        return f"{value!r} is not one of {one_of(expected)}", did_you_mean(str(value), expected)
    if kind == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        what, fix = PATTERN_HELP.get(pattern, (f"matching {pattern}", ""))
        return f"{value!r} is not {what}", fix
    if kind == "union_tag_invalid":
        expected = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected_tags", ""))
        tag = err.get("ctx", {}).get("tag", value)
        return f"{tag!r} is not one of {one_of(expected)}", did_you_mean(str(tag), expected)
    return err["msg"][0].lower() + err["msg"][1:], ""


def validate(model: type[M], data: Any, file: str, text: str, node: yaml.Node | None) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[: MAX_PROBLEMS + 1]:
            loc = tuple(err["loc"])
            path = loc
            cause, fix = _describe(err, model)
            if node is not None:
                target, key_node = _node_at(node, loc)
                if err["type"] == "string_type" and isinstance(target, yaml.ScalarNode):
                    # YAML 1.1 reads 0123, 1e5, yes and off as numbers and booleans.
                    read_as = type(err["input"]).__name__
                    cause = f"{target.value!r} is read by YAML as {read_as}, not as text"
                    fix = f"quote it: '{target.value}'"
                mark_node = key_node if err["type"] == "extra_forbidden" and key_node else target
                where = _location(file, text, mark_node.start_mark, path)
            else:
                where = Location(file, key_path=path)
            problems.append(Problem(cause, where, fix))
        raise KilnError(_capped(problems, file)) from None


def load_yaml_model(model: type[M], path: Path, display: str | None = None) -> M:
    file = display or str(path)
    raw = _read_capped(path, file)
    text, node, data = read_yaml(file, raw)
    return validate(model, data, file, text, node)


def _read_capped(path: Path, file: str) -> bytes:
    """At most MAX_BYTES + 1 bytes of a regular file, never through a symlink: a recipe
    linked to /dev/zero would never end, one linked to ~/.ssh would leak into errors."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KilnError.one("file not found", Location(file)) from None
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot read: {exc.strerror}"
        raise KilnError.one(why, Location(file, 1), "commit the file itself") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KilnError.one("is not a regular file", Location(file, 1), "commit a plain file")
        if st.st_size > MAX_BYTES:
            raise _too_big(file, st.st_size)
        return fh.read(MAX_BYTES + 1)


def load_json_model(model: type[M], path: Path, display: str | None = None) -> M:
    file = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except FileNotFoundError:
        raise KilnError.one("file not found", Location(file)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KilnError.one(f"cannot read: {exc}", Location(file)) from None
    except json.JSONDecodeError as exc:
        where = Location(file, exc.lineno, exc.colno, (), snippet(text, exc.lineno, exc.colno))
        raise KilnError.one(f"invalid JSON: {exc.msg}", where) from None
    return validate(model, data, file, text, None)


def locate(path: Path, file: str, key_path: tuple[str | int, ...]) -> Location:
    """file:line:col of a key in an already valid YAML file."""
    text, node, _ = read_yaml(file, path.read_bytes())
    target, _key = _node_at(node, key_path)
    return _location(file, text, target.start_mark, key_path)
