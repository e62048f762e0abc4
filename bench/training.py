r"""One training step with each model (issue 40): eager PyTorch's reference, fusedops' ModelNew
and torch.compile of the reference, side by side in one process, with each step's peak memory.

    python bench/training.py [--models 18,98,39,62] \
        [--modes float32,tf32,autocast-float16,autocast-bfloat16,bfloat16] \
        [--batch 1024] [--steps 20] [--warmup 3] [--no-compile] [--no-floor] [--breakdown] \
        [--json FILE]
    python bench/training.py --device cpu --sizes small --steps 5 --no-compile   # a quick CPU run

A step: zero_grad(set_to_none=True), forward, loss = y.float().square().mean(), backward,
SGD.step (lr 1e-6, momentum 0.9: model 18's weight gradient is rank one, the same for each of
its out_features rows, so a step moves y by about lr * out_features * |x|^2 per unit of
gradient, and at lr 1e-3 it diverges within a few steps, after which its times would be those
of non-finite inputs); the median wall time of --steps steps after --warmup, each step
synchronized (CUDA), each from the same weights and optimizer state (restored, untimed, before
it). Modes: float32 (torch's float32 matmul precision "ieee"), tf32
("tf32"), autocast-<dtype> (float32 weights, the forward inside torch.autocast), bfloat16 (the
model cast to bfloat16: weights and optimizer state in bfloat16). Model 39 trains. Peak memory:
torch.cuda.max_memory_allocated() over one step, less what was allocated before it (weights,
gradients of the previous step freed by zero_grad, optimizer state), on CUDA only.
--breakdown (CUDA): where each variant's step time goes: the host's time to issue it while the
GPU is still busy (a step that waits on the GPU shows the queued sleep's length), the GPU's
kernel time and its largest kernels. A step whose host time exceeds its GPU time is bound by
the host: its wall time is the host's, whatever the kernels do.
The floor (on by default): the same step around StepFloor, a model with the same parameters
that does the least any model of them does (each parameter's gradient written once, the
optimizer's pass over them, the step's own host work): no model of these parameters steps
faster, however fast its kernels. A ratio against eager is bounded by eager / floor.
The losses of --check-steps identical steps from identical weights are compared with the
reference's (the largest relative difference, printed): a fast step that trains something else is
no result. (Not the parameters: some gradients are rounding noise by the algebra, e.g. a
BatchNorm bias's right after its zero init, 2 beta = 0, and differ however exact both sides are;
tests/python/test_autograd.py checks the parameters against float64.)
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import fusedops
from fusedops.problems import PROBLEMS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripted.export import SMALL_SIZES  # noqa: E402  (small sizes for a quick run)

MODES = ("float32", "tf32", "autocast-float16", "autocast-bfloat16", "bfloat16")


@contextlib.contextmanager
def mode_context(mode, device):
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32" if mode == "tf32" else "ieee"
    try:
        if mode.startswith("autocast-"):
            with torch.autocast(device, dtype=getattr(torch, mode.split("-", 1)[1])):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved


def make_models(key, init_args, mode, device):
    problem = PROBLEMS[key]
    torch.manual_seed(0)
    reference = problem.model(*init_args)
    new = problem.model_new(*init_args)
    new.load_state_dict(reference.state_dict())
    dtype = torch.bfloat16 if mode == "bfloat16" else torch.float32
    return reference.to(device, dtype).train(), new.to(device, dtype).train(), dtype


class StepFloor(torch.nn.Module):
    """The least work a training step of a model with `model`'s parameters can do: a copy of
    each parameter (shape, dtype, device), and a forward of one reduction per parameter whose
    backward writes that parameter's gradient once (an expanded scalar, made dense by autograd's
    accumulation, as any model writes its gradients), its output one value per row of x."""

    def __init__(self, model):
        super().__init__()
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(p.detach().clone()) for p in model.parameters())

    def forward(self, x):
        return x[:, :1] * sum(p.sum() for p in self.params)


def step_fn(model, mode, device):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9)
    saved = {}

    def snapshot():
        saved["params"] = [p.detach().clone() for p in model.parameters()]
        saved["buffers"] = [b.detach().clone() for b in model.buffers()]
        saved["optimizer"] = copy.deepcopy(optimizer.state_dict())

    def restore():
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved["params"]):
                p.copy_(s)
            for b, s in zip(model.buffers(), saved["buffers"]):
                b.copy_(s)
        optimizer.load_state_dict(saved["optimizer"])

    def step(x):
        optimizer.zero_grad(set_to_none=True)
        with mode_context(mode, device):
            y = model(x)
        loss = y.float().square().mean()
        loss.backward()
        optimizer.step()
        return loss
    step.snapshot, step.restore = snapshot, restore
    return step


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(step, x, steps, warmup, device):
    for _ in range(warmup):
        step(x)
    step.snapshot()
    times = []
    for _ in range(steps):
        step.restore()
        sync(device)
        start = time.perf_counter()
        step(x)
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    peak = None
    if device == "cuda":
        step.restore()
        sync(device)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step(x)
        sync(device)
        peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    return statistics.median(times), peak


def breakdown(step, x, reps=3):
    """Where a CUDA step's wall time goes: the host's time to issue it while the GPU is still busy
    with a sleep kernel queued ahead (a step that waits on the GPU shows the sleep's length
    here), the GPU's kernel time (torch.profiler, the kernels' durations summed), and its
    largest kernels. Median of reps steps, each restored first."""
    sleep_cycles = 50_000_000  # about 25 ms at 2 GHz: longer than any step's host work
    issue, busy, kernels = [], [], {}
    for _ in range(reps):
        step.restore()
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep_cycles)
        start = time.perf_counter()
        step(x)
        issue.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
        step.restore()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step(x)
            torch.cuda.synchronize()
        events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy.append(sum(e.device_time_total for e in events) / 1e3)
        for e in events:
            kernels[e.name] = kernels.get(e.name, 0.0) + e.device_time_total / 1e3 / reps
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:6]
    return {"host_issue_ms": statistics.median(issue), "gpu_busy_ms": statistics.median(busy),
            "top_kernels_ms": [[name[:80], round(ms, 4)] for name, ms in top]}


def measure(key, mode, args):
    init_args, batch = (SMALL_SIZES[key] if args.sizes == "small"
                        else (PROBLEMS[key].init_args, PROBLEMS[key].batch_size))
    batch = args.batch or batch
    reference, new, dtype = make_models(key, init_args, mode, args.device)
    x = PROBLEMS[key].make_input(batch, init_args, dtype=dtype, device=args.device)
    row = {"model": key, "mode": mode, "batch": batch, "init_args": [
        list(a) if isinstance(a, tuple) else a for a in init_args]}
    # The losses of identical steps from identical weights.
    check_ref, check_new = copy.deepcopy(reference), copy.deepcopy(new)
    step_ref, step_new = step_fn(check_ref, mode, args.device), step_fn(check_new, mode, args.device)
    worst = 0.0
    for _ in range(args.check_steps):
        theirs, ours = step_ref(x), step_new(x)
        worst = max(worst, abs((ours - theirs) / theirs).item())
    row["loss_rel_diff"] = worst
    del check_ref, check_new, step_ref, step_new
    variants = {"eager": reference, "fusedops": new}
    if not args.no_compile:
        torch._dynamo.reset()
        variants["compile"] = torch.compile(copy.deepcopy(reference))
    if not args.no_floor:
        variants["floor"] = StepFloor(new)
    step_fn_of = {}
    for name, model in variants.items():
        step_fn_of[name] = step_fn(model, mode, args.device)
        ms, peak = time_steps(step_fn_of[name], x, args.steps, args.warmup, args.device)
        row[f"{name}_ms"], row[f"{name}_peak_mib"] = ms, peak
        if args.breakdown and args.device == "cuda":
            row[f"{name}_breakdown"] = breakdown(step_fn_of[name], x)
    for name in ("eager", "compile"):
        if f"{name}_ms" in row:
            row[f"x_{name}"] = row[f"{name}_ms"] / row["fusedops_ms"]
    return row


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="18,98,39,62")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--sizes", default="default", choices=("default", "small"))
    p.add_argument("--batch", type=int, default=0, help="default: each problem's batch size")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--check-steps", type=int, default=3)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-floor", action="store_true",
                   help="skip the step around StepFloor (the least any model of the same "
                        "parameters does)")
    p.add_argument("--json", type=Path)
    p.add_argument("--breakdown", action="store_true",
                   help="CUDA: each step's host issue time, GPU kernel time and largest kernels")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/training.py: no CUDA device (--device cpu for a CPU run)")
    bad = [m for m in args.modes.split(",") if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {', '.join(bad)}; expected some of {', '.join(MODES)}")
    if args.device == "cpu":  # TF32 and autocast to float16 are CUDA's
        args.modes = ",".join(m for m in args.modes.split(",")
                              if m in ("float32", "autocast-bfloat16", "bfloat16"))
    rows = []
    for key in args.models.split(","):
        for mode in args.modes.split(","):
            row = measure(key, mode, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"\n{name}, torch {torch.__version__}, fusedops {torch.ops.fusedops.version()}; "
          f"median ms of a training step, x = variant / fusedops, peak MiB over one step")
    print("| model | mode | fusedops | eager | compile | floor | x eager | x compile "
          "| peak fusedops | peak eager | loss vs eager |")
    print("|---" * 11 + "|")
    for r in rows:
        print(f"| {r['model']} | {r['mode']} | {r['fusedops_ms']:.3f} | {r['eager_ms']:.3f} "
              f"| {fmt(r.get('compile_ms'), '.3f')} | {fmt(r.get('floor_ms'), '.3f')} "
              f"| {r['x_eager']:.2f} "
              f"| {fmt(r.get('x_compile'), '.2f')} | {fmt(r['fusedops_peak_mib'], '.0f')} "
              f"| {fmt(r['eager_peak_mib'], '.0f')} | {r['loss_rel_diff']:.1e} |")
    for r in rows:
        for name in ("eager", "fusedops", "compile", "floor"):
            b = r.get(f"{name}_breakdown")
            if b:
                print(f"{r['model']} {r['mode']} {name}: host issue {b['host_issue_ms']:.3f} ms, "
                      f"GPU kernels {b['gpu_busy_ms']:.3f} ms; largest: "
                      + "; ".join(f"{n} {ms:.3f}" for n, ms in b["top_kernels_ms"]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
