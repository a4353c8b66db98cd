"""YAML -> models. Errors carry file:line:col, the key path, a cause and a fix.

Parsing is PyYAML's C loader in safe mode: compose a node tree once (the nodes keep
their marks), check it for what recipes may not contain, construct plain data,
validate it with pydantic, and map every pydantic error back to the node it came
from. DVC's YAML errors are the model.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel

from kiln import pins
from kiln.catalog.diagnose import find, snippet, validate
from kiln.catalog.indent import misindented
from kiln.errors import MAX_PROBLEMS, KilnError, Location, Problem, capped

try:  # the C loader is ~10x faster; PyYAML wheels ship it
    from yaml import CSafeLoader as _Base
except ImportError:  # pragma: no cover - only on exotic builds
    from yaml import SafeLoader as _Base  # type: ignore[assignment]

LOADER = _Base.__name__  # the parse cache keys on it (kiln/catalog/cache.py)
M = TypeVar("M", bound=BaseModel)
_STR = "tag:yaml.org,2002:str"
_MEMO_MAX = 4096  # values remembered per table: a recipe repeats a few dozen,
_MEMO_LEN = 64  # each short: a 1 MB scalar is not kept for the process's life


class _Loader(_Base):
    """The safe loader, resolving each plain scalar's tag once per process.

    PyYAML's resolver is Python, called per node (a third of composing a catalog):
    it matches a plain scalar's text against the YAML 1.1 patterns, and walks path
    resolvers, which only `add_path_resolver` creates and nothing here does. The
    tag is a function of the text alone, so it is computed by PyYAML's own resolve
    the first time and looked up after that. With no path resolver, descending and
    ascending the tree do nothing: they skip even the check for path resolvers."""

    _plain: ClassVar[dict[str, str]] = {}

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is not yaml.ScalarNode:
            return str(super().resolve(kind, value, implicit))  # type: ignore[no-untyped-call]
        if not implicit[0]:  # quoted or tagged '!': never resolved by pattern
            return _STR
        tag = self._plain.get(value)
        if tag is None:
            tag = str(super().resolve(kind, value, implicit))  # type: ignore[no-untyped-call]
            if len(self._plain) < _MEMO_MAX and len(value) <= _MEMO_LEN:
                self._plain[value] = tag
        return tag

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass


assert not _Loader.yaml_path_resolvers, "the resolver memo assumes no path resolvers"

NO_ALIASES = "YAML anchors and aliases are not allowed"
MAX_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_EVENTS = 20_000  # a recipe holds a few dozen values; a prompt set a few hundred
MAX_INT_DIGITS = 100  # Python refuses to parse ints over 4,300 digits with a ValueError
_STD_TAGS = {
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")
}
_CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)


def _location(file: str, text: str, mark: Any, path: tuple[str | int, ...] = ()) -> Location:
    line, col = mark.line + 1, mark.column + 1
    return Location(file, line, col, path, snippet(text, line, col))


def _offset_location(file: str, text: str, offset: int) -> Location:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Location(file, line, col, (), snippet(text, line, col))


# ---------------------------------------------------------------- text and nodes


def _too_big(file: str, size: int, limit: int = MAX_BYTES) -> KilnError:
    return KilnError.one(
        f"file is {size} bytes, over the {limit}-byte limit",
        Location(file, 1, 1),
        "recipes are small; split the data or remove what is not needed"
        if limit == MAX_BYTES
        else "no file kiln writes is this big: restore it from git or rebuild it",
    )


def _utf8(file: str, raw: bytes) -> str:
    """Strict UTF-8, or a KilnError at the line of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise KilnError.one(
            f"invalid UTF-8 at byte {exc.start}", Location(file, line), "save the file as UTF-8"
        ) from None


def decode(file: str, raw: bytes) -> str:
    """Bytes -> text, refusing what a recipe must never be."""
    if len(raw) > MAX_BYTES:
        raise _too_big(file, len(raw))
    if raw.startswith(b"\xef\xbb\xbf"):
        raise KilnError.one(
            "file starts with a UTF-8 byte-order mark", Location(file, 1, 1), "save it without BOM"
        )
    text = _utf8(file, raw)
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


