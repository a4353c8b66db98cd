"""Run a command and record what it takes: peak host memory of its process tree, peak
GPU memory, disk, wall time (issue 39: the 8B build's budget, measured, not guessed).

    python bench/watch.py --log FILE [--every 2] [--disk PATH] [--label TEXT] -- CMD ARG...

Every --every seconds it samples the resident memory (VmRSS) summed over the command
and all its descendants (doit's steps run in its process; the inductor engine's
compile and check run in children), the GPU memory in use (nvidia-smi: every process
on the card, allocator caches and CUDA contexts included, where a step's own
max_memory_allocated would miss the children's), and the bytes used on the
filesystem of --disk. It appends one line per sample to FILE, then a summary line
(also printed): the peaks, when they happened, and the command's exit status, which
it exits with. Reads /proc: Linux only; GPU columns read n/a where nvidia-smi is absent.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

GIB = 2**30


def tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc/<pid>/stat's parent ids."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def gpu_used() -> int | None:
    """Bytes in use on the first GPU, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return int(out.split()[0]) * 2**20
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--disk", type=Path, default=Path("/tmp"))
    parser.add_argument("--label", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.monotonic()
    disk0 = shutil.disk_usage(args.disk).used
    child = subprocess.Popen(command)
    peaks = {"rss": (0, 0.0), "gpu": (0, 0.0), "disk": (disk0, 0.0)}
    with args.log.open("a") as log:
        log.write(f"# {args.label or ' '.join(command)}: t_s rss_gib gpu_gib disk_gib\n")
        while True:
            done = child.poll() is not None
            t = time.monotonic() - start
            sample = {
                "rss": rss(tree(child.pid)) if not done else 0,
                "gpu": gpu_used(),
                "disk": shutil.disk_usage(args.disk).used,
            }
            for k, v in sample.items():
                if v is not None and v > peaks[k][0]:
                    peaks[k] = (v, t)
            log.write(f"{t:.0f} {gib(sample['rss'])} {gib(sample['gpu'])} {gib(sample['disk'])}\n")
            log.flush()
            if done:
                break
            time.sleep(args.every)
        wall = time.monotonic() - start
        summary = (
            f"{args.label or command[0]}: exit {child.returncode}, wall {wall:.0f} s; peak host "
            f"RSS {gib(peaks['rss'][0])} GiB at {peaks['rss'][1]:.0f} s; peak GPU memory "
            f"{gib(peaks['gpu'][0] or None)} GiB at {peaks['gpu'][1]:.0f} s; disk used peak "
            f"{gib(peaks['disk'][0])} GiB ({gib(peaks['disk'][0] - disk0)} above the start) "
            f"at {peaks['disk'][1]:.0f} s, {gib(shutil.disk_usage(args.disk).free)} GiB free at "
            f"the end"
        )
        log.write(f"# {summary}\n")
    print(f"== watch: {summary}", flush=True)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
