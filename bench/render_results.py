r"""Writes the results tables of README.md and docs/PERFORMANCE.md from docs/results.json (the one
source of those numbers, written by bench/results.py from a GPU run), between marker comments:

    <!-- results:NAME:begin -->   (generated: edit docs/results.json or this script, not the text)
    <!-- results:NAME:end -->

    python bench/render_results.py            # rewrite the blocks
    python bench/render_results.py --check    # exit 1 naming each block that disagrees

Blocks: README.md `readme` (float32, KernelBench's harness, against eager PyTorch);
docs/PERFORMANCE.md `compile` (every precision against torch.compile, from bench/precisions.py
when the run has it), `floor` (the same run's distance to the GEMM floor), `training`
(bench/training.py's step against eager PyTorch, with peak memory, when the run has it) and
`kernelbench` (KernelBench's harness beside bench.py's no_grad time).
tests/python/test_results_docs.py runs the check on the CPU in CI.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "docs" / "results.json"
# Which blocks each document holds.
DOCUMENTS = {"README.md": ("readme",),
             "docs/PERFORMANCE.md": ("compile", "floor", "training", "kernelbench")}
REQUIRED = ("gpu", "commit", "commands", "bench", "kernelbench")
ORDER = ("18", "98", "39", "62")  # README's order: the two folds first
# Why a ratio is what it is, where a reader would doubt it (not a measurement: kept here).
NOTES = {"18": "the GEMM folds into `x . colsum(W)`, a cached weight fold",
         "98": "the pooled Linear, a cached weight fold"}
KB_LABEL = {"39": "39 (16384 x 4096)"}  # KernelBench's size of model 39 is not SPEC's
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
MODES = ("float32", "tf32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16")
# bench/training.py's modes: "bfloat16" is the model cast to bfloat16, weights and optimizer too.
TRAINING_MODES = ("float32", "tf32", "autocast-float16", "autocast-bfloat16", "bfloat16")


def validate(results: dict) -> None:
    missing = [key for key in REQUIRED if not results.get(key)]
    if missing:
        raise ValueError(f"docs/results.json lacks {', '.join(missing)} (bench/results.py "
                         "writes them)")
    if not all(isinstance(c, str) and c.strip() for c in results["commands"]):
        raise ValueError("docs/results.json: commands must be non-empty strings")


def ms(value) -> str:
    """Three significant digits, as KernelBench reports its means."""
    return "-" if value is None else f"{value:.3g}"


def ratio(value) -> str:
    return "-" if value is None else (f"{value:.0f}x" if value >= 10 else f"{value:.3g}x")


def pair(values, fmt) -> str:
    return " / ".join(fmt(v) for v in values)


def kb_row(results, problem, precision, cached):
    """The harness's row: numerics "eager" for float16/bfloat16 where it ran (the one that passes
    KernelBench's 1e-2 check), else whatever ran."""
    rows = [r for r in results["kernelbench"] if str(r["problem"]) == problem and
            r["precision"] == precision and bool(r["cache_folds"]) == cached]
    rows.sort(key=lambda r: r["numerics"] != "eager")
    return rows[0] if rows else None


def bench_ms(results, problem, dtype):
    """bench.py's no_grad median at batch 1024 (model 39 at KernelBench's 16384 rows)."""
    batch = 16384 if problem == "39" else 1024
    for r in results["bench"]["rows"]:
        if r["model"] == problem and r["batch"] == batch and r["dtype"] == dtype:
            return r.get("modelnew_ms")
    return None


def row_of(rows, model, mode):
    """The row of a model (its key as a string) and mode, or None."""
    return next((r for r in rows if str(r["model"]) == model and r["mode"] == mode), None)


def provenance(results, what) -> str:
    commands = "; ".join(f"`{c}`" for c in results["commands"])
    return (f"{what}, one run: one {results['gpu']}, PyTorch {results.get('torch') or '?'}, "
            f"commit {results['commit'][:7]}, {commands}.")


