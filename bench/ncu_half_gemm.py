r"""What Nsight Compute profiles for issue 39's "why is the mainloop slower than cuBLAS's": a
ModelNew forward in float16/bfloat16 at 1024 x 8192 x 8192 (no_grad; model 39 in training mode),
then cuBLAS's bare GEMM `x @ W.T` at the same shape, three of each. Run it under ncu, the kernel
filter picking the GEMMs and the normalization passes:

    ncu --kernel-name regex:'device_kernel|nvjet|batchnorm|moments' --launch-count 14 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats python3 bench/ncu_half_gemm.py 62 float16

(ncu names a CUTLASS kernel by its function, `device_kernel`, not its namespace.) Durations
under ncu are longer than in the benchmark (its clock control): compare the rows of one run.
"""
import argparse

import torch

import fusedops  # noqa: F401
from fusedops.problems import PROBLEMS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=("18", "98", "39", "62"))
    p.add_argument("dtype", choices=("float16", "bfloat16"))
    p.add_argument("--calls", type=int, default=3)
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    prob = PROBLEMS[args.model]
    model = prob.model_new(*prob.init_args).cuda().to(dtype).train(args.model == "39")
    x = prob.make_input(prob.batch_size, prob.init_args, dtype=dtype, device="cuda")
    in_features, out_features = prob.init_args[0], prob.init_args[1]
    w = torch.randn(out_features, in_features, device="cuda", dtype=dtype)
    with torch.no_grad():
        for _ in range(args.calls):
            model(x)
        for _ in range(args.calls):
            torch.mm(x, w.t())
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
