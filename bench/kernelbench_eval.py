r"""Runs KernelBench's own evaluator (`eval_kernel_against_ref` from
ScalingIntelligence/KernelBench, src/kernelbench/eval.py) on fusedops' ModelNew, on the GPU.

    python bench/kernelbench_eval.py --kernelbench PATH [--problems 18,39,62,98] \
        [--precisions fp16,bf16] [--numerics eager] [--trials 5] [--perf-trials 20]

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


def custom_source(problem: str, numerics: str) -> str:
    return (f"from fusedops import ModelNew{problem}\n\n\n"
            f"class ModelNew(ModelNew{problem}):\n"
            f"    def __init__(self, *args):\n"
            f"        super().__init__(*args, numerics={numerics!r})\n")


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
    parser.add_argument("--precisions", default="fp16,bf16")
    parser.add_argument("--numerics", choices=("accurate", "eager"), default="eager")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--perf-trials", type=int, default=20)
    parser.add_argument("--compile", action="store_true",
                        help="also time the reference under torch.compile (KernelBench's "
                             "measure_ref_program_time)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import fusedops  # noqa: F401  (the custom source imports it; fail here if it cannot)

    results = []
    with tempfile.TemporaryDirectory() as workdir:
        kb_eval, kb_timing = import_kernelbench_eval(args.kernelbench, Path(workdir))
        for problem in args.problems.split(","):
            (reference_file,) = (args.kernelbench / "KernelBench" / "level2").glob(
                f"{problem}_*.py")
            for precision in args.precisions.split(","):
                result = kb_eval.eval_kernel_against_ref(
                    reference_file.read_text(), custom_source(problem, args.numerics),
                    seed_num=42, num_correct_trials=args.trials, num_perf_trials=args.perf_trials,
                    measure_performance=True, timing_method="cuda_event", verbose=False,
                    backend="cuda", precision=PRECISIONS[precision])
                row = {"problem": problem, "precision": precision, "numerics": args.numerics,
                       "correctness": bool(result.correctness),
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
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0 if all(r["correctness"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