def _check_depth(file: str, text: str, scan: bool = False) -> None:
    """Reject deep nesting before the recursive composer sees it, and more values than
    any recipe holds before composing them costs seconds (60,000 keys: 1.7 s).

    Only run on a text that has MAX_DEPTH flow brackets or is 64 * MAX_DEPTH bytes
    long. A shorter one holds fewer than 20,000 values, and nests at most a thousand
    levels (`- ` is two bytes a level), which PyYAML's composer (C, its own stack)
    takes in its stride: the walk that builds its data counts the levels instead, and
    refuses the same way (_Builder.build, _fast).
    """
    if not scan and text.count("[") + text.count("{") < MAX_DEPTH and len(text) < 64 * MAX_DEPTH:
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


def _line_offset(text: str, line: int) -> int:
    """The offset of the start of 1-based `line`."""
    offset = 0
    for _ in range(line - 1):
        offset = text.index("\n", offset) + 1
    return offset


def compose(file: str, text: str) -> yaml.Node:
    try:
        _check_depth(file, text)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        if exc.problem == "exceeded maximum nesting depth":  # libyaml's cap, 1,000 levels
            # A short text of block levels: the scan says where level MAX_DEPTH + 1
            # starts. (Flow levels stop libyaml's look-ahead first: its words stand.)
            with contextlib.suppress(yaml.YAMLError):
                _check_depth(file, text, scan=True)
        mark = exc.problem_mark or exc.context_mark
        hint = misindented(text, mark.line + 1) if mark else None
        if hint is not None:  # PyYAML's words for it name no line a person would fix
            at = _offset_location(file, text, _line_offset(text, hint.line) + hint.indent)
            fix = f"indent it {hint.siblings} spaces, as its siblings are"
            raise KilnError.one(f"YAML indentation: {hint.cause()}", at, fix) from None
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
    return node


def _too_deep(file: str, text: str, node: yaml.Node) -> KilnError:
    return KilnError.one(
        f"nesting depth over {MAX_DEPTH} levels",
        _location(file, text, node.start_mark),
        "flatten the document",
    )


class _Builder:
    """Checks a composed tree for what recipes may not contain, and builds plain data
    from it in the same walk (scalars through PyYAML's own safe constructors).

    This is the located walk: it carries every node's key path, and collects every
    problem. `_fast` builds the same data when there is no problem to report."""

    _scalars = yaml.constructor.SafeConstructor()
    _construct: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "tag:yaml.org,2002:str": lambda n: n.value,
        "tag:yaml.org,2002:int": _scalars.construct_yaml_int,
        "tag:yaml.org,2002:float": _scalars.construct_yaml_float,
        "tag:yaml.org,2002:bool": _scalars.construct_yaml_bool,
        "tag:yaml.org,2002:null": _scalars.construct_yaml_null,
    }

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text
        self.seen: set[int] = set()
        self.problems: list[Problem] = []

    def fail(self, cause: str, node: yaml.Node, path: tuple[str | int, ...], fix: str = "") -> None:
        self.problems.append(
            Problem(cause, _location(self.file, self.text, node.start_mark, path), fix)
        )

    def build(self, node: yaml.Node, path: tuple[str | int, ...] = (), depth: int = 1) -> Any:
        if len(self.problems) > MAX_PROBLEMS:
            return None  # hostile input: 80,000 aliases took 257 s to report one by one
        if id(node) in self.seen:
            return self.fail(NO_ALIASES, node, path, "write the value out")
        self.seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            make = self._construct.get(node.tag)
            if make is None:
                return self.fail(f"tag {node.tag!r} is not allowed", node, path, "remove the tag")
            if node.tag.endswith(":int") and len(node.value) > MAX_INT_DIGITS:
                return self.fail(f"an integer of {len(node.value)} digits", node, path)
            return make(node)
        if depth > MAX_DEPTH:  # a small file _check_depth did not scan: `- - - ... a`
            raise _too_deep(self.file, self.text, node)
        if node.tag not in _STD_TAGS:
            return self.fail(f"tag {node.tag!r} is not allowed", node, path, "remove the tag")
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        out: dict[str, Any] = {}
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key_node.tag == "tag:yaml.org,2002:merge" or key == "<<":
                self.fail("merge keys ('<<') are not allowed", key_node, path)
            elif not isinstance(key_node, yaml.ScalarNode) or not isinstance(key, str):
                self.fail("keys must be plain strings", key_node, path)
            elif key in first:
                where = (*path, key)
                self.fail(
                    f"duplicate key {key!r} (first at line {first[key]})",
                    key_node,
                    where,
                    "keep one of them",
                )
            else:
                first[key] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, (*path, key), depth + 1)
        return out


