"""Per-kernel GPU time of each ModelNew forward (torch.profiler), to see where the time goes.

    python bench/profile_kernels.py [--models 18,98,39,62,39L] [--tf32] [--batch 1024]
        [--dtype float16 | --autocast float16] [--numerics eager] [--grad] [--reference]

--reference profiles the reference model (PyTorch eager) as well, for a kernel-by-kernel
comparison. 39L is model 39 at KernelBench's 16384 x 4096 -> 4096; model 39 trains, as
KernelBench runs it. --autocast DTYPE runs a float32 model inside torch.autocast (the input
stays float32, as under autocast it arrives). --grad profiles with grad mode on and parameters
requiring grad, as KernelBench's harness calls ModelNew (forwards only, no backward); without it
the forwards run under torch.no_grad().
"""
import argparse
import contextlib

import torch
from torch.profiler import ProfilerActivity, profile

import fusedops  # noqa: F401
from fusedops.problems import BENCH_39_LARGE, PROBLEMS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="18,98,39,62")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--reference", action="store_true")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--autocast", default=None, choices=("float16", "bfloat16"),
                   help="a float32 model inside torch.autocast to this dtype")
    p.add_argument("--grad", action="store_true",
                   help="grad mode on (KernelBench's harness), not torch.no_grad()")
    p.add_argument("--numerics", default="accurate", choices=("accurate", "eager"))
    args = p.parse_args()
    if args.autocast and args.dtype != "float32":
        p.error("--autocast runs a float32 model: leave --dtype at float32")
    torch.backends.cuda.matmul.fp32_precision = "tf32" if args.tf32 else "ieee"
    dtype = getattr(torch, args.dtype)
    for label in args.models.split(","):
        key = "39" if label == "39L" else label
        prob = PROBLEMS[key]
        init_args = BENCH_39_LARGE["init_args"] if label == "39L" else prob.init_args
        batch = BENCH_39_LARGE["batch_size"] if label == "39L" else args.batch
        for which in (["model", "model_new"] if args.reference else ["model_new"]):
            kwargs = {"numerics": args.numerics} if which == "model_new" else {}
            model = getattr(prob, which)(*init_args, **kwargs).cuda().to(dtype)
            profile_one(label, prob, model, which, args, init_args, batch, dtype)


def profile_one(key, prob, model, which, args, init_args, batch, dtype):
    model.train(key.startswith("39"))
    xs = [prob.make_input(batch, init_args, dtype=dtype, device="cuda") for _ in range(4)]
    grad = torch.enable_grad() if args.grad else torch.no_grad()
    cast = (torch.autocast("cuda", dtype=getattr(torch, args.autocast)) if args.autocast
            else contextlib.nullcontext())
    with grad, cast:
        for x in xs:
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(args.iters):
                model(xs[i % len(xs)])
            torch.cuda.synchronize()
    precision = "tf32" if args.tf32 else "ieee"
    mode = f"autocast {args.autocast}" if args.autocast else args.dtype
    print(f"== {which} {key} {mode} {args.numerics} (float32 matmul {precision}), "
          f"grad mode {'on' if args.grad else 'off'}, per-forward GPU time by kernel")
    rows = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:8]
    total = sum(e.device_time_total for e in prof.key_averages()) / args.iters
    for e in rows:
        print(f"  {e.device_time_total / args.iters:9.1f} us  x{e.count // args.iters:<3} {e.key[:90]}")
    print(f"  {total:9.1f} us  total")


if __name__ == "__main__":
    main()
