r"""Each ModelNew built as Triton's PyTorch backend builds it (inside torch.inference_mode, so
every weight is an inference tensor with no version counter) against the same model built
normally: median ms per forward of each, side by side, at the SPEC sizes (issue 10's
criterion: within 10%; the weight folds must be cached for inference tensors too).

    python bench/inference_mode.py [--models 18,98,39,62] [--batch 1024] [--reps 200]
        [--device cuda|cpu] [--sizes spec|small]

Timing as bench/bench.py: CUDA events around each call (perf_counter on the CPU), calls of
the two models interleaved inside one inference-mode region (as a server makes its calls),
inputs rotated over >= 256 MiB so each call reads from HBM.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import fusedops
from fusedops.problems import PROBLEMS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: scripted
from bench import L2_FLUSH_BYTES, timed_interleaved  # noqa: E402  (bench/bench.py, beside this file)
from scripted.export import SMALL_SIZES  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="18,98,39,62", help="comma-separated model keys")
    parser.add_argument("--batch", type=int, default=1024, help="rows of x per call")
    parser.add_argument("--reps", type=int, default=200, help="timed calls per model")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda or cpu")
    parser.add_argument("--sizes", choices=("spec", "small"), default="spec",
                        help="SPEC.md's sizes, or the CI export's small ones")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}, "
          f"torch {torch.__version__}, fusedops {fusedops.__version__}")
    print(f"{'model':>5} {'normal ms':>10} {'inference-mode ms':>18} {'ratio':>6}")
    worst = 0.0
    for key in args.models.split(","):
        problem = PROBLEMS[key]
        init_args = SMALL_SIZES[key][0] if args.sizes == "small" else problem.init_args
        torch.manual_seed(0)
        normal = problem.model_new(*init_args).to(device).eval()
        with torch.inference_mode():
            served = problem.model_new(*init_args).to(device).eval()
            served.load_state_dict(normal.state_dict())
        assert all(p.is_inference() for p in served.parameters()), "weights not inference tensors"
        in_features = init_args[0]
        count = max(2, L2_FLUSH_BYTES // (args.batch * in_features * 4) + 1) \
            if device.type == "cuda" else 2
        inputs = [torch.rand(args.batch, in_features, device=device) for _ in range(count)]
        # Both models are called inside one inference-mode region, as a server calls them, so
        # the only difference timed is the kind of their weights (inference tensors or not);
        # entering the region per call would add a few microseconds of Python to one side.
        with torch.inference_mode():
            if not torch.allclose(normal(inputs[0]), served(inputs[0]), rtol=1e-5, atol=1e-6):
                print(f"{key}: the two models disagree", file=sys.stderr)
                return 1
            t_normal, t_served = timed_interleaved([normal, served], inputs, args.reps)
        ratio = t_served / t_normal
        worst = max(worst, ratio)
        print(f"{key:>5} {t_normal:10.4f} {t_served:18.4f} {ratio:6.2f}")
    print(f"worst ratio {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
