"""What `doit help` prints: kiln's verbs first, one line each; `doit help VERB`: a
verb's variables as a wrapped table, with examples (issue 41).

doit's own `help` lists doit's commands (`forget`, `ignore`, `strace`) and none of
kiln's, and `doit help run` describes doit's `run` command, not kiln's generation.
tasks.Help replaces it through pyproject.toml's doit.COMMAND entry points: a kiln
verb, as users type it (`run` included), gets `text()`; anything else (`doit help
forget`) doit's own help.
"""

from __future__ import annotations

import shutil
import textwrap

from kiln.commands.variables import ALL, METAVAR, Var, Verb, _shown

# How each verb is typed most often: the first example of its help.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "build": (
        "doit build recipe=tiny-llama",
        "doit -n 2 build",
        "doit build recipe=NAME publish=1",
    ),
    "check": ("doit check", "doit check strict=1 format=json"),
    "plan": ("doit plan recipe=tiny-llama", "doit plan recipe=tiny-llama format=json"),
    "status": ("doit status", "doit status recipe=tiny-llama format=json"),
    "diff": ("doit diff base=origin/main", "doit diff base=HEAD~1 format=json"),
    "run": (
        'doit run recipe=tiny-llama prompt="Hello"',
        'doit run recipe=smollm2-135m-instruct chat=1 prompt="What is the capital of France?"',
    ),
    "new": ("doit new name=my-model model=org/name@<40-hex revision>",),
    "export": (
        "doit export recipe=tiny-llama dest=/tmp/tiny-llama",
        "python /tmp/tiny-llama/run.py Hello",
    ),
    "site": ("doit site",),
    "serve": ("doit serve", "doit serve port=8080"),
    "schema": ("doit schema",),
    "verify": ("doit verify", "doit verify repair=1"),
    "gc": ("doit gc dry_run=1", "doit gc"),
    "replay": ("doit replay recipes=tiny-llama", "doit replay tags=nightly executor=ray"),
}


def overview(width: int) -> str:
    """Every kiln verb with its one line, then where doit's own commands are."""
    name_width = max(len(v.name) for v in ALL) + 2
    lines = ["kiln's commands (doit VERB name=value ...; doit help VERB for its variables):", ""]
    for verb in ALL:
        first = verb.summary.split(" (exit")[0].rstrip(".")
        lines += _wrapped(f"  {verb.name:<{name_width}}", first, width)
    lines += [
        "",
        "doit's own commands: list, info, clean, forget, ignore, dumpdb, strace, reset-dep",
        "(doit help COMMAND for one). A step doit runs is printed '.  NAME'; '-- NAME' is a",
        "step it found up to date. doit runs from any folder of the repository: it finds",
        "dodo.py above and works from the root: a relative path in a variable starts there.",
    ]
    return "\n".join(lines)


def verb_help(verb: Verb, width: int) -> str:
    """The verb's line, its variables as a table (name, value, default, meaning), and
    its examples."""
    lines = [*_wrapped(f"doit {verb.name}: ", verb.summary, width), ""]
    if verb.vars:
        rows = [_row(v) for v in verb.vars]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        head = ("variable", "value", "default")
        widths = [max(w, len(h)) for w, h in zip(widths, head, strict=True)]
        lead = "  ".join(f"{h:<{w}}" for h, w in zip(head, widths, strict=True))
        lines.append(f"  {lead}  meaning")
        for row in rows:
            start = "  " + "  ".join(f"{c:<{w}}" for c, w in zip(row[:3], widths, strict=True))
            lines += _wrapped(start + "  ", row[3], width)
    else:
        lines.append("  No variables.")
    lines += ["", "Examples:", *(f"  {e}" for e in EXAMPLES.get(verb.name, ()))]
    return "\n".join(lines)


def _row(v: Var) -> tuple[str, str, str, str]:
    """name, value, default, meaning; a long list of choices goes into the meaning."""
    choices = "|".join(v.choices)
    value = v.metavar or (choices if len(choices) <= 16 else "CHOICE") or METAVAR[v.type]
    meaning = v.help if value != "CHOICE" else f"{v.help} (one of: {', '.join(v.choices)})"
    return v.name, value, "" if v.default is None else _shown(v.default), meaning


def _wrapped(lead: str, text: str, width: int) -> list[str]:
    """`text` after `lead`, wrapped to `width`, continuation lines under its start."""
    room = max(width - len(lead), 30)
    # whole words only: a name like Qwen2.5-VL or comma-separated never splits at its hyphen
    parts = textwrap.wrap(text, room, break_on_hyphens=False, break_long_words=False) or [""]
    return [lead + parts[0], *(" " * len(lead) + p for p in parts[1:])]


def text(args: list[str]) -> str | None:
    """What `doit help ARGS` prints, or None where doit's own help answers."""
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    verbs = {v.name: v for v in ALL}
    if not args:
        return overview(width)
    if args[0] in verbs:
        return verb_help(verbs[args[0]], width)
    return None
