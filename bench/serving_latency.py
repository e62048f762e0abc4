"""Serving latency at small batches (issue 25): one Python call of each ModelNew in eval mode
under torch.no_grad(), as a server calls it, next to eager PyTorch, a CUDA-graph replay of the
same call (the GPU's share alone) and the host time of the call.

    python bench/serving_latency.py [--models 18,98,39,62] [--dtypes float32,float16,bfloat16]
        [--batches 1,2,4,8,16,32,64,128,256] [--reps 50] [--json FILE] [--host-profile [BATCHES]]
        [--flush write|read] [--host-floor]

Per row: `call` = CUDA events around one Python call on an idle GPU (the host work before the
first launch counts, as it does for a server's request), median of --reps; models 18 and 98
with a warm L2 (their folded weights fit it), 39 and 62 with L2 flushed before each call.
`host` = perf_counter around the call without synchronizing (what the call costs the CPU).
`graph` = a captured CUDA graph of the call replayed (kernels only). `gcall` = one call of
fusedops.CudaGraphs(model) (docs/GUIDE.md, "CUDA graphs"), timed as `call`: the input copied in,
the replay, the output cloned out and the check of the weights' versions, what a server that
replays graphs pays (--no-graph leaves out both graph columns). `floor` = one read of the
weights the call must read at --hbm-tbs. `before` = the same call on the route those sizes took
before the weight-streaming tensor-core kernel, timed in the same run: float16/bfloat16 with
FUSEDOPS_HALF_GEMM=cublas, float32 with FUSEDOPS_FP32_GEMM=ieee (SGEMM, or the float32 skinny
kernel at 1-4 rows). --host-profile prints, for batch 1 of each model and dtype (or each of
BATCHES, e.g. 16,17 across a change of route), the CPU-side events (operators and CUDA runtime
calls) of one call in order.
--host-floor prints first what one call costs the host when calls run back to back (2000 calls
timed together, median of 5 loops) for models 18 and 98, whose kernels take less time than
their host work, so that the loop is host-bound: a bare torch.add on a 1 x 8 tensor (this
machine's floor for any PyTorch operator call), the fused operator called through torch.ops
with its arguments at hand (and with 0 rows of x: the dispatcher, the argument checks and the
output's allocation, before any fold, plan or launch), and the ModelNew call (under no_grad,
and with grad mode on as KernelBench calls it). (39's and 62's calls are GPU-bound: their
host time is the `host` column.)
"""
import argparse
import json
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import fusedops  # noqa: F401
from fusedops.problems import PROBLEMS

WARM_L2 = {"18", "98"}


def weight_bytes(key, model):
    """Bytes a call must read at least: model 18 its column sums (float32), model 98 its pooled
    weight, 39 and 62 the whole Linear weight."""
    linear = {"18": "linear", "98": "matmul", "39": "gemm", "62": "fc"}[key]
    w = getattr(model, linear).weight
    n, k = w.shape
    if key == "18":
        return k * 4
    if key == "98":
        return n // model.pool_kernel_size * k * w.element_size()
    return n * k * w.element_size()


FLUSH = "write"


def flush_l2(buf):
    """Evicts the weights from L2: by writing a 256 MiB buffer (L2 left full of dirty lines that
    the timed call pays to write back, as after a previous request's kernels), or, with
    --flush read, by reading it (clean lines: the call pays only its own reads)."""
    if FLUSH == "write":
        buf.zero_()
    else:
        buf.sum()


def time_events(fn, reps, flush):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        if flush is not None:
            flush_l2(flush)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def time_host(fn, reps):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def time_graph(fn, reps, flush):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_events(graph.replay, reps, flush)


def host_per_call_us(fn, calls=2000, loops=5):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


# The operator's arguments after x, as ModelNew's forward passes them (--host-floor's models).
OPERATOR_ARGS = {
    "18": lambda m: (m.linear.weight, m.linear.bias),
    "98": lambda m: (m.matmul.weight, m.matmul.bias, m.pool_kernel_size, float(m.scale_factor)),
}


def host_floor(models, dtypes):
    tiny = torch.randn(1, 8, device="cuda")
    print(f"== host cost of one call, back to back: torch.add "
          f"{host_per_call_us(lambda: torch.add(tiny, tiny)):.1f} us")
    for key in [k for k in models if k in OPERATOR_ARGS]:  # the host-bound calls
        prob = PROBLEMS[key]
        for dname in dtypes:
            torch.manual_seed(0)
            new = prob.model_new(*prob.init_args).cuda().to(getattr(torch, dname)).eval()
            x = prob.make_input(1, dtype=getattr(torch, dname), device="cuda")
            op = getattr(torch.ops.fusedops, prob.op)
            args = (x, *OPERATOR_ARGS[key](new))
            empty_args = (x[:0], *args[1:])
            with torch.no_grad():
                direct = host_per_call_us(
                    lambda: op(*args, cache_folds=True, numerics="accurate"))
                empty = host_per_call_us(
                    lambda: op(*empty_args, cache_folds=True, numerics="accurate"))
                module = host_per_call_us(lambda: new(x))
            grad = host_per_call_us(lambda: new(x))
            print(f"   {key} {dname} batch 1: torch.ops call {direct:.1f} us (with 0 rows "
                  f"{empty:.1f}), ModelNew call {module:.1f} us ({grad:.1f} with grad mode on)")
            del new
            torch.cuda.empty_cache()


