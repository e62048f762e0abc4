r"""Runs KernelBench's own evaluator (`eval_kernel_against_ref` from
ScalingIntelligence/KernelBench, src/kernelbench/eval.py) on fusedops' ModelNew, on the GPU.

    python bench/kernelbench_eval.py --kernelbench PATH [--problems 18,39,62,98] \
        [--precisions fp32,fp16,bf16] [--numerics accurate,eager] [--cache-folds on,off] \
        [--trials 5] [--perf-trials 100]

Every combination of the lists is one row (float32 computes the same in both numerics, so it is
run once, as "accurate"), all in this one process, and a table is printed last.

PATH is a KernelBench checkout (or a copy holding src/kernelbench/{__init__,eval,timing,
dataset}.py and KernelBench/level2/<problem>_*.py). Its eval.py needs pydantic, requests and
numpy. KernelBench's utils.py imports LLM clients (openai, litellm, dotenv) that an evaluation
never uses; the evaluator only calls its get_gpu_vendor, so the package is assembled in a
temporary folder with the real __init__, eval, timing and dataset modules and a utils module
that holds get_gpu_vendor alone (its logic, from the NVIDIA/AMD device name).

The custom source given to the evaluator is what a KernelBench user writes to use fusedops:
the problem's ModelNew with the chosen numerics as a keyword argument, e.g.

    from fusedops import ModelNew62
    class ModelNew(ModelNew62):
        def __init__(self, *args):
            super().__init__(*args, numerics="eager")

and with --cache-folds off, `self.cache_folds = False` after it: a fold of the weights every
call, what a training step pays (the weights change each step), where "on" is the harness's own
condition (weights fixed, ModelNew's cached folds).

The harness times ModelNew as its users do: in training mode, with grad mode on and parameters
that require grad (eval.py times the new model outside torch.no_grad()).

The evaluator runs the reference source of KernelBench itself (its sizes: model 39 at
16384 x 4096 -> 4096), 5 correctness trials from seed 42 with torch.rand inputs and
atol = rtol = 1e-2 for fp16/bf16, then times ModelNew and the reference with CUDA events.
With --compile the reference under torch.compile is timed too, by KernelBench's own
measure_ref_program_time (its torch.compile baseline), in the same process.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

UTILS_STUB = '''"""Stand-in for KernelBench's utils.py (which imports LLM clients): get_gpu_vendor only."""
import torch


def get_gpu_vendor(device=None):
    if not torch.cuda.is_available():
        return "unknown"
    if device is None:
        device = torch.cuda.current_device()
    name = torch.cuda.get_device_name(device).upper()
    if "NVIDIA" in name:
        return "nvidia"
    if "AMD" in name or "MI3" in name:
        return "amd"
    return "unknown"
