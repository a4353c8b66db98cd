"""A vision-language recipe's validation images on its page (issue 40): each image, the
questions its validation asked about it, and the answers the bundle gave.

The questions and answers are the deciding record's `answers` (kiln.schema.manifest
Answer). A record made before answers were recorded, or none at all, shows the
recipe's prompts on the images the planner pairs them with (prompt i with image i
modulo their number, kiln.plan.VALIDATION_IMAGES), without answers. `copy()` puts the
images a page shows into the site (assets/images/), so it stays self-contained; only
the shipped validation images are copied, whatever name a manifest says.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kiln.catalog import Catalog
from kiln.errors import printable
from kiln.paths import ROOT
from kiln.plan import VALIDATION_IMAGES, VLM
from kiln.site.view import Entry

SHIPPED = ROOT / "builders" / "data" / "images"
ASSETS = "assets/images"  # under the site's root


@dataclass(frozen=True)
class Answered:
    prompt: str
    answer: str | None  # None: the record holds no answers


@dataclass(frozen=True)
class Image:
    """One validation image and what was asked about it, in the order asked."""

    name: str
    asked: list[Answered]

    @property
    def url(self) -> str | None:
        """Its copy in the site, relative to the root; None for a name that is not a
        shipped validation image (the page then names it without a picture)."""
        return f"{ASSETS}/{self.name}" if self.name in VALIDATION_IMAGES else None


@dataclass(frozen=True)
class Asked:
    images: list[Image]
    record: int | None  # the evidence record the answers are from (#evidence-<i>)


def asked(e: Entry, cat: Catalog) -> Asked | None:
    """What the page of an image-text-to-text recipe shows of its validation images;
    None for any other task."""
    if e.recipe.task != VLM:
        return None
    latest = e.latest
    if latest is not None and latest.answers:
        # a random-weight model says anything: control characters and bidi overrides
        # are shown as escapes, never sent to the page as they are
        pairs = [(a.image, Answered(a.prompt, printable(a.answer))) for a in latest.answers]
        return Asked(_by_image(pairs), e.history.index(latest))
    found = cat.prompts.get(e.recipe.validation.prompts)
    prompts = found.prompts if found else []
    n = len(VALIDATION_IMAGES)
    pairs = [(VALIDATION_IMAGES[i % n], Answered(p, None)) for i, p in enumerate(prompts)]
    return Asked(_by_image(pairs), None)


def _by_image(pairs: list[tuple[str, Answered]]) -> list[Image]:
    found: dict[str, list[Answered]] = {}
    for name, qa in pairs:
        found.setdefault(name, []).append(qa)
    return [Image(name, qa) for name, qa in found.items()]


def copy(shown: list[Asked], out: Path) -> None:
    """Copy every shipped image the pages show into `out`/assets/images/."""
    names = {i.name for a in shown for i in a.images if i.url}
    if not names:
        return
    (out / ASSETS).mkdir(parents=True)
    for name in sorted(names):
        shutil.copyfile(SHIPPED / name, out / ASSETS / name)
