"""fusedops benchmark: PyTorch eager, torch.compile (default and max-autotune-no-cudagraphs),
ModelNew and scripted ModelNew, side by side in one process on one GPU.

    python bench/bench.py [--models 98,18,39,62] [--batches 1,32,1024,4096] \
        [--dtypes float32,float16,bfloat16] [--compile-batches 1024] [--json results.json]

Timing: CUDA events around each call, warm-up first, inputs rotated over enough distinct
buffers that each call reads its input from HBM rather than L2, median over --reps calls.
Relative error: ||out - ref|| / ||ref|| against the reference model run in float64 on the
same weights and input. Model 39 runs in training mode (as the public benchmark does).
Prints the GPU's measured ceilings, each model's floor, and the table last.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time

import torch

import fusedops
from fusedops.problems import BENCH_39_LARGE, PROBLEMS

L2_FLUSH_BYTES = 256 * 2**20  # rotate inputs until at least this many bytes are in flight


def timed(fn, inputs, reps, warmup=3):
    """Median ms of fn(inputs[i % len]) over reps calls, each bracketed by CUDA events."""
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn(inputs[i % len(inputs)])
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def timed_interleaved(fns, inputs, reps, warmup=3):
    """Median ms of each fn, their calls interleaved (a, b, a, b, ...; the order flips every
    rep) so that clock and thermal drift over the run falls on each alike: measured one after
    the other, the eager-vs-ModelNew TF32 ratio of model 39 moved by +-10% between runs."""
    for i in range(warmup):
        for fn in fns:
            fn(inputs[i % len(inputs)])
    torch.cuda.synchronize()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(reps)] for _ in fns]
    for i in range(reps):
        order = range(len(fns)) if i % 2 == 0 else reversed(range(len(fns)))
        for f in order:
            start, end = events[f][i]
            start.record()
            fns[f](inputs[i % len(inputs)])
            end.record()
    torch.cuda.synchronize()
    return [statistics.median(s.elapsed_time(e) for s, e in ev) for ev in events]


def measure_ceilings():
    dev = "cuda"
    n = 1 << 28  # 1 GiB of float32
    a = torch.empty(n, device=dev)
    b = torch.empty_like(a)
    ms = timed(lambda _: b.copy_(a), [None], reps=20)
    copy_tbs = 2 * a.numel() * 4 / (ms * 1e-3) / 1e12
    del a, b
    m = 8192
    x = torch.randn(m, m, device=dev)
    y = torch.randn(m, m, device=dev)
    out = {}
    saved = torch.backends.cuda.matmul.fp32_precision
    for name, prec in (("sgemm", "ieee"), ("tf32", "tf32")):
        torch.backends.cuda.matmul.fp32_precision = prec
        ms = timed(lambda _: x @ y, [None], reps=10)
        out[name + "_tflops"] = 2 * m**3 / (ms * 1e-3) / 1e12
    torch.backends.cuda.matmul.fp32_precision = saved
    xb, yb = x.bfloat16(), y.bfloat16()
    ms = timed(lambda _: xb @ yb, [None], reps=10)
    out["bf16_tflops"] = 2 * m**3 / (ms * 1e-3) / 1e12
    out["copy_tbs"] = copy_tbs
    return out


def floor_ms(key, init_args, batch, ceil):
    """The larger of bytes / copy bandwidth and FLOPs / the float32-accurate GEMM rate we can
    reach (3xTF32 = TF32 rate / 3), for one float32 forward."""
    bw = ceil["copy_tbs"] * 1e12
    rate = ceil["tf32_tflops"] * 1e12 / 3
    k, n = init_args[0], init_args[1]
    if key == "18":   # x . colsum(W): read x once
        flops, nbytes = 2 * batch * k, 4 * (batch * k + k + batch)
    elif key == "98":  # folded GEMM, N = out / pool
        npool = n // init_args[2]
        flops, nbytes = 2 * batch * npool * k, 4 * (batch * k + npool * k + batch)
    else:  # full GEMM + normalization epilogue: x, W, out
        flops, nbytes = 2 * batch * n * k, 4 * (batch * k + n * k + batch * n)
    return max(flops / rate, nbytes / bw) * 1e3, flops, nbytes


def rel_err(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def bench_config(key, init_args, batch, dtype, args, compile_here):
    prob = PROBLEMS[key]
    torch.manual_seed(0)
    ref = prob.model(*init_args).cuda()
    new = prob.model_new(*init_args).cuda()
    new.load_state_dict(ref.state_dict())
    ref64 = copy.deepcopy(ref).double()
    ref, new = ref.to(dtype), new.to(dtype)
    in_bytes = batch * init_args[prob.in_features_index] * torch.finfo(dtype).bits // 8
    n_inputs = max(2, min(64, math.ceil(L2_FLUSH_BYTES / max(in_bytes, 1))))
    inputs = [prob.make_input(batch, init_args, dist="rand", dtype=dtype, device="cuda")
              for _ in range(n_inputs)]
    # Model 39 trains (every call updates the BN running stats, in every variant alike), except
    # at batch 1, where training is undefined (the reference raises): there it runs in eval.
    train = key == "39" and batch > 1
    for mod in (ref, new, ref64):
        mod.train(train)
    scripted = torch.jit.script(new)  # after train()/eval(): the scripted copy keeps the mode

    with torch.no_grad():
        ref_out = ref64(inputs[0].double())
        variants = {"eager": ref, "modelnew": new, "scripted": scripted}
        if compile_here:
            torch._dynamo.reset()
            variants["compile"] = torch.compile(copy.deepcopy(ref))
            variants["compile_maxat"] = torch.compile(copy.deepcopy(ref),
                                                      mode="max-autotune-no-cudagraphs")
        row = {"model": key, "batch": batch, "dtype": str(dtype).replace("torch.", ""),
               "mode": "train" if train else "eval",
               "init_args": list(init_args) if key != "39" else [init_args[0], init_args[1]]}
        for name, mod in variants.items():
            try:
                t0 = time.time()
                out = mod(inputs[0])
                row[name + "_err"] = rel_err(out, ref_out)
                row[name + "_ms"] = timed(mod, inputs, args.reps)
                if name.startswith("compile"):
                    row[name + "_wall_s"] = round(time.time() - t0, 1)
            except Exception as e:  # report, keep benchmarking the rest
                row[name + "_ms"] = float("nan")
                row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        if dtype == torch.float32 and args.tf32:
            saved = torch.backends.cuda.matmul.fp32_precision
            torch.backends.cuda.matmul.fp32_precision = "tf32"
            try:
                row["eager_tf32_ms"], row["modelnew_tf32_ms"] = timed_interleaved(
                    [ref, new], inputs, args.reps)
                row["modelnew_tf32_err"] = rel_err(new(inputs[0]), ref_out)
            finally:
                torch.backends.cuda.matmul.fp32_precision = saved
    for name in ("eager", "compile", "compile_maxat", "eager_tf32"):
        base = row.get(name + "_ms")
        mine = row.get("modelnew_tf32_ms" if name == "eager_tf32" else "modelnew_ms")
        if base and mine and not math.isnan(base) and not math.isnan(mine):
            row["x_vs_" + name] = base / mine
    del ref, new, ref64, scripted, variants, inputs
    torch.cuda.empty_cache()
    return row


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def print_table(rows, ceil):
    print(f"\nGPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"fusedops {torch.ops.fusedops.version()}")
    print(f"ceilings: copy {ceil['copy_tbs']:.2f} TB/s, SGEMM {ceil['sgemm_tflops']:.1f}, "
          f"TF32 {ceil['tf32_tflops']:.0f}, bf16 {ceil['bf16_tflops']:.0f} TFLOP/s")
    head = (f"{'model':>5} {'size':>17} {'dtype':>8} {'eager':>8} {'compile':>8} {'c-maxat':>8}"
            f" {'new':>8} {'script':>8} {'floor':>7} {'x eager':>8} {'x comp':>7} {'x maxat':>7}"
            f" {'err new':>8} {'err eag':>8} {'tf32 eag':>8} {'tf32 new':>8} {'x tf32':>6}")
    print(head)
    for r in rows:
        size = f"{r['batch']}x{r['init_args'][0]}x{r['init_args'][1]}"
        name = r['model'] + ("e" if r['model'] == "39" and r['mode'] == "eval" else "")
        print(f"{name:>5} {size:>17} {r['dtype']:>8} {fmt(r.get('eager_ms'), '8.4f')}"
              f" {fmt(r.get('compile_ms'), '8.4f')} {fmt(r.get('compile_maxat_ms'), '8.4f')}"
              f" {fmt(r.get('modelnew_ms'), '8.4f')} {fmt(r.get('scripted_ms'), '8.4f')}"
              f" {fmt(r.get('floor_ms'), '7.4f')} {fmt(r.get('x_vs_eager'), '8.1f')}"
              f" {fmt(r.get('x_vs_compile'), '7.2f')} {fmt(r.get('x_vs_compile_maxat'), '7.2f')}"
              f" {fmt(r.get('modelnew_err'), '8.1e')} {fmt(r.get('eager_err'), '8.1e')}"
              f" {fmt(r.get('eager_tf32_ms'), '8.4f')} {fmt(r.get('modelnew_tf32_ms'), '8.4f')}"
              f" {fmt(r.get('x_vs_eager_tf32'), '6.2f')}")
    for r in rows:
        for k, v in r.items():
            if k.endswith("_error"):
                print(f"  {r['model']} b{r['batch']} {r['dtype']}: {k}: {v}")
    print("(39e: model 39 in eval mode, at batch 1 where training mode is undefined)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="18,98,39,62")
    p.add_argument("--batches", default="1,32,1024,4096")
    p.add_argument("--dtypes", default="float32,float16,bfloat16")
    p.add_argument("--compile-batches", default="1024",
                   help="batches at which torch.compile variants run (each compile costs ~1 min)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-tf32", dest="tf32", action="store_false")
    p.add_argument("--no-large-39", dest="large39", action="store_false")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU")
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # the exact-float32 contract
    ceil = measure_ceilings()
    compile_batches = set() if args.no_compile else {int(b) for b in args.compile_batches.split(",")}
    rows = []
    configs = []
    for key in args.models.split(","):
        for dt in args.dtypes.split(","):
            for b in (int(x) for x in args.batches.split(",")):
                configs.append((key, PROBLEMS[key].init_args, b, getattr(torch, dt)))
        if key == "39" and args.large39:
            configs.append(("39", BENCH_39_LARGE["init_args"], BENCH_39_LARGE["batch_size"],
                            torch.float32))
    for key, init_args, b, dt in configs:
        compile_here = dt == torch.float32 and (b in compile_batches or
                                                (key == "39" and b == 16384 and compile_batches))
        t0 = time.time()
        row = bench_config(key, init_args, b, dt, args, compile_here)
        row["floor_ms"], row["flops"], row["bytes"] = floor_ms(key, init_args, b, ceil)
        if dt != torch.float32:
            row["floor_ms"] = None
        rows.append(row)
        print(f"[bench] {key} b{b} {dt} done in {time.time() - t0:.0f}s: "
              f"new {fmt(row.get('modelnew_ms'), '.4f')} ms, eager {fmt(row.get('eager_ms'), '.4f')} ms",
              flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "ceilings": ceil, "rows": rows, "command": " ".join(sys.argv)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print_table(rows, ceil)


if __name__ == "__main__":
    main()
