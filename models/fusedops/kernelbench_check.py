"""KernelBench's correctness check, re-written here: the procedure of `eval_kernel_against_ref`
and `run_and_check_correctness` in ScalingIntelligence/KernelBench (src/kernelbench/eval.py),
applied to a fusedops problem.

    python -m fusedops.kernelbench_check --problem 62 --dtype bfloat16 --numerics eager

The procedure, step for step as KernelBench runs it:
  1. seed (torch.manual_seed and torch.cuda.manual_seed) then build the reference from the
     problem's init arguments; seed again and build ModelNew; both .to(device, dtype). Both
     stay in train() mode, the mode a fresh module is in (model 39 normalizes with batch
     statistics and updates its running statistics on every trial, in both models alike).
  2. seed with `seed` and draw one trial seed per trial: torch.randint(0, 2**32 - 1, (1,)).
  3. per trial, under torch.no_grad(): seed with the trial seed; the inputs are torch.rand in
     float32 on the CPU (KernelBench's get_inputs), cast to dtype, moved to the device; run the
     reference, then ModelNew; the trial passes when the shapes agree and
     torch.allclose(reference, new, atol=tol, rtol=tol), tol = 1e-4 for float32 and 1e-2 for
     float16/bfloat16 (KernelBench's get_tolerance_for_precision).
Those tolerances are fusedops.accuracy's (tolerance_for), the one tolerance rule of this
package, which holds KernelBench's values.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import torch

from .accuracy import tolerance_for
from .problems import PROBLEMS, get_problem

KERNELBENCH_SEED = 42
KERNELBENCH_TRIALS = 5
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class CheckResult:
    problem: str
    dtype: torch.dtype
    numerics: str
    passed_trials: int = 0
    trials: int = 0
    max_difference: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.trials > 0 and self.passed_trials == self.trials

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        worst = max(self.max_difference) if self.max_difference else float("nan")
        return (f"{self.problem} {str(self.dtype).removeprefix('torch.')} {self.numerics}: "
                f"{verdict} ({self.passed_trials} of {self.trials} trials, max |difference| "
                f"{worst:.3g})")


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def check(problem_key: str, *, dtype: torch.dtype, numerics: str = "eager",
          device: str | torch.device = "cuda", init_args: tuple | None = None,
          batch_size: int | None = None, seed: int = KERNELBENCH_SEED,
          trials: int = KERNELBENCH_TRIALS) -> CheckResult:
    """Runs KernelBench's check of ModelNew (with `numerics`) against the reference; init_args
    and batch_size default to the problem's (docs/MODELS.md's default sizes)."""
    problem = get_problem(problem_key)
    init_args = problem.init_args if init_args is None else tuple(init_args)
    device = torch.device(device)
    tolerance = tolerance_for(dtype)
    result = CheckResult(problem.key, dtype, numerics)

    with torch.no_grad():
        _seed(seed)
        reference = problem.model(*init_args)
    _seed(seed)
    with torch.no_grad():
        new = problem.model_new(*init_args, numerics=numerics)
    reference = reference.to(device=device, dtype=dtype)
    new = new.to(device=device, dtype=dtype)

    torch.manual_seed(seed)
    trial_seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]
    with torch.no_grad():
        for trial_seed in trial_seeds:
            _seed(trial_seed)
            x = problem.make_input(batch_size, init_args).to(dtype=dtype).to(device=device)
            expected = reference(x)
            actual = new(x)
            result.trials += 1
            if actual.shape != expected.shape:
                continue
            result.max_difference.append(float((expected - actual).abs().max().item()))
            if torch.allclose(expected, actual, atol=tolerance.atol, rtol=tolerance.rtol):
                result.passed_trials += 1
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusedops.kernelbench_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", choices=list(PROBLEMS), action="append",
                        help="problem key, repeatable (default: all four)")
    parser.add_argument("--dtype", choices=list(DTYPES), action="append",
                        help="repeatable (default: float16 and bfloat16)")
    parser.add_argument("--numerics", choices=("accurate", "eager"), default="eager")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=KERNELBENCH_TRIALS)
    parser.add_argument("--seed", type=int, default=KERNELBENCH_SEED)
    args = parser.parse_args(argv)
    failed = 0
    for key in args.problem or list(PROBLEMS):
        for dtype_name in args.dtype or ["float16", "bfloat16"]:
            result = check(key, dtype=DTYPES[dtype_name], numerics=args.numerics,
                           device=args.device, seed=args.seed, trials=args.trials)
            print(result, flush=True)
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
