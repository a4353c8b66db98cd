"""`python -m builders.audio`: rewrite the committed clips from their formulas."""

from builders.audio import write

for written in write():
    print(written)
