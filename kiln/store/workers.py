"""What doit's `-n` workers get from the process that forks them: their share of the
cores, and the libraries the steps still to build import, imported once.

Both are set in that process before doit forks (kiln.commands.build calls them from
task_build), since a forked worker starts with its parent's environment and modules.
Neither is in any step's key: they change how fast a step runs, never what it makes.
The libraries come from the code the steps' keys cover (kiln.plan.toolchain: each
builder's import closure), read with `ast`; this module names no builder and no
library, so the core still imports neither (issue 38).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from kiln.paths import ROOT
from kiln.plan import toolchain
from kiln.plan.step import Step

# What sizes the thread pools of the libraries builders run: OpenMP (torch's intra-op
# pool), MKL and OpenBLAS. Each library reads its variable once, when it loads, so
# they are set before any builder is imported (builders import them inside build()).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def busy_elsewhere() -> int:
    """Runnable threads on this machine besides this one, now (/proc/loadavg's running
    count): what other processes will take from a pool sized to every core."""
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            running = int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - 1)


def share_cores(workers: int) -> dict[str, str]:
    """Give each of `workers` processes that build at once its share of the cores
    that are free.

    Every library sizes its pool to all the cores by default. On a shared host that
    oversubscribes them: OpenMP's fork/join spins while it waits for a thread that
    another process holds (a tiny-llama reference runs 5x slower at 2 threads than at
    1 while the other core is busy; a cold tiny-llama build took 27.7 s with the
    default and 8.5 s at one thread). So each worker gets the cores this process may
    run on, less those busy elsewhere when the build starts, divided among the
    workers. Set in the process that forks the workers (or runs the steps), before
    any builder imports a library; a variable the user set is left as it is.
    Returns what was set.

    A thread count is not in any step's key: like a machine's core count, it may
    change a float's last bits, never what a step computes (artifacts are compared
    by their gates' tolerances, never by digest across builds)."""
    free = max(1, cores() - busy_elsewhere())
    threads = str(max(1, free // max(1, workers)))
    chosen = {v: threads for v in THREAD_VARIABLES if v not in os.environ}
    os.environ.update(chosen)
    return chosen


def preload(steps: Iterable[Step], workers: int, root: Path = ROOT) -> list[str]:
    """Before doit forks more workers than this process has cores: import here what
    `steps` (those still to build) share (`shared_libraries`), so each worker starts
    with it in memory, copy-on-write, instead of importing it again. Returns the
    modules imported here.

    An import cannot be split across cores, so without this every worker spends the
    same seconds on it before its first step: N workers on fewer than N cores queue
    for them (`-n 4` on 2 cores: twice the wait), and on a shared host they take those
    seconds of CPU each from everything else. With a core per worker the workers
    import at once, each on its own core, which ends sooner than one import here
    first (bench/parallel_build.py, idle 2 cores, -n 2: 1.27x with the preload, 1.36x
    without), so nothing is imported then; nor for a build with nothing to do (a
    no-op build stays light: `steps` is not even read). Only imports: no library runs
    a parallel region here, so the forked workers start their thread pools afresh
    (share_cores sized them first). A library that is not installed, or fails to
    import, is skipped: the step that needs it reports that itself, with its name."""
    if workers < 2 or workers <= cores():
        return []
    done = []
    for name in shared_libraries(steps, root):
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception:
            continue
        done.append(name)
    return done


def shared_libraries(steps: Iterable[Step], root: Path = ROOT) -> list[str]:
    """The libraries (top-level packages outside the standard library and this
    repository) that the code of steps of at least two kinds imports, sorted.

    A step's code is its builder's import closure, the files its key covers
    (kiln.plan.toolchain.closure), where a lazy import counts as much as one at the
    top. Only what steps of several kinds share: what one kind alone imports stays
    with that kind's first step, so the workers import it at once, each on its own
    core. Only the top-level package: a closure over-approximates what a step runs
    (causal_lm's reach modelopt.torch.opt through a helper only quantized variants
    call), and on the 2-core development host `import modelopt.torch.opt` took 4.7 s
    beside torch's 1.3 s, `import modelopt` 0.02 s. For text generation the top
    levels found include peft, whose import loads transformers' model machinery
    (modeling_utils, masking_utils, the Auto classes): what every step that loads a
    model imports first anyway."""
    kinds: dict[str, set[str]] = defaultdict(set)
    for kind, module in {(s.kind, toolchain.builder_module(s.kind, s.options)) for s in steps}:
        kinds[kind] |= toolchain.imported(module, root)
    count: dict[str, int] = defaultdict(int)
    for libraries in kinds.values():
        for name in libraries:
            count[name] += 1
    return sorted(name for name, n in count.items() if n >= 2)
