r"""fusedops benchmark: PyTorch eager, torch.compile (default and max-autotune-no-cudagraphs),
ModelNew and scripted ModelNew, side by side in one process on one GPU (or the CPU).

    python bench/bench.py [--models 98,18,39,62] [--batches 1,32,1024,4096] \
        [--dtypes float32,float16,bfloat16] [--compile-batches 1024] [--json results.json] \
        [--plot speedup.png]
    python bench/bench.py --device cpu --sizes small --batches 1,32 --dtypes float32 \
        --compile-batches 1,32 --no-large-39 --plot speedup.png      # a quick CPU run

Timing: on CUDA, CUDA events around each call, warm-up first, inputs rotated over enough
distinct buffers that each call reads its input from HBM rather than L2; on the CPU, wall time
of each call (time.perf_counter); the median over --reps calls.
Relative error: ||out - ref|| / ||ref|| against the reference model run in float64 on the
same weights and input. Model 39 runs in training mode (as the public benchmark does).
Prints the GPU's measured ceilings, each model's floor (CUDA only), and the table last.
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

# torch.compile in this process, not in Inductor's pool of compile-worker processes, which stays
# alive after the first compile: the host-bound calls timed after it (models 18 and 98 spend
# about as long on the host as on the GPU) should have the CPU to themselves. Set before torch
# is imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

import fusedops  # noqa: E402
from fusedops.problems import BENCH_39_LARGE, PROBLEMS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripted.export import SMALL_SIZES  # noqa: E402  (the CI export's sizes)

L2_FLUSH_BYTES = 256 * 2**20  # rotate inputs until at least this many bytes are in flight


def timed(fn, inputs, reps, warmup=3):
    """Median ms of fn(inputs[i % len]) over reps calls, each bracketed by CUDA events (on
    the CPU: by time.perf_counter)."""
    return timed_interleaved([fn], inputs, reps, warmup)[0]


def interleaved_medians(fns, inputs, reps):
    """One block: each fn's median ms over reps calls, the calls interleaved (a, b, a, b, ...;
    the order flips every rep), each bracketed by CUDA events (read after the block, so no
    synchronization falls between calls) or, on the CPU, by time.perf_counter."""
    cuda = inputs[0].is_cuda
    samples = [[] for _ in fns]
    if cuda:
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                   for _ in range(reps)] for _ in fns]
        torch.cuda.synchronize()
    for i in range(reps):
        order = range(len(fns)) if i % 2 == 0 else reversed(range(len(fns)))
        for f in order:
            if cuda:
                start, end = events[f][i]
                start.record()
                fns[f](inputs[i % len(inputs)])
                end.record()
            else:
                start = time.perf_counter()
                fns[f](inputs[i % len(inputs)])
                samples[f].append((time.perf_counter() - start) * 1e3)
    if cuda:
        torch.cuda.synchronize()
        samples = [[s.elapsed_time(e) for s, e in pairs] for pairs in events]
    return [statistics.median(s) for s in samples]


def timed_interleaved(fns, inputs, reps, warmup=3, blocks=1):
    """Median ms of each fn, their calls interleaved (interleaved_medians) so that clock and
    thermal drift over the run falls on each alike: measured one after the other, the
    eager-vs-ModelNew TF32 ratio of model 39 moved by +-10% between runs.
    blocks > 1: the interleaved loop runs that many times and the block with the least total
    of medians is kept, every fn's median from that one block (so ratios stay within a block).
    Something outside the process only adds time: on one H200, whole rows of precisions.py
    (every variant, the GEMM floor included) ran 1.1-5x slower in one run and not in the next."""
    for i in range(warmup):
        for fn in fns:
            fn(inputs[i % len(inputs)])
    return least_disturbed([interleaved_medians(fns, inputs, reps) for _ in range(blocks)])


def least_disturbed(block_medians):
    """Of blocks of per-fn medians, the block with the least total, whole: a fn's median is
    never taken from another block than the others' (their ratios stay those of one block)."""
    return min(block_medians, key=sum)


def measure_copy_tbs():
    """The device's copy bandwidth, TB/s: a 1 GiB float32 copy (read + write)."""
    a = torch.empty(1 << 28, device="cuda")
    b = torch.empty_like(a)
    ms = timed(lambda _: b.copy_(a), [a], reps=20)
    return 2 * a.numel() * 4 / (ms * 1e-3) / 1e12


def measure_ceilings():
    dev = "cuda"
    copy_tbs = measure_copy_tbs()
    m = 8192
    x = torch.randn(m, m, device=dev)
    y = torch.randn(m, m, device=dev)
    out = {}
    saved = torch.backends.cuda.matmul.fp32_precision
    for name, prec in (("sgemm", "ieee"), ("tf32", "tf32")):
        torch.backends.cuda.matmul.fp32_precision = prec
        ms = timed(lambda _: x @ y, [x], reps=10)
        out[name + "_tflops"] = 2 * m**3 / (ms * 1e-3) / 1e12
    torch.backends.cuda.matmul.fp32_precision = saved
    xb, yb = x.bfloat16(), y.bfloat16()
    ms = timed(lambda _: xb @ yb, [xb], reps=10)
    out["bf16_tflops"] = 2 * m**3 / (ms * 1e-3) / 1e12
    out["copy_tbs"] = copy_tbs
    return out


