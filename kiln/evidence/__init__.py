"""artifacts -> manifests/: what a build proved, recorded next to what it was built from.

manifest.py  read, append and write manifests/<recipe>.json (lock + evidence)
gates.py     the statistical gates of thresholds/ applied to measured metrics
lock.py      the lock of a built recipe: checkpoint file hashes, step keys, toolchain
record.py    judge a validation against its gates and append it to the manifest
cells.py     the support-matrix cell a recipe's evidence counts for (site and diff)
review.py    which step is which (kind, role), why it is stale: shared by check, plan, diff
stale.py     stale manifests (lock or gates no longer match): one meaning for check and site
"""
