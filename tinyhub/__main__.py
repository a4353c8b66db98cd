"""python -m tinyhub [CACHE_DIR]: write every tiny checkpoint into a hub mirror."""

import sys
from pathlib import Path

from tinyhub import write_mirror

target = Path(sys.argv[1] if len(sys.argv) > 1 else ".kiln/hub")
for repo_id, rev in write_mirror(target).items():
    print(f"{repo_id}@{rev}")
