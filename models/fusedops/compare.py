"""Runs each ModelNew against its reference model at the SPEC default sizes and prints the
agreement (max abs diff, relative error vs a float64 reference, and whether the accuracy contract
of docs/MODELS.md holds: fusedops.accuracy) and time per model; exit status 1 if it does not.

    python -m fusedops.compare [--device cuda|cpu] [--models 98,18,39,62] [--batch N]
"""
from __future__ import annotations

import argparse
import copy
import sys
import time

import torch

from .accuracy import within_tolerance
from .problems import PROBLEMS


def _time_ms(fn, x, device, reps):
    fn(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="98,18,39,62")
    p.add_argument("--batch", type=int, default=None, help="default: SPEC's batch size")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    reps = args.reps or (20 if device.type == "cuda" else 2)
    print(f"fusedops {torch.ops.fusedops.version()} on {device} "
          f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"torch {torch.__version__}, float32")
    print(f"{'model':>5} {'input':>12} {'max|diff|':>10} {'err ref32':>10} {'err new':>10} "
          f"{'contract':>8} {'ref ms':>9} {'new ms':>9} {'speedup':>8}")
    failures = 0
    for key in args.models.split(","):
        prob = PROBLEMS[key]
        torch.manual_seed(args.seed)
        ref = prob.model(*prob.init_args).to(device)
        new = prob.model_new(*prob.init_args).to(device)
        new.load_state_dict(ref.state_dict())
        ref64 = copy.deepcopy(ref).double()
        x = prob.make_input(args.batch, device=device)
        with torch.no_grad():
            # Model 39 runs in training mode, as the public benchmark does; each module keeps
            # its own running statistics, so the three see the same first step.
            out_ref, out_new, out64 = ref(x), new(x), ref64(x.double())
            err = lambda o: ((o.double() - out64).norm() / out64.norm()).item()
            # docs/MODELS.md's accuracy contract (fusedops.accuracy), float64 clause included.
            close = bool(within_tolerance(out_new, out_ref, expected_float64=out64).all())
            failures += not close
            t_ref = _time_ms(ref, x, device, reps)
            t_new = _time_ms(new, x, device, reps)
        print(f"{key:>5} {str(tuple(x.shape)):>12} {(out_new - out_ref).abs().max().item():10.2e} "
              f"{err(out_ref):10.2e} {err(out_new):10.2e} {str(close):>8} {t_ref:9.3f} "
              f"{t_new:9.3f} {t_ref / t_new:7.1f}x")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
