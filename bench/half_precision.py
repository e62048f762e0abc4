r"""float16/bfloat16: error against float64 and time of the reference (eager and
torch.compile) and of ModelNew with "accurate" and with "eager" numerics, per model and dtype,
at docs/MODELS.md's default sizes, on one GPU (or the CPU with --sizes small).

    python bench/half_precision.py [--models 98,18,39,62] [--dtypes float16,bfloat16] \
        [--reps 50] [--json half.json]
    python bench/half_precision.py --device cpu --sizes small --reps 5 --no-compile

Error: ||out - out64|| / ||out64|| (bench/bench.py's rel_err) against the reference model run in
float64 on the same weights (rounded to the dtype) and input (torch.rand, rounded likewise).
Time: bench/bench.py's timed (CUDA events, inputs rotated past L2, median of --reps).
Model 39 runs in training mode, as the public benchmark does. Prints a Markdown table
(docs/PERFORMANCE.md holds one, with the command and the GPU).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import L2_FLUSH_BYTES, device_name, rel_err, timed  # noqa: E402
from scripted.export import SMALL_SIZES  # noqa: E402

import fusedops  # noqa: E402,F401
from fusedops.problems import PROBLEMS  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
VARIANTS = ("eager", "compile", "accurate", "fused_eager")
HEADERS = {"eager": "reference eager", "compile": "reference torch.compile",
           "accurate": "fusedops accurate", "fused_eager": "fusedops eager"}


def measure(key, init_args, batch, dtype, device, reps, compile_reference):
    problem = PROBLEMS[key]
    torch.manual_seed(0)
    reference = problem.model(*init_args)
    accurate = problem.model_new(*init_args, numerics="accurate")
    accurate.load_state_dict(reference.state_dict())
    reference = reference.to(device=device, dtype=dtype)
    accurate = accurate.to(device=device, dtype=dtype)
    eager_new = copy.deepcopy(accurate)
    eager_new.numerics = "eager"
    reference64 = copy.deepcopy(reference).double()
    in_bytes = batch * init_args[problem.in_features_index] * torch.finfo(dtype).bits // 8
    n_inputs = max(2, min(64, math.ceil(L2_FLUSH_BYTES / max(in_bytes, 1))))
    inputs = [problem.make_input(batch, init_args, dtype=dtype, device=device)
              for _ in range(n_inputs)]
    train = key == "39"
    variants = {"eager": reference, "accurate": accurate, "fused_eager": eager_new}
    if compile_reference:
        torch._dynamo.reset()
        variants["compile"] = torch.compile(copy.deepcopy(reference))
    row = {"model": key, "dtype": str(dtype).removeprefix("torch."), "batch": batch,
           "init_args": [a if not isinstance(a, tuple) else list(a) for a in init_args]}
    with torch.no_grad():
        for module in (*variants.values(), reference64):
            module.train(train)
        expected64 = reference64(inputs[0].double())
        for name, module in variants.items():
            # A fresh copy of model 39's running statistics for each variant's error, so that
            # every variant's first call sees the float64 reference's starting state.
            first = copy.deepcopy(module) if name != "compile" else module
            row[f"{name}_err"] = rel_err(first(inputs[0]), expected64)
            row[f"{name}_ms"] = timed(module, inputs, reps)
    del variants, inputs
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def print_table(rows, device):
    print(f"\n{device_name(device)}, torch {torch.__version__}, fusedops "
          f"{torch.ops.fusedops.version()}; error = ||out - out64|| / ||out64||, time = median ms")
    variants = [v for v in VARIANTS if any(f"{v}_ms" in r for r in rows)]
    print("| model | dtype | " + " | ".join(f"{HEADERS[v]} err" for v in variants) + " | "
          + " | ".join(f"{HEADERS[v]} ms" for v in variants) + " |")
    print("|---|---|" + "---|" * (2 * len(variants)))
    for r in rows:
        errs = " | ".join(f"{r[f'{v}_err']:.2e}" for v in variants)
        times = " | ".join(f"{r[f'{v}_ms']:.3f}" for v in variants)
        print(f"| {r['model']} | {r['dtype']} | {errs} | {times} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/half_precision.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(PROBLEMS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sizes", choices=("spec", "small"), default="spec")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--no-compile", action="store_true",
                        help="leave out torch.compile of the reference")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for key in args.models.split(","):
        problem = PROBLEMS[key]
        if args.sizes == "small":
            init_args, batch = SMALL_SIZES[key]
        else:
            init_args, batch = problem.init_args, problem.batch_size
        for dtype_name in args.dtypes.split(","):
            row = measure(key, init_args, batch, DTYPES[dtype_name], args.device, args.reps,
                          not args.no_compile)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print_table(rows, args.device)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
