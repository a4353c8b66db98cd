"""`doit export recipe=NAME dest=DIR`: a validated bundle out of the store, for use
outside kiln (issue 41, item 3).

DIR receives:

  bundle/        the bundle folder as the store holds it (runtime.open(DIR/bundle) runs it)
  manifest.json  what this checkout knows of the recipe: the lock and the evidence
                 (published, and this store's own: kiln.evidence.manifest.known)
  MODEL_CARD.md  checkpoint pin, precision, variant, backend; the gates and what this
                 host class measured against them, with scope and date; known limitations
  run.py         a runnable runtime.open example for the bundle's task

A recipe exports only when its current build (the plan's validate step) passed on
this host class: anything else is refused, located at the variable, unless
allow_unvalidated=1, and the card then says so. DIR is written whole or not at all:
everything goes into a sibling temporary folder first, renamed into place at the end.
An existing DIR is refused unless it is empty, or force=1 replaces it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from kiln import hostinfo
from kiln.canonical import pretty
from kiln.commands.variables import WHERE
from kiln.commands.workspace import catalog, plan_in, store
from kiln.errors import KilnError, Location

if TYPE_CHECKING:
    from kiln.schema import Evidence, Manifest, Recipe


def export(
    recipe: str | None, dest: str | None, allow_unvalidated: bool = False, force: bool = False
) -> None:
    if not recipe or "," in recipe:
        raise KilnError.one("name one recipe", Location(WHERE, key_path=("recipe",)))
    if not dest:
        raise KilnError.one(
            "name the folder to write", Location(WHERE, key_path=("dest",)), "dest=DIR"
        )
    from kiln.evidence import manifest

    cat = catalog(save=False)
    if recipe not in cat.recipes:
        raise KilnError.one(
            f"no recipe {recipe!r}", Location(WHERE, key_path=("recipe",)), "doit status lists them"
        )
    p = plan_in(cat, recipe)
    artifacts = store()
    bundle = p.step("bundle")
    if not artifacts.has(bundle.key):
        raise KilnError.one(
            f"{recipe} is not built here", None, f"build it first: doit build recipe={recipe}"
        )
    known = manifest.known(cat.paths, recipe)
    here = hostinfo.host_class(hostinfo.host())
    record = manifest.passed_here(known, p)
    if (record is None or record.verdict != "pass") and not allow_unvalidated:
        said = f"its verdict is {record.verdict}" if record else "it has no validation"
        raise KilnError.one(
            f"{recipe} is not validated on this host class ({here.label}): {said}",
            Location(WHERE, key_path=("allow_unvalidated",)),
            f"doit build recipe={recipe}, or export it anyway with allow_unvalidated=1",
        )
    target = Path(dest).expanduser().absolute()
    _refuse_kilns_own(target, cat.paths.never_sources)
    if target.exists() and not force and (not target.is_dir() or any(target.iterdir())):
        raise KilnError.one(
            f"{target} exists and is not empty",
            Location(WHERE, key_path=("dest",)),
            "name a new folder, or replace it with force=1",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
    try:
        shutil.copytree(artifacts.get(bundle.key).path, staging / "bundle")
        _writable(staging)
        if known is not None:
            (staging / "manifest.json").write_bytes(pretty(known.model_dump(mode="json")))
        card = model_card(recipe, cat.recipe(recipe), known, record, here.label)
        (staging / "MODEL_CARD.md").write_text(card, encoding="utf-8")
        (staging / "run.py").write_text(example(cat.recipe(recipe).task), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    verdict = record.verdict if record else "not validated here"
    print(f"exported {recipe} ({verdict} on {here.label}) -> {target}")
    print(f"  run it: python {target / 'run.py'}  (with kiln's runtime/ importable)")


def _refuse_kilns_own(target: Path, own: tuple[Path, ...]) -> None:
    resolved = target.resolve()
    for folder in own:
        base = folder.resolve()
        if resolved == base or resolved.is_relative_to(base):
            raise KilnError.one(
                f"{target} is inside kiln's own {folder}",
                Location(WHERE, key_path=("dest",)),
                "export to a folder of your own",
            )


def _writable(root: Path) -> None:
    """The store's artifacts are read-only; an export is the user's to change."""
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, os.stat(folder).st_mode | stat.S_IWUSR)
        for name in files:
            path = os.path.join(folder, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)


def model_card(
    name: str,
    recipe: Recipe,
    known: Manifest | None,
    record: Evidence | None,
    host: str,
) -> str:
    """The card: what the bundle is, what decided its verdict here, what it cannot do."""
    from kiln.evidence import gates, manifest

    model = known.lock.model if known else None
    lines = [
        f"# {name}",
        "",
        recipe.description.strip(),
        "",
        "| | |",
        "|---|---|",
        f"| checkpoint | {model.described if model else recipe.model.described} |",
        f"| task | {recipe.task} |",
        f"| precision | {json.dumps(recipe.precision.model_dump(exclude_none=True))} |",
        f"| execution | {recipe.execution.variant} |",
        f"| backend | {recipe.build.backend} for {recipe.build.target} |",
        f"| thresholds | thresholds/{recipe.validation.thresholds}.yaml |",
        "",
        "## Evidence on this host class",
        "",
    ]
    if record is None:
        lines.append(
            f"Not validated on {host}: exported with allow_unvalidated=1. Nothing below "
            "vouches for this bundle's output."
        )
    else:
        scope = manifest.scope(record)
        lines += [
            f"**{record.verdict}** on {host} ({scope}, {record.date}).",
            *([f"Reason: {record.reason}"] if record.reason else []),
            "",
            "The gates that decided it:",
            "",
            *(f"- `{gates.shown(g)}`" for g in record.gates),
        ]
        if record.verdict != "pass":
            lines += ["", "Exported with allow_unvalidated=1: this verdict is not a pass."]
    others = [
        e for e in (known.evidence if known else []) if hostinfo.host_class(e.host).label != host
    ]
    if others:
        lines += ["", "Elsewhere:", ""]
        lines += [
            f"- {e.verdict} on {hostinfo.host_class(e.host).label} "
            f"({manifest.scope(e)}, {e.date[:10]})"
            for e in others
        ]
    limits = list(recipe.known_limitations)
    lines += ["", "## Known limitations", ""]
    lines += [f"- {x}" for x in limits] if limits else ["None recorded."]
    lines += [
        "",
        "## Use",
        "",
        "`run.py` beside this card runs the bundle through kiln's `runtime` package",
        "(`runtime.open(path)`), which imports nothing of kiln's core. `manifest.json`",
        "holds the lock (every file's sha256, every step's key) and the evidence.",
        "",
    ]
    return "\n".join(lines)


RUN = {
    "text-generation": """\