def render_readme(results) -> str:
    lines = [provenance(results, "Timed by KernelBench's own harness as its users time it (its "
                        "sizes, training mode, grad mode on), float32, mean ms"), "",
             "| model | fusedops | eager PyTorch | speedup |", "|---|---|---|---|"]
    for problem in ORDER:
        r = kb_row(results, problem, "fp32", True)
        if r is None:
            continue
        note = f" ({NOTES[problem]})" if problem in NOTES else ""
        lines.append(f"| {KB_LABEL.get(problem, problem)} | {ms(r['runtime_ms'])} ms | "
                     f"{ms(r['ref_runtime_ms'])} ms | {ratio(r.get('x_vs_eager'))}{note} |")
    return "\n".join(lines)


def render_kernelbench(results) -> str:
    lines = [provenance(results, "KernelBench's harness (mean ms; \"cached\": the weights fixed, "
                        "as the harness runs; \"fresh\": `cache_folds = False`, a fold every "
                        "call) beside bench.py's `torch.no_grad()` median (batch 1024)"), "",
             "| model | dtype | harness, cached | harness, fresh fold | no_grad (bench.py) "
             "| harness eager PyTorch | x eager (cached) | passed |",
             "|---|---|---|---|---|---|---|---|"]
    for problem in ORDER:
        for precisions in (("fp32",), ("fp16", "bf16")):
            cached = [kb_row(results, problem, p, True) for p in precisions]
            if not any(cached):
                continue
            fresh = [kb_row(results, problem, p, False) for p in precisions]

            def field(rows, key):
                return [r.get(key) if r else None for r in rows]
            passed = [("yes" if r["correctness"] else "NO") if r else "-" for r in cached]
            lines.append(
                f"| {KB_LABEL.get(problem, problem)} | {' / '.join(DTYPES[p] for p in precisions)}"
                f" | {pair(field(cached, 'runtime_ms'), ms)} | {pair(field(fresh, 'runtime_ms'), ms)}"
                f" | {pair([bench_ms(results, problem, DTYPES[p]) for p in precisions], ms)}"
                f" | {pair(field(cached, 'ref_runtime_ms'), ms)}"
                f" | {pair(field(cached, 'x_vs_eager'), ratio)} | {' / '.join(passed)} |")
    return "\n".join(lines)


