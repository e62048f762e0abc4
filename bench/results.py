r"""Collects one GPU run's benchmark outputs into docs/results.json, the one source of the
results tables in README.md and docs/PERFORMANCE.md (bench/render_results.py writes them).

    python bench/results.py --bench out/bench.json --kernelbench out/kernelbench.json \
        [--precisions out/precisions.json] [--training out/training.json] \
        --command "bash scripts/gpu_check.sh ..." --out docs/results.json

--bench is bench/bench.py's --json output (no_grad serving times), --kernelbench
bench/kernelbench_eval.py's (KernelBench's harness), --precisions bench/precisions.py's (every
deployment precision against torch.compile; optional: its table is rendered only when present),
--training bench/training.py's (a training step against eager PyTorch, with peak memory;
optional likewise).
--command (repeatable) is what produced them, as a reader would type it again; bench.py also
records its own command line. The commit is this checkout's HEAD (`git rev-parse HEAD`; a
checkout with uncommitted changes is refused, since the numbers would belong to no commit), or
--commit where the run had no git checkout (a copy of the tree on the GPU machine).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# What bench/render_results.py needs of the file; checked there too (the file may be edited).
REQUIRED = ("gpu", "commit", "commands", "bench", "kernelbench")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def collect(bench: dict, kernelbench: list, precisions: list | None, commands: list[str],
            commit: str, training: list | None = None) -> dict:
    if bench.get("device") != "cuda":
        raise ValueError(f"--bench is a run on {bench.get('device')!r}, not on a GPU: the "
                         "results tables are GPU results")
    if not kernelbench:
        raise ValueError("--kernelbench holds no rows")
    if not commands or not all(c.strip() for c in commands):
        raise ValueError("--command: say what produced these files (at least one, not empty)")
    result = {"gpu": bench["gpu"], "commit": commit, "torch": bench.get("torch"),
              "fusedops": bench.get("fusedops"), "commands": commands,
              "bench": {"command": bench.get("command"), "rows": bench["rows"]},
              "kernelbench": kernelbench}
    if precisions is not None:
        result["precisions"] = precisions
    if training is not None:
        if not training:
            raise ValueError("--training holds no rows")
        result["training"] = training
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bench", type=Path, required=True, help="bench/bench.py --json output")
    p.add_argument("--kernelbench", type=Path, required=True,
                   help="bench/kernelbench_eval.py --json output")
    p.add_argument("--precisions", type=Path, help="bench/precisions.py --json output (optional)")
    p.add_argument("--training", type=Path, help="bench/training.py --json output (optional)")
    p.add_argument("--command", action="append", default=[], required=True,
                   help="a command that produced the inputs (repeatable)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "results.json")
    p.add_argument("--commit", help="the commit the run built (default: git rev-parse HEAD)")
    p.add_argument("--allow-dirty", action="store_true",
                   help="record HEAD even with uncommitted changes (marked '-dirty')")
    args = p.parse_args(argv)
    commit = args.commit
    if not commit:
        try:
            commit = git("rev-parse", "HEAD")
            dirty = git("status", "--porcelain", "--untracked-files=no")
        except (OSError, subprocess.CalledProcessError):
            p.error(f"{REPO_ROOT} is not a git checkout: pass --commit")
        if dirty:
            if not args.allow_dirty:
                p.error("the checkout has uncommitted changes: the numbers would belong to no "
                        "commit (commit first, or --allow-dirty)")
            commit += "-dirty"
    try:
        result = collect(json.loads(args.bench.read_text()),
                         json.loads(args.kernelbench.read_text()),
                         json.loads(args.precisions.read_text()) if args.precisions else None,
                         args.command, commit,
                         json.loads(args.training.read_text()) if args.training else None)
    except ValueError as error:
        p.error(str(error))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"results: {args.out} (GPU {result['gpu']}, commit {commit[:12]}); now "
          f"python bench/render_results.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