def host_profile(label, fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    print(f"== host events of one call: {label}")
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    t0 = events[0].time_range.start if events else 0
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA:
            print(f"   [gpu] {e.time_range.start - t0:8.1f} us {e.time_range.elapsed_us():7.1f} us"
                  f"  {e.name[:100]}")
        else:
            print(f"   {e.time_range.start - t0:8.1f} us {e.time_range.elapsed_us():7.1f} us"
                  f"  {e.name[:100]}")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="18,98,39,62")
    p.add_argument("--dtypes", default="float32,float16,bfloat16")
    p.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--hbm-tbs", type=float, default=3.35)
    p.add_argument("--json", default=None)
    p.add_argument("--host-profile", nargs="?", const="1", default=None, metavar="BATCHES",
                   help="the host events of one call at these batches (default 1)")
    p.add_argument("--no-graph", action="store_true")
    p.add_argument("--flush", choices=("write", "read"), default="write",
                   help="how L2 is emptied before each call of 39 and 62 (see flush_l2)")
    p.add_argument("--host-floor", action="store_true",
                   help="first print the host cost of back-to-back calls (see above)")
    args = p.parse_args(argv)
    global FLUSH
    FLUSH = args.flush
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    if args.host_floor:
        host_floor(args.models.split(","), args.dtypes.split(","))
    flush_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    profiled = {int(b) for b in args.host_profile.split(",")} if args.host_profile else set()
    rows = []
    print(f"{'model':>5} {'dtype':>9} {'batch':>5} {'call':>8} {'host':>8} {'graph':>8} "
          f"{'gcall':>8} "
          f"{'before':>8} {'eager':>8} {'floor':>8} {'x eager':>8} {'x floor':>8}  (ms)")
    for key in args.models.split(","):
        prob = PROBLEMS[key]
        for dname in args.dtypes.split(","):
            dtype = getattr(torch, dname)
            torch.manual_seed(0)
            ref = prob.model(*prob.init_args).cuda().to(dtype).eval()
            new = prob.model_new(*prob.init_args).cuda().to(dtype).eval()
            new.load_state_dict(ref.state_dict())
            graphs = fusedops.CudaGraphs(new)
            flush = None if key in WARM_L2 else flush_buf
            floor_ms = weight_bytes(key, new) / (args.hbm_tbs * 1e12) * 1e3
            for batch in [int(b) for b in args.batches.split(",")]:
                x = prob.make_input(batch, dtype=dtype, device="cuda")
                with torch.no_grad():
                    if batch in profiled:
                        host_profile(f"{key} {dname} batch {batch}", lambda: new(x))
                    for _ in range(3):
                        new(x), ref(x)
                    call = time_events(lambda: new(x), args.reps, flush)
                    host = time_host(lambda: new(x), args.reps)
                    eager = time_events(lambda: ref(x), args.reps, flush)
                    graph = gcall = None
                    if not args.no_graph:
                        graph = time_graph(lambda: new(x), args.reps, flush)
                        graphs(x)  # captures this batch's graph
                        gcall = time_events(lambda: graphs(x), args.reps, flush)
                    before_route = ({"FUSEDOPS_FP32_GEMM": "ieee"} if dtype == torch.float32
                                    else {"FUSEDOPS_HALF_GEMM": "cublas"})
                    with fusedops.settings(**before_route):
                        new(x)
                        before = time_events(lambda: new(x), args.reps, flush)
                row = dict(model=key, dtype=dname, batch=batch, call_ms=call, host_ms=host,
                           graph_ms=graph, graph_call_ms=gcall, before_ms=before,
                           eager_ms=eager, floor_ms=floor_ms,
                           l2="warm" if flush is None else f"cold ({args.flush} flush)")
                rows.append(row)
                g, gc = (f"{v:8.4f}" if v is not None else f"{'-':>8}" for v in (graph, gcall))
                print(f"{key:>5} {dname:>9} {batch:>5} {call:8.4f} {host:8.4f} {g} {gc} "
                      f"{before:8.4f} {eager:8.4f} "
                      f"{floor_ms:8.4f} {eager / call:8.2f} {call / floor_ms:8.2f}", flush=True)
            del ref, new, graphs
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                           rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
