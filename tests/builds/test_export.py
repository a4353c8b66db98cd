"""`doit export` (issue 41, item 3): a validated bundle leaves the store whole, with
its manifest, a model card and a runtime.open example that runs outside kiln's core;
an unvalidated one is refused unless asked, an existing folder unless replaced."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import SLOW, World, heavy

pytestmark = heavy


def test_a_validated_bundle_exports_whole_and_runs_from_its_example(
    built: World, tmp_path: Path
) -> None:
    dest = tmp_path / "out" / "tiny-llama"
    done = built.doit("export", "recipe=tiny-llama", f"dest={dest}", check=True)
    assert "exported tiny-llama (pass on " in done.stdout
    assert sorted(p.name for p in dest.iterdir()) == [
        "MODEL_CARD.md",
        "bundle",
        "manifest.json",
        "run.py",
    ]
    stored = built.artifact("tiny-llama", "bundle")
    compared = filecmp.dircmp(stored, dest / "bundle")
    assert compared.left_only == compared.right_only == compared.diff_files == []
    assert all(os.access(p, os.W_OK) for p in (dest / "bundle").iterdir())  # the user's now
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["recipe"] == "tiny-llama" and manifest["lock"]["steps"]
    card = (dest / "MODEL_CARD.md").read_text()
    assert "kiln-tiny/llama at revision" in card and "**pass** on " in card
    assert "`min_logit_cosine " in card and "## Known limitations" in card
    # the example runs, and loads nothing of kiln's core: runtime/ is all it needs
    script = str(dest / "run.py")
    probe = (
        f"import runpy, sys; sys.argv = [{script!r}, 'The quick brown fox']; "
        f"runpy.run_path({script!r}, run_name='__main__'); "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('kiln', 'builders')]"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=SLOW, cwd=tmp_path
    )
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr
    again = built.doit("export", "recipe=tiny-llama", f"dest={dest}")
    assert again.returncode == 1 and "exists and is not empty" in again.stdout + again.stderr
    built.doit("export", "recipe=tiny-llama", f"dest={dest}", "force=1", check=True)
    leftovers = [p.name for p in dest.parent.iterdir() if p.name != "tiny-llama"]
    assert leftovers == []  # the staging folder is gone


def test_an_unvalidated_bundle_is_refused_unless_asked(built: World, tmp_path: Path) -> None:
    hidden = built.root / "manifests" / "tiny-llama.json"
    saved = hidden.read_bytes()
    hidden.unlink()  # no evidence for this build: never validated, as far as kiln knows
    try:
        dest = tmp_path / "x"
        refused = built.doit("export", "recipe=tiny-llama", f"dest={dest}")
        said = refused.stdout + refused.stderr
        assert refused.returncode == 1 and "is not validated on this host class" in said, said
        assert "allow_unvalidated=1" in said and not dest.exists()
        built.doit("export", "recipe=tiny-llama", f"dest={dest}", "allow_unvalidated=1", check=True)
        assert "exported with allow_unvalidated=1" in (dest / "MODEL_CARD.md").read_text()
    finally:
        hidden.write_bytes(saved)
