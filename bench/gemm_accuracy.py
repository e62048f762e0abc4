"""The float32 GEMM behind models 39/62/98 on its own: error against float64 and time per mode
(FUSEDOPS_FP32_GEMM), through model 39 in eval mode (y = x W^T, then a per-column affine map).

    python bench/gemm_accuracy.py [--sizes 1024x8192x8192,16384x4096x4096,1024x512x8192]

Prints, per size and input distribution, the relative Frobenius error ||out - ref64|| / ||ref64||
of each mode and of PyTorch's own float32 result, and each mode's median time (CUDA events,
warm L2: this measures the GEMM, bench/bench.py gives the models' cold-L2 numbers)."""
import argparse

import torch

import fusedops
from fusedops.problems import PROBLEMS


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def median_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def profile(model, x):
    with fusedops.settings(FUSEDOPS_FP32_GEMM="3xfp16"), torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                model(x)
            torch.cuda.synchronize()
    for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:8]:
        print(f"    {e.device_time_total / 5:9.1f} us  {e.key[:90]}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1024x8192x8192,16384x4096x4096,1024x512x8192")
    p.add_argument("--modes", default="3xfp16,3xtf32,ieee")
    p.add_argument("--profile", action="store_true",
                   help="also print the CUDA kernels of one 3xfp16 call per size (torch.profiler)")
    args = p.parse_args()
    torch.manual_seed(0)
    prob = PROBLEMS["39"]
    for size in args.sizes.split(","):
        m, n, k = (int(v) for v in size.split("x"))
        ref = prob.model(k, n, (n,)).cuda().eval()
        new = prob.model_new(k, n, (n,)).cuda().eval()
        new.load_state_dict(ref.state_dict())
        ref64 = prob.model(k, n, (n,)).cuda().double().eval()
        ref64.load_state_dict(ref.state_dict())
        for dist in ("rand", "randn"):
            x = torch.rand(m, k, device="cuda") if dist == "rand" else torch.randn(m, k, device="cuda")
            with torch.no_grad():
                want = ref64(x.double())
                line = [f"{size} {dist}: torch fp32 err {rel(ref(x), want):.2e}"]
                for mode in args.modes.split(","):
                    with fusedops.settings(FUSEDOPS_FP32_GEMM=mode):
                        err = rel(new(x), want)
                        ms = median_ms(lambda: new(x))
                    line.append(f"{mode} err {err:.2e} {ms:.3f} ms")
            print(" | ".join(line), flush=True)
            if args.profile and dist == "rand":
                profile(new, x)
        del ref, new, ref64
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