class _Slow(Exception):
    """Something the located walk reports (or might): build again with it."""


_MISSING = object()
_SEQ, _MAP = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_MERGE, _INT = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:int"
# The other scalar tags, each with the values PyYAML's constructor gave (a function of
# the text alone: '0o17', '017' and '0x0F' stay octal and hex as YAML 1.1 has them).
_VALUES: dict[str, dict[str, Any]] = {
    t: {} for t in (_INT, *(f"tag:yaml.org,2002:{t}" for t in ("float", "bool", "null")))
}


def _fast(node: yaml.Node, depth: int, seen: set[int] | None) -> Any:
    """`_Builder.build` for a tree with nothing to report: the same data, without key
    paths or the alias walk (`seen` is None when the text has no '&': an alias needs
    an anchor, and PyYAML refuses one without as "found undefined alias"). Raises
    _Slow at anything `build` would report; KilnError past MAX_DEPTH, as it does."""
    if seen is not None:
        if id(node) in seen:
            raise _Slow
        seen.add(id(node))
    cls = node.__class__
    if cls is yaml.ScalarNode:
        tag = node.tag
        if tag == _STR:
            return node.value
        values = _VALUES.get(tag)
        if values is None:
            raise _Slow  # a tag that is not allowed
        text = node.value
        value = values.get(text, _MISSING)
        if value is _MISSING:
            if tag == _INT and len(text) > MAX_INT_DIGITS:
                raise _Slow
            value = _Builder._construct[tag](node)
            if len(values) < _MEMO_MAX and len(text) <= _MEMO_LEN and value == value:  # not NaN
                values[text] = value
        return value
    if depth > MAX_DEPTH:
        raise _Slow
    if cls is yaml.SequenceNode:
        if node.tag != _SEQ:
            raise _Slow
        return [_fast(item, depth + 1, seen) for item in node.value]
    if cls is not yaml.MappingNode or node.tag != _MAP:
        raise _Slow
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        if key_node.__class__ is not yaml.ScalarNode or key_node.tag == _MERGE:
            raise _Slow
        key = key_node.value
        if key == "<<" or key in out:
            raise _Slow
        out[key] = _fast(value_node, depth + 1, seen)
    return out


def _anchors(text: str) -> re.Match[str] | None:
    if "&" not in text:
        return None
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
    try:
        return text, node, _fast(node, 1, set() if "&" in text else None)
    except _Slow:
        pass
    builder = _Builder(file, text)
    data = builder.build(node)
    if builder.problems:
        raise KilnError(capped(builder.problems, file))
    return text, node, data


class Source:
    """One YAML file as composed: where its keys are.

    A file read from the parse cache (kiln/catalog/cache.py) comes with its text
    only; its node tree is composed from that text the first time a location is
    asked for, which only an error does."""

    __slots__ = ("_node", "file", "text")

    def __init__(self, file: str, text: str, node: yaml.Node | None = None) -> None:
        self.file, self.text, self._node = file, text, node

    @property
    def node(self) -> yaml.Node:
        if self._node is None:
            self._node = compose(self.file, self.text)
        return self._node

    def location(self, node: yaml.Node, path: tuple[str | int, ...] = ()) -> Location:
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        return Location(self.file, line, col, path, snippet(self.text, line, col))


def read_source(path: Path, display: str | None = None) -> tuple[Source, Any]:
    """One YAML file -> (where its nodes are, its plain data), or KilnError."""
    file = display or str(path)
    text, node, data = read_yaml(file, _read_capped(path, file))
    return Source(file, text, node), data


