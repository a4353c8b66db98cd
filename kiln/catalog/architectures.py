"""Which tiny recipes every CI run builds; the nightly job builds all of them.

The rule: for each architecture family in catalog/architectures.yaml (dense, moe,
mla, sliding-window, recurrent, encoder, encoder-decoder), the family's first tiny
recipe in table order, plus tiny-llama and tiny-qwen3 (the spine's recipes, which
the test session builds anyway). So every kind of cache and every verdict path
(pass, unsupported-here) is exercised on every change, and adding an architecture
of a new family adds it to CI by construction. tests/test_breadth.py checks the
rule's coverage.
"""

from __future__ import annotations

from kiln import coverage
from kiln.catalog import Catalog

ALWAYS = ("tiny-llama", "tiny-qwen3")


def subset(cat: Catalog) -> list[str]:
    chosen: dict[str, str] = {}
    for a in coverage.load(cat.paths.root).architectures:
        if a.tiny and a.family and a.family not in chosen:
            chosen[a.family] = a.tiny
    return sorted({*ALWAYS, *chosen.values()} & set(cat.recipes))
