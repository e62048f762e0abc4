"""Per-kernel GPU time of each ModelNew forward (torch.profiler), to see where the time goes.

    python bench/profile_kernels.py [--models 18,98,39,62] [--tf32] [--batch 1024] [--reference]

--reference profiles the reference model (PyTorch eager) as well, for a kernel-by-kernel
comparison.
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import fusedops  # noqa: F401
from fusedops.problems import PROBLEMS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="18,98,39,62")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--reference", action="store_true")
    args = p.parse_args()
    torch.backends.cuda.matmul.fp32_precision = "tf32" if args.tf32 else "ieee"
    for key in args.models.split(","):
        prob = PROBLEMS[key]
        for which in (["model", "model_new"] if args.reference else ["model_new"]):
            profile_one(key, prob, getattr(prob, which)(*prob.init_args).cuda(), which, args)


def profile_one(key, prob, model, which, args):
    xs = [prob.make_input(args.batch, device="cuda") for _ in range(4)]
    with torch.no_grad():
        for x in xs:
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(args.iters):
                model(xs[i % len(xs)])
            torch.cuda.synchronize()
    print(f"== {which} {key} ({'tf32' if args.tf32 else 'fp32'}), per-forward GPU time by kernel")
    rows = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:8]
    total = sum(e.device_time_total for e in prof.key_averages()) / args.iters
    for e in rows:
        print(f"  {e.device_time_total / args.iters:9.1f} us  x{e.count // args.iters:<3} {e.key[:90]}")
    print(f"  {total:9.1f} us  total")


if __name__ == "__main__":
    main()