def _read_capped(path: Path, file: str, limit: int = MAX_BYTES) -> bytes:
    """At most limit + 1 bytes of a regular file, never through a symlink: a recipe
    linked to /dev/zero would never end, one linked to ~/.ssh would leak into errors;
    opened without blocking, so a FIFO is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KilnError.one("file not found", Location(file)) from None
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot read: {exc.strerror}"
        raise KilnError.one(why, Location(file, 1), "commit the file itself") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KilnError.one("is not a regular file", Location(file, 1), "commit a plain file")
        if st.st_size > limit:
            raise _too_big(file, st.st_size, limit)
        # One read of the size fstat gave, and a byte more to see a file still growing;
        # more reads only after a short one or while it grows, to limit + 1 bytes.
        chunks = [os.read(fd, st.st_size + 1)]
        total = len(chunks[0])
        while total != st.st_size and total <= limit:
            chunk = os.read(fd, min(limit + 1 - total, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path, display: str | None = None, limit: int = MAX_BYTES) -> str:
    """One text file with the recipe reader's guards (a regular file, never through a
    symlink nor waiting on a FIFO, at most `limit` bytes, strict UTF-8)."""
    file = display or str(path)
    raw = _read_capped(path, file, limit)
    if len(raw) > limit:  # it grew after fstat
        raise _too_big(file, len(raw), limit)
    return _utf8(file, raw)


def load_yaml_model(model: type[M], path: Path, display: str | None = None) -> M:
    source, data = read_source(path, display)
    return validate(model, data, [source])


# ---------------------------------------------------------------- JSON

MAX_JSON_BYTES = 16 << 20  # the biggest manifest is 36 KB; one run adds a few KB
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _deeper(data: Any) -> bool:
    return pins.too_deep(data, MAX_DEPTH)


def _json_too_deep(file: str, text: str) -> KilnError:
    """Where the first level too deep opens: strings skipped, brackets counted."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return KilnError.one(
                    f"nesting depth over {MAX_DEPTH} levels",
                    _offset_location(file, text, token.start()),
                    "flatten the document",
                )
        elif char in "]}":
            depth -= 1
    return KilnError.one(f"nesting depth over {MAX_DEPTH} levels", Location(file, 1))


def read_json(path: Path, display: str | None = None, limit: int = MAX_JSON_BYTES) -> Any:
    """One JSON file -> its data, with the recipe reader's guards: a regular file,
    never through a symlink nor waiting on a FIFO, of at most `limit` bytes, strict
    UTF-8, nested at most MAX_DEPTH levels; KilnError with the file and line if not.

    json.loads recurses, so 100,000 levels are a RecursionError, caught; what it
    parses is then measured (a fifth of the parse for a manifest) and refused past
    MAX_DEPTH, located at the bracket that opens the first level too deep."""
    file = display or str(path)
    raw = _read_capped(path, file, limit)
    if len(raw) > limit:  # it grew after fstat
        raise _too_big(file, len(raw), limit)
    text = _utf8(file, raw)
    try:
        data = json.loads(text)
    except RecursionError:
        raise _json_too_deep(file, text) from None
    except json.JSONDecodeError as exc:
        where = Location(file, exc.lineno, exc.colno, (), snippet(text, exc.lineno, exc.colno))
        raise KilnError.one(f"invalid JSON: {exc.msg}", where) from None
    except ValueError as exc:  # an integer over Python's 4,300 digits
        long = re.search(f"[0-9]{{{sys.get_int_max_str_digits() + 1},}}", text)
        where = _offset_location(file, text, long.start()) if long else Location(file, 1)
        raise KilnError.one(f"invalid JSON: {exc}", where) from None
    if _deeper(data):
        raise _json_too_deep(file, text)
    return data


def load_json_model(model: type[M], path: Path, display: str | None = None) -> M:
    file = display or str(path)
    return validate(model, read_json(path, file), [], file)


def locate(path: Path, file: str, key_path: tuple[str | int, ...]) -> Location:
    """file:line:col of a key in an already valid YAML file."""
    source, _ = read_source(path, file)
    return source.location(find(source.node, key_path)[0], key_path)
