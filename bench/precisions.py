r"""One table for the precisions deployments use (issue 24): per model and mode, fusedops'
ModelNew ("accurate" numerics, and "eager" where the model is float16/bfloat16), PyTorch eager
and torch.compile of the reference in the same mode, and cuBLAS's bare GEMM of the
reference's Linear at the same shape and dtype (torch.mm), all timed interleaved in one process
on one GPU, with each output's error against the reference run in float64.

The floor (issue 39): that GEMM, plus, for model 39 in training, one read and one write of y
(the GEMM's output, in the GEMM's dtype) at the copy bandwidth measured in the same run: a
column's batch statistics need every row, which no GEMM tile holds, so y is written and read
back once at least. Model 62's groups lie inside a tile and models 18 and 98 reduce rows: the
GEMM alone. (18 and 98 fold their weights: their floor is far below the reference's GEMM, which
the table still shows for scale.)

    python bench/precisions.py [--models 18,98,39,62,39L] \
        [--modes float32,tf32,float16,bfloat16,autocast-float16,autocast-bfloat16] \
        [--no-compile] [--reps 30] [--blocks 3] [--json FILE]

Modes: float32 (the exact-float32 contract: torch's float32 matmul precision "ieee"); tf32
(precision "tf32" for every variant); float16/bfloat16 (the models cast); autocast-<dtype>
(float32 models inside torch.autocast("cuda", dtype)). 39L is model 39 at KernelBench's
16384 x 4096 -> 4096. Model 39 trains (as KernelBench runs it). Time: median ms of --reps
calls, inputs rotated past L2 (bench.py's timed_interleaved), from the least disturbed of
--blocks interleaved loops; ratios are variant / fusedops.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (L2_FLUSH_BYTES, device_name, measure_copy_tbs, rel_err,  # noqa: E402
                   timed_interleaved)

import fusedops  # noqa: E402
from fusedops.problems import BENCH_39_LARGE, PROBLEMS  # noqa: E402

MODES = ("float32", "tf32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16")


def sizes(key):
    if key == "39L":
        return "39", BENCH_39_LARGE["init_args"], BENCH_39_LARGE["batch_size"]
    return key, PROBLEMS[key].init_args, PROBLEMS[key].batch_size


@contextlib.contextmanager
def mode_context(mode):
    """The float32 matmul precision and autocast region of a mode."""
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32" if mode == "tf32" else "ieee"
    try:
        if mode.startswith("autocast-"):
            with torch.autocast("cuda", dtype=getattr(torch, mode.split("-", 1)[1])):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved


def model_dtype(mode):
    return getattr(torch, mode) if mode in ("float16", "bfloat16") else torch.float32


def gemm_dtype(mode):
    return model_dtype(mode) if not mode.startswith("autocast-") else getattr(
        torch, mode.split("-", 1)[1])


def y_round_trip_ms(key, batch, n, mode, copy_tbs):
    """One write and one read of y at copy bandwidth where the model's statistics need whole
    columns (model 39 in training, as measured here); 0 elsewhere."""
    if key != "39":
        return 0.0
    y_bytes = batch * n * torch.finfo(gemm_dtype(mode)).bits // 8
    return 2 * y_bytes / (copy_tbs * 1e12) * 1e3


def measure(label, mode, reps, compile_reference, copy_tbs, blocks):
    key, init_args, batch = sizes(label)
    problem = PROBLEMS[key]
    dtype = model_dtype(mode)
    torch.manual_seed(0)
    reference = problem.model(*init_args)
    new = problem.model_new(*init_args)
    new.load_state_dict(reference.state_dict())
    reference64 = copy.deepcopy(reference).double().cuda()
    reference, new = reference.cuda().to(dtype), new.cuda().to(dtype)
    variants = {"fusedops": new}
    if dtype != torch.float32:  # eager numerics only differ for float16/bfloat16 models
        eager_new = copy.deepcopy(new)
        eager_new.numerics = "eager"
        variants["fusedops_eager"] = eager_new
    variants["eager"] = reference
    if compile_reference:
        torch._dynamo.reset()
        variants["compile"] = torch.compile(copy.deepcopy(reference))
    # The floor: the reference's Linear alone, cuBLAS through torch.mm, same shape and dtype.
    k, n = init_args[0], init_args[1]
    w = torch.randn(k, n, device="cuda", dtype=gemm_dtype(mode))
    in_bytes = batch * k * torch.finfo(dtype).bits // 8
    n_inputs = max(2, min(64, math.ceil(L2_FLUSH_BYTES / max(in_bytes, 1))))
    inputs = [problem.make_input(batch, init_args, dtype=dtype, device="cuda")
              for _ in range(n_inputs)]
    gemm_inputs = [x.to(gemm_dtype(mode)) for x in inputs]
    train = key == "39"
    for module in (*variants.values(), reference64):
        module.train(train)
    row = {"model": label, "mode": mode, "batch": batch,
           "init_args": [list(a) if isinstance(a, tuple) else a for a in init_args]}
    with torch.no_grad():
        expected64 = reference64(inputs[0].double())
        with mode_context(mode):
            for name, module in variants.items():
                # A copy for the error (model 39's running statistics start as the float64's).
                first = copy.deepcopy(module) if name != "compile" else module
                row[f"{name}_err"] = rel_err(first(inputs[0]), expected64)
            if "fusedops" in variants:
                row["routes"] = fusedops.explain(copy.deepcopy(new), inputs[0])
            names = list(variants)
            # The GEMM floor reads its own inputs (cast to the GEMM's dtype), one per input.
            cast = dict(zip(map(id, inputs), gemm_inputs))

            def floor(x):
                return torch.mm(cast[id(x)], w)

            times = timed_interleaved([variants[name] for name in names] + [floor], inputs, reps,
                                      blocks=blocks)
        for name, ms in zip(names + ["gemm"], times):
            row[f"{name}_ms"] = ms
    row["floor_ms"] = row["gemm_ms"] + y_round_trip_ms(key, batch, n, mode, copy_tbs)
    for name in ("fusedops_eager", "eager", "compile", "gemm", "floor"):
        if f"{name}_ms" in row:
            row[f"{name}_vs_fusedops"] = row[f"{name}_ms"] / row["fusedops_ms"]
    row["fusedops_over_floor"] = row["fusedops_ms"] / row["floor_ms"]
    if "fusedops_eager_ms" in row:
        row["fusedops_eager_over_floor"] = row["fusedops_eager_ms"] / row["floor_ms"]
    del variants, inputs, gemm_inputs
    torch.cuda.empty_cache()
    return row


def fmt(row, field, spec):
    v = row.get(field)
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def print_table(rows):
    print(f"\n{device_name('cuda')}, torch {torch.__version__}, fusedops "
          f"{torch.ops.fusedops.version()}; median ms, x = variant time / fusedops time; "
          f"err = ||out - out64|| / ||out64||")
    print("| model | mode | fusedops | f. eager | eager | compile | GEMM | floor | x eager "
          "| x compile | fusedops / floor | f. eager / floor | err fusedops | err eager |")
    print("|---" * 14 + "|")
    for r in rows:
        print(f"| {r['model']} | {r['mode']} | {fmt(r, 'fusedops_ms', '.4f')} "
              f"| {fmt(r, 'fusedops_eager_ms', '.4f')} | {fmt(r, 'eager_ms', '.4f')} "
              f"| {fmt(r, 'compile_ms', '.4f')} | {fmt(r, 'gemm_ms', '.4f')} "
              f"| {fmt(r, 'floor_ms', '.4f')} "
              f"| {fmt(r, 'eager_vs_fusedops', '.2f')} | {fmt(r, 'compile_vs_fusedops', '.2f')} "
              f"| {fmt(r, 'fusedops_over_floor', '.2f')} "
              f"| {fmt(r, 'fusedops_eager_over_floor', '.2f')} | {fmt(r, 'fusedops_err', '.1e')} "
              f"| {fmt(r, 'eager_err', '.1e')} |")
    print("(f. eager: fusedops with numerics=\"eager\", float16/bfloat16 models only; its "
          "x-compile is in the JSON)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="18,98,39,62,39L")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--blocks", type=int, default=3,
                   help="interleaved loops of --reps a row; the least disturbed one is kept "
                        "(bench.timed_interleaved)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench/precisions.py: needs a CUDA GPU")
    bad = [m for m in args.modes.split(",") if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {', '.join(bad)}; expected some of {', '.join(MODES)}")
    copy_tbs = measure_copy_tbs()
    print(f"copy bandwidth {copy_tbs:.2f} TB/s (the floor's y round trip)", flush=True)
    rows = []
    for label in args.models.split(","):
        for mode in args.modes.split(","):
            row = measure(label, mode, args.reps, not args.no_compile, copy_tbs, args.blocks)
            row["copy_tbs"] = copy_tbs
            print(json.dumps(row), flush=True)
            rows.append(row)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
