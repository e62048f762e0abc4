r"""Where the host time of a training step goes (issue 40): each phase of the step bench/training.py
times (zero_grad, forward, loss, backward, SGD with momentum), timed on the host while a sleep
kernel queued ahead keeps the GPU busy (a phase that waited on the GPU would show the sleep),
beside the step's wall time; eager PyTorch's model and ModelNew, each mode. With --profile,
torch.profiler's CPU ops of five steps by self CPU time as well.

    python3 bench/training_phases.py --models 98,39 --modes autocast-float16,bfloat16 [--profile]

CUDA only. The parameters are restored before each timed step (SGD would move them)."""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import training  # noqa: E402
from fusedops.problems import PROBLEMS  # noqa: E402

PHASES = ("zero_grad", "forward", "loss", "backward", "sgd")


def phases(model, x, optimizer, mode):
    t = [time.perf_counter()]
    optimizer.zero_grad(set_to_none=True)
    t.append(time.perf_counter())
    with training.mode_context(mode, "cuda"):
        y = model(x)
    t.append(time.perf_counter())
    loss = y.float().square().mean()
    t.append(time.perf_counter())
    loss.backward()
    t.append(time.perf_counter())
    optimizer.step()
    t.append(time.perf_counter())
    return [(b - a) * 1e3 for a, b in zip(t, t[1:])]


def measure(model, x, mode, steps, profile):
    optimizer = torch.optim.SGD(list(model.parameters()), lr=1e-6, momentum=0.9)
    saved = [p.detach().clone() for p in model.parameters()]

    def restore():
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved):
                p.copy_(s)
        torch.cuda.synchronize()

    for _ in range(5):
        restore()
        phases(model, x, optimizer, mode)
    walls, hosts = [], []
    for _ in range(steps):
        restore()
        start = time.perf_counter()
        phases(model, x, optimizer, mode)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3)
    for _ in range(max(3, steps // 2)):
        restore()
        torch.cuda._sleep(60_000_000)  # ~30 ms of GPU time queued ahead of the step
        hosts.append(phases(model, x, optimizer, mode))
        torch.cuda.synchronize()
    table = None
    if profile:
        restore()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                phases(model, x, optimizer, mode)
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25,
                                          max_name_column_width=60)
    return statistics.median(walls), [statistics.median(h[i] for h in hosts)
                                      for i in range(len(PHASES))], table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="18,98,39,62")
    p.add_argument("--modes", default="float32")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    modes, keys = args.modes.split(","), args.models.split(",")
    for mode in modes:
        if mode not in training.MODES:
            p.error(f"--modes: each must be one of {', '.join(training.MODES)}, got {mode!r}")
    for key in keys:
        if key not in PROBLEMS:
            p.error(f"--models: each must be one of {', '.join(PROBLEMS)}, got {key!r}")
    if not torch.cuda.is_available():
        print("training_phases.py: needs a CUDA device (the host time is measured against "
              "a GPU kept busy)", file=sys.stderr)
        return 2
    print("| model | mode | variant | wall ms | host ms: " + " / ".join(PHASES) + " | host total |")
    print("|---|---|---|---|---|---|")
    for key in keys:
        init_args, batch = PROBLEMS[key].init_args, PROBLEMS[key].batch_size
        for mode in modes:
            reference, new, dtype = training.make_models(key, init_args, mode, "cuda")
            x = PROBLEMS[key].make_input(batch, init_args, dtype=dtype, device="cuda")
            for name, model in (("eager", reference), ("fusedops", new)):
                wall, host, table = measure(model, x, mode, args.steps, args.profile)
                print(f"| {key} | {mode} | {name} | {wall:.3f} | "
                      + " / ".join(f"{h:.3f}" for h in host) + f" | {sum(host):.3f} |",
                      flush=True)
                if table:
                    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