def floor_ms(key, init_args, batch, ceil):
    """The larger of bytes / copy bandwidth and FLOPs / the float32-accurate GEMM rate we can
    reach, for one float32 forward: 3xFP16 (three 16-bit tensor-core products, measured as the
    bf16 rate / 3; ops/cuda/gemm/) on Hopper, 3xTF32 (TF32 rate / 3) elsewhere."""
    bw = ceil["copy_tbs"] * 1e12
    hopper = torch.cuda.get_device_capability() == (9, 0)
    rate = (ceil["bf16_tflops"] if hopper else ceil["tf32_tflops"]) * 1e12 / 3
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
    device = args.device
    torch.ops.fusedops.clear_fold_cache()  # fold_bytes below: this model's folds alone
    torch.manual_seed(0)
    ref = prob.model(*init_args).to(device)
    new = prob.model_new(*init_args).to(device)
    new.load_state_dict(ref.state_dict())
    ref64 = copy.deepcopy(ref).double()
    ref, new = ref.to(dtype), new.to(dtype)
    in_bytes = batch * init_args[prob.in_features_index] * torch.finfo(dtype).bits // 8
    n_inputs = max(2, min(64, math.ceil(L2_FLUSH_BYTES / max(in_bytes, 1))))
    inputs = [prob.make_input(batch, init_args, dist="rand", dtype=dtype, device=device)
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
            if "default" in args.compile_modes:
                variants["compile"] = torch.compile(copy.deepcopy(ref))
            if "max-autotune-no-cudagraphs" in args.compile_modes:
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
                if name == "modelnew":  # what ModelNew holds beyond the reference's parameters
                    row["fold_bytes"] = torch.ops.fusedops.fold_cache_stats()["bytes"]
                if name.startswith("compile"):
                    row[name + "_wall_s"] = round(time.time() - t0, 1)
            except Exception as e:  # report, keep benchmarking the rest
                row[name + "_ms"] = float("nan")
                row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        if dtype == torch.float32 and args.tf32 and device == "cuda":
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
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    import platform
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def print_table(rows, ceil, device):
    label = "GPU" if device == "cuda" else "device"
    print(f"\n{label}: {device_name(device)}  torch {torch.__version__}  "
          f"fusedops {torch.ops.fusedops.version()}")
    if ceil:
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


CSV_COLUMNS = ["model", "mode", "batch", "in_features", "out_features", "dtype", "eager_ms",
               "compile_ms", "compile_maxat_ms", "modelnew_ms", "scripted_ms", "floor_ms",
               "x_vs_eager", "x_vs_compile", "x_vs_compile_maxat", "modelnew_err", "eager_err",
               "eager_tf32_ms", "modelnew_tf32_ms", "x_vs_eager_tf32", "fold_bytes"]


def write_csv(path, rows):
    """One line per configuration, the table's columns (the JSON has every field)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow(dict(r, in_features=r["init_args"][0], out_features=r["init_args"][1]))


def import_pyplot():
    """matplotlib only for --plot, checked before anything is measured."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("bench: --plot needs matplotlib (requirements.txt pins it: "
                 "pip install -r requirements.txt)")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def plot_speedups(plt, rows, path, title):
    """One panel per model: ModelNew's speedup against eager and against torch.compile at each
    batch (and dtype, when several ran), on a log scale; 1x dashed. A bar is missing where that baseline did
    not run (torch.compile runs only at --compile-batches)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    several_dtypes = len({r["dtype"] for r in rows}) > 1
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        labels = []
        for r in mine:
            label = f"b{r['batch']}"
            if several_dtypes:
                label += f"\n{r['dtype']}"
            if r["init_args"] != mine[0]["init_args"]:  # model 39's public-benchmark size
                label += f"\n{r['init_args'][0]}x{r['init_args'][1]}"
            labels.append(label)
        xs = range(len(mine))
        for offset, key, name in ((-0.2, "x_vs_eager", "vs eager"),
                                  (0.2, "x_vs_compile", "vs torch.compile")):
            values = [r.get(key, float("nan")) for r in mine]
            bars = ax.bar([x + offset for x in xs], values, width=0.4, label=name)
            ax.bar_label(bars, labels=[fmt(v, ".1f") for v in values], fontsize=7)
        ax.set_yscale("log")  # ratios: 0.5x and 2x equally far from 1x
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xticks(list(xs), labels)
        ax.set_title(f"model {model} ({PROBLEMS[model].name})", fontsize=9)
        ax.set_ylabel("speedup of ModelNew (x)")
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def comma_list(text):
    return [item for item in text.split(",") if item]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="18,98,39,62",
                   help="comma-separated problem keys (default: %(default)s)")
    p.add_argument("--batches", default="1,32,1024,4096",
                   help="comma-separated batch sizes (default: %(default)s)")
    p.add_argument("--dtypes", default="float32,float16,bfloat16",
                   help="comma-separated dtypes of models and inputs (default: %(default)s)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="where to run (default: %(default)s); the CPU has no ceilings, floors "
                        "or TF32 columns")
    p.add_argument("--sizes", choices=("spec", "small"), default="spec",
                   help="spec: SPEC's default model sizes (8192 x 8192 weights); small: the CI "
                        "export's sizes (scripted/export.py), for the CPU (default: %(default)s)")
    p.add_argument("--compile-batches", default="1024",
                   help="batches at which torch.compile variants run (each compile costs ~1 min "
                        "on the GPU machine; default: %(default)s)")
    p.add_argument("--compile-modes", default="default,max-autotune-no-cudagraphs",
                   help="torch.compile modes to time (default: %(default)s)")
    p.add_argument("--compile-dtypes", default="float32",
                   help="dtypes at which torch.compile variants run (default: %(default)s)")
    p.add_argument("--no-compile", action="store_true",
                   help="skip torch.compile at every batch")
    p.add_argument("--no-tf32", dest="tf32", action="store_false",
                   help="skip the timing with TF32 allowed (eager and ModelNew, interleaved)")
    p.add_argument("--no-large-39", dest="large39", action="store_false",
                   help="skip model 39 at the public benchmark's 16384 x 4096 x 4096")
    p.add_argument("--reps", type=int, default=50,
                   help="timed calls per variant; the median is reported (default: %(default)s)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write every result to FILE (JSON) and the table to FILE with the "
                        "suffix .csv next to it")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw ModelNew's speedup against eager and torch.compile per model and "
                        "batch (needs matplotlib)")
    args = p.parse_args(argv)
    args.compile_modes = comma_list(args.compile_modes)
    bad = [m for m in args.compile_modes if m not in ("default", "max-autotune-no-cudagraphs")]
    if bad:
        p.error(f"--compile-modes: unknown {', '.join(bad)}; expected default and/or "
                "max-autotune-no-cudagraphs")
    if args.reps < 1:
        p.error(f"--reps must be at least 1, got {args.reps}")
    unknown = [k for k in comma_list(args.models) if k not in PROBLEMS]
    if unknown:
        p.error(f"--models: unknown {', '.join(unknown)}; expected some of {', '.join(PROBLEMS)}")
    plt = import_pyplot() if args.plot else None
    for output in (args.json, args.plot):  # before the run, not after an hour of it
        if output:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench: --device cuda needs a CUDA GPU; use --device cpu (with --sizes small)")
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # the exact-float32 contract
    ceil = measure_ceilings() if args.device == "cuda" else None
    compile_batches = set() if args.no_compile else {int(b) for b in comma_list(args.compile_batches)}
    rows = []
    configs = []
    for key in comma_list(args.models):
        init_args = PROBLEMS[key].init_args if args.sizes == "spec" else SMALL_SIZES[key][0]
        for dt in comma_list(args.dtypes):
            for b in (int(x) for x in comma_list(args.batches)):
                configs.append((key, init_args, b, getattr(torch, dt)))
        if key == "39" and args.large39 and args.sizes == "spec":
            configs.append(("39", BENCH_39_LARGE["init_args"], BENCH_39_LARGE["batch_size"],
                            torch.float32))
    for key, init_args, b, dt in configs:
        compile_here = str(dt).replace("torch.", "") in comma_list(args.compile_dtypes) and (
            b in compile_batches or (key == "39" and b == 16384 and compile_batches))
        t0 = time.time()
        row = bench_config(key, init_args, b, dt, args, compile_here)
        if ceil:
            row["floor_ms"], row["flops"], row["bytes"] = floor_ms(key, init_args, b, ceil)
        if dt != torch.float32:
            row["floor_ms"] = None
        rows.append(row)
        print(f"[bench] {key} b{b} {dt} done in {time.time() - t0:.0f}s: "
              f"new {fmt(row.get('modelnew_ms'), '.4f')} ms, eager {fmt(row.get('eager_ms'), '.4f')} ms",
              flush=True)
    result = {"device": args.device, "gpu": device_name(args.device), "torch": torch.__version__,
              "fusedops": torch.ops.fusedops.version(), "ceilings": ceil, "rows": rows,
              "command": " ".join(sys.argv)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        write_csv(Path(args.json).with_suffix(".csv"), rows)
    if args.plot:
        plot_speedups(plt, rows, args.plot,
                      f"{device_name(args.device)}, torch {torch.__version__}, "
                      f"fusedops {torch.ops.fusedops.version()}")
    print_table(rows, ceil, args.device)


if __name__ == "__main__":
    main()