bundle = runtime.open(HERE / "bundle")
prompt = sys.argv[1] if len(sys.argv) > 1 else "Hello"
if bundle.has_chat:
    ids = bundle.encode_chat([{"role": "user", "content": prompt}])
else:
    ids = bundle.encode(prompt)
out = bundle.generate([ids], 64)
print(bundle.decode(out.tokens[0]))
""",
    "feature-extraction": """\
bundle = runtime.open(HERE / "bundle")
texts = sys.argv[1:] or ["Hello", "Hi"]
print(bundle.embed(texts).shape)
""",
    "text-classification": """\
bundle = runtime.open(HERE / "bundle")
texts = sys.argv[1:] or ["This was great."]
print(bundle.classify(texts))
""",
}


OTHER = """\
bundle = runtime.open(HERE / "bundle")
print(type(bundle).__name__, bundle.meta["task"])
"""


def example(task: str) -> str:
    """run.py: the bundle beside it, run through runtime.open."""
    body = RUN.get(task, OTHER)
    return (
        '"""Run the exported bundle: python run.py [TEXT ...] (kiln\'s runtime/ importable,\n'
        'e.g. PYTHONPATH=<kiln checkout>)."""\n\nimport sys\nfrom pathlib import Path\n\n'
        "import runtime\n\nHERE = Path(__file__).resolve().parent\n" + body
    )
