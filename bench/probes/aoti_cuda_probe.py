"""Does an AOTInductor CUDA package load on this machine? A toy model, no kiln code.

    python bench/probes/aoti_cuda_probe.py

Exports Linear+ReLU on CUDA, compiles it with `aoti_compile_and_package`, then loads
and runs it in a child process (a crash or hang there is reported, not fatal).
Set NO_CONST_IN_SO=1 to keep the weights out of the shared object. Prints what
happened; on the lent H200 (torch 2.11+cu130) the child's load hung past 140 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def main() -> None:
    import torch

    if sys.argv[1:2] == ["load"]:
        runner = torch._inductor.aoti_load_package(sys.argv[2])
        print("loaded; output sum", runner(torch.ones(2, 8, device="cuda"))[0].sum().item())
        return
    path = os.path.join(tempfile.mkdtemp(), "toy.pt2")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).cuda().eval()
    program = torch.export.export(model, (torch.ones(2, 8, device="cuda"),))
    options = (
        {"aot_inductor.package_constants_in_so": False} if os.environ.get("NO_CONST_IN_SO") else {}
    )
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=path, inductor_configs=options
    )
    print(f"compiled {package} ({os.path.getsize(package)} bytes)")
    child = [sys.executable, "-X", "faulthandler", __file__, "load", package]
    try:
        done = subprocess.run(child, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        print("load: no answer within 120 s (hung)")
        return
    print(f"load: exit status {done.returncode}\n{done.stdout}{done.stderr[-2000:]}")


if __name__ == "__main__":
    main()