def render_compile(results) -> str:
    rows = results.get("precisions")
    if not rows:
        return ("This run's docs/results.json has no precisions table: scripts/gpu_check.sh's "
                "precisions step makes it (bench/precisions.py), unless skipped. The last one "
                "measured: \"Issue 24, second pass\" in the log below.")
    if all(r.get("compile_vs_fusedops") is None for r in rows):
        return ("This run's precisions table has no torch.compile column (bench/precisions.py "
                "ran with --no-compile: about 30 compiles): run it without --no-compile for "
                "this table. The last one measured: \"Issue 24, second pass\" in the log below.")
    lines = [provenance(results, "How many times faster than torch.compile of the reference "
                        "(default mode; above 1x fusedops is faster), median ms of fusedops in "
                        "float32 in parentheses"), "",
             "| model | " + " | ".join(MODES) + " |", "|---" * (len(MODES) + 1) + "|"]
    models = list(dict.fromkeys(str(r["model"]) for r in rows))
    for model in models:
        cells = []
        for mode in MODES:
            r = row_of(rows, model, mode)
            cell = ratio(r.get("compile_vs_fusedops")) if r else "-"
            if r and mode == "float32":
                cell += f" ({ms(r['fusedops_ms'])} ms)"
            cells.append(cell)
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_floor(results) -> str:
    """fusedops' time over its floor (bench/precisions.py: cuBLAS's bare GEMM of the same run,
    plus y's round trip for model 39 in training), for the models that run that GEMM."""
    rows = [r for r in results.get("precisions") or [] if "floor_ms" in r]
    if not rows:
        return ("This run's docs/results.json has no floor column: scripts/gpu_check.sh's "
                "precisions step makes it (bench/precisions.py), unless skipped. The last one "
                "measured: \"Issue 39, first pass\" in the log below.")
    lines = [provenance(results, "fusedops' time over its floor (cuBLAS's bare GEMM at the same "
                        "shape and dtype in the same run, plus one read and one write of y at "
                        "copy bandwidth for model 39 in training; 1.00x is the floor), "
                        "numerics=\"eager\" after the slash where the model is float16/bfloat16"),
             "", "| model | " + " | ".join(MODES) + " |", "|---" * (len(MODES) + 1) + "|"]
    for model in dict.fromkeys(str(r["model"]) for r in rows):
        if model not in ("39", "62", "39L"):
            continue  # 18 and 98 fold their weights: the reference's GEMM is no floor of theirs
        cells = []
        for mode in MODES:
            r = row_of(rows, model, mode)
            cell = ratio(r["fusedops_over_floor"]) if r else "-"
            if r and r.get("fusedops_eager_over_floor") is not None:
                cell += " / " + ratio(r["fusedops_eager_over_floor"])
            cells.append(cell)
        label = KB_LABEL["39"] if model == "39L" else model  # precisions.py's name for it
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_training(results) -> str:
    """bench/training.py's step: how many times faster than eager PyTorch's (and torch.compile's,
    where the run compiled), then each side's peak memory over a step."""
    rows = results.get("training")
    if not rows:
        return ("This run's docs/results.json has no training table: `python3 bench/training.py "
                "--json training.json` on the GPU, then bench/results.py with `--training "
                "training.json`. The last one measured: \"Issue 40, fourth pass\" in the log below.")
    compiled = any(r.get("x_compile") is not None for r in rows)
    floored = any(r.get("floor_ms") is not None for r in rows)
    what = ("A training step (zero_grad, forward, loss, backward, SGD) against eager PyTorch's: "
            "how many times faster (above 1x fusedops is faster)" +
            (", then against torch.compile's" if compiled else "") +
            ", fusedops' median ms in parentheses" +
            ("; then the floor's, the same step around bench/training.py's StepFloor, the least "
             "any model with these parameters does" if floored else "") +
            "; below, the peak memory over a step above its start, MiB, fusedops / eager")
    header = ["| model | " + " | ".join(TRAINING_MODES) + " |",
              "|---" * (len(TRAINING_MODES) + 1) + "|"]
    speed, memory = list(header), list(header)
    for model in dict.fromkeys(str(r["model"]) for r in rows):
        speed_cells, memory_cells = [], []
        for mode in TRAINING_MODES:
            r = row_of(rows, model, mode)
            if r is None:
                speed_cells.append("-")
                memory_cells.append("-")
                continue
            cell = ratio(r["x_eager"])
            if compiled:
                cell += " / " + ratio(r.get("x_compile"))
            floor = r.get("floor_ms")
            speed_cells.append(f"{cell} ({ms(r['fusedops_ms'])} ms" +
                               ("" if floor is None else f"; floor {ms(floor)}") + ")")
            memory_cells.append(" / ".join("-" if r.get(k) is None else f"{r[k]:.0f}"
                                           for k in ("fusedops_peak_mib", "eager_peak_mib")))
        speed.append(f"| {model} | " + " | ".join(speed_cells) + " |")
        memory.append(f"| {model} | " + " | ".join(memory_cells) + " |")
    return "\n".join([provenance(results, what), "", *speed, "", *memory])


RENDERERS = {"readme": render_readme, "kernelbench": render_kernelbench,
             "compile": render_compile, "floor": render_floor, "training": render_training}


def block_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results:{name}:begin -->\n)(.*?)(\n<!-- results:{name}:end -->)",
                      re.S)


def blocks_of(text: str, name: str) -> list[str]:
    return [m.group(2) for m in block_pattern(name).finditer(text)]


def render_document(text: str, names, results) -> str:
    for name in names:
        if len(blocks_of(text, name)) != 1:
            raise ValueError(f"expected one results:{name} block, found "
                             f"{len(blocks_of(text, name))}")
        body = RENDERERS[name](results)
        text = block_pattern(name).sub(lambda m: m.group(1) + body + m.group(3), text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--root", type=Path, default=REPO_ROOT, help="where README.md and docs/ are")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 when a block differs from its rendering")
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text())
    validate(results)
    stale = []
    for document, names in DOCUMENTS.items():
        path = args.root / document
        text = path.read_text()
        rendered = render_document(text, names, results)
        if rendered != text:
            stale.append(f"{document} ({', '.join(n for n in names if blocks_of(text, n) != blocks_of(rendered, n))})")
            if not args.check:
                path.write_text(rendered)
    if args.check and stale:
        print("not rendered from docs/results.json: " + "; ".join(stale) +
              "\nrun: python bench/render_results.py", file=sys.stderr)
        return 1
    print(("rewrote " + "; ".join(stale)) if stale else "every results block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
