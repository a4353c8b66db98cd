"""artifacts -> manifests/: what a build proved, recorded next to what it was built from.

manifest.py  read, append and write manifests/<recipe>.json (lock + evidence)
gates.py     the statistical gates of thresholds/ applied to measured metrics
"""