'''
MODULES = ("__init__.py", "eval.py", "timing.py", "dataset.py")
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def custom_source(problem: str, numerics: str, cache_folds: bool = True) -> str:
    source = (f"from fusedops import ModelNew{problem}\n\n\n"
              f"class ModelNew(ModelNew{problem}):\n"
              f"    def __init__(self, *args):\n"
              f"        super().__init__(*args, numerics={numerics!r})\n")
    if not cache_folds:
        source += "        self.cache_folds = False\n"
    return source


def rows_of(problems, precisions, numerics, cache_folds):
    """Every combination; float32 once (both numerics compute the same)."""
    rows = []
    for problem in problems:
        for precision in precisions:
            for mode in (["accurate"] if precision == "fp32" else numerics):
                for cache in cache_folds:
                    rows.append((problem, precision, mode, cache == "on"))
    return rows


def table(results) -> str:
    lines = [f"{'model':>5} {'dtype':>5} {'numerics':>8} {'folds':>6} {'ok':>3} {'ms':>8} "
             f"{'eager ms':>9} {'x eager':>8}" + (f" {'compile':>8}" if any(
                 "compile_runtime_ms" in r for r in results) else "")]
    for r in results:
        ms = f"{r['runtime_ms']:.3f}" if r["runtime_ms"] else "-"
        ref = f"{r['ref_runtime_ms']:.3f}" if r["ref_runtime_ms"] else "-"
        speedup = f"{r['x_vs_eager']:.2f}x" if r.get("x_vs_eager") else "-"
        line = (f"{r['problem']:>5} {r['precision']:>5} {r['numerics']:>8} "
                f"{'cached' if r['cache_folds'] else 'fresh':>6} "
                f"{'yes' if r['correctness'] else 'NO':>3} {ms:>8} {ref:>9} {speedup:>8}")
        if "compile_runtime_ms" in r:
            compiled = r["compile_runtime_ms"]
            line += f" {compiled:8.3f}" if compiled else f" {'-':>8}"
        lines.append(line)
    return "\n".join(lines)


def import_kernelbench_eval(kernelbench: Path, workdir: Path):
    package = workdir / "kernelbench"
    package.mkdir()
    for name in MODULES:
        shutil.copy(kernelbench / "src" / "kernelbench" / name, package / name)
    (package / "utils.py").write_text(UTILS_STUB)
    sys.path.insert(0, str(workdir))
    from kernelbench import eval as kb_eval  # noqa: E402
    from kernelbench import timing as kb_timing  # noqa: E402
    return kb_eval, kb_timing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/kernelbench_eval.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", type=Path, required=True)
    parser.add_argument("--problems", default="18,39,62,98")
    parser.add_argument("--precisions", default="fp16,bf16",
                        help="comma-separated: fp32, fp16, bf16")
    parser.add_argument("--numerics", default="eager", help="comma-separated: accurate, eager")
    parser.add_argument("--cache-folds", default="on",
                        help="comma-separated: on (ModelNew's cached weight folds), off "
                             "(cache_folds=False: a fold every call)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--perf-trials", type=int, default=100)
    parser.add_argument("--compile", action="store_true",
                        help="also time the reference under torch.compile (KernelBench's "
                             "measure_ref_program_time)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    lists = {"precisions": (args.precisions, PRECISIONS), "numerics": (args.numerics,
             ("accurate", "eager")), "cache-folds": (args.cache_folds, ("on", "off"))}
    for name, (value, allowed) in lists.items():
        bad = [v for v in value.split(",") if v not in allowed]
        if bad:
            parser.error(f"--{name}: {', '.join(bad)} is not one of {', '.join(allowed)}")

    import fusedops  # noqa: F401  (the custom source imports it; fail here if it cannot)

    results = []
    with tempfile.TemporaryDirectory() as workdir:
        kb_eval, kb_timing = import_kernelbench_eval(args.kernelbench, Path(workdir))
        for problem, precision, numerics, cache in rows_of(
                args.problems.split(","), args.precisions.split(","), args.numerics.split(","),
                args.cache_folds.split(",")):
            (reference_file,) = (args.kernelbench / "KernelBench" / "level2").glob(
                f"{problem}_*.py")
            result = kb_eval.eval_kernel_against_ref(
                reference_file.read_text(), custom_source(problem, numerics, cache),
                seed_num=42, num_correct_trials=args.trials, num_perf_trials=args.perf_trials,
                measure_performance=True, timing_method="cuda_event", verbose=False,
                backend="cuda", precision=PRECISIONS[precision])
            row = {"problem": problem, "precision": precision, "numerics": numerics,
                   "cache_folds": cache, "correctness": bool(result.correctness),
                   "trials": result.metadata.get("correctness_trials", ""),
                   # KernelBench's timing stats are in ms (timing.get_timing_stats).
                   "runtime_ms": result.runtime if result.runtime > 0 else None,
                   "ref_runtime_ms": result.ref_runtime if result.ref_runtime > 0 else None,
                   "max_difference": result.metadata.get("max_difference")}
            if args.compile:
                stats = kb_timing.measure_ref_program_time(
                    reference_file.stem, reference_file.read_text(),
                    num_trials=args.perf_trials, use_torch_compile=True,
                    precision=PRECISIONS[precision])
                row["compile_runtime_ms"] = stats["mean"] if stats else None
                if stats and row["runtime_ms"]:
                    row["x_vs_compile"] = round(stats["mean"] / row["runtime_ms"], 3)
            if row["runtime_ms"] and row["ref_runtime_ms"]:
                row["x_vs_eager"] = round(row["ref_runtime_ms"] / row["runtime_ms"], 3)
            print(json.dumps(row, default=str), flush=True)
            results.append(row)
    print(f"\nKernelBench's harness ({args.kernelbench}), GPU: {torch.cuda.get_device_name()}, "
          f"{args.perf_trials} timed trials, mean ms:")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0 if all(r["correctness"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
