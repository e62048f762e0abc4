"""TF32 allowed (torch's float32 matmul precision "high"): the route the planner takes must be
as accurate as PyTorch's own TF32 result. On Hopper that route is the 3xFP16 engine's main
term alone ("1xfp16": each operand rounded to fp16's 11 significant bits, as TF32 rounds it
to its 11, with per-row power-of-two scales keeping fp16's range and the engine's guard);
fusedops.explain proves it ran. Compared, per model, with the reference run in
float64 on the same weights and input: the relative error ||out - ref64|| / ||ref64|| of ours
against PyTorch's TF32 reference's, at the default sizes and odd ones, on rand and randn, and
on adversarial ranges (row scales far apart, a row spanning more than fp16 holds, a weight row
far below the others)."""
import contextlib
import copy

import pytest
import torch

import fusedops
from fusedops_testing import make_input, make_pair

pytestmark = pytest.mark.cuda
CUDA = torch.cuda.is_available()
HOPPER = CUDA and torch.cuda.get_device_capability() == (9, 0)
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")

# PyTorch's TF32 error varies by a few percent from input to input; ours must not be larger
# beyond that noise.
SLACK = 1.05


@contextlib.contextmanager
def tf32_allowed():
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved


def rel(out, ref64):
    out = out.double()
    assert torch.isfinite(out).all() == torch.isfinite(ref64).all()
    finite = torch.isfinite(ref64)
    return ((out[finite] - ref64[finite]).norm() / ref64[finite].norm().clamp_min(1e-300)).item()


def errors(key, init_args, x):
    """(ours, PyTorch TF32's) relative errors against float64, and the routes ours took."""
    ref, new = make_pair(key, init_args, device="cuda")
    ref64 = make_pair(key, init_args, device="cuda", dtype=torch.float64, randomize=False)[0]
    ref64.load_state_dict(ref.state_dict())
    for model in (ref, new, ref64):
        model.eval()  # model 39: one deterministic mapping (no running-statistics update)
    with torch.no_grad():
        want = ref64(x.double())
        with tf32_allowed():
            routes = fusedops.explain(new, x)
            ours, theirs = new(x), ref(x)
    return rel(ours, want), rel(theirs, want), routes


def gemm_n(key, init_args):
    """The GEMM's N: model 98 multiplies by its pooled weight (out_features // k rows)."""
    return init_args[1] // init_args[2] if key == "98" else init_args[1]


def takes_the_engine(key, init_args, m):
    """Where the planner sends TF32-allowed float32 to the 3xFP16 engine's TF32 forms on Hopper:
    its size rule (ops/plan/planner.h: at least 128 rows and 2^30 FLOP) and its N a multiple of
    4; elsewhere, and below that, PyTorch's own TF32 GEMM (model 98: float32-exact)."""
    k, n = init_args[0], gemm_n(key, init_args)
    return HOPPER and m >= 128 and 2 * m * n * k >= 2 ** 30 and n % 4 == 0


# The engine's TF32 form: one product (x_hi W_hi); for model 98's pooled weight two (x_hi
# (W_hi + W_lo)): a pooled row rounded as TF32 rounds it is less accurate than the reference's
# TF32, whose roundings of the pool's rows average out.
def tf32_route(key):
    return "2xfp16-fused" if key == "98" else "1xfp16"


def check(key, init_args, x):
    ours, theirs, routes = errors(key, init_args, x)
    engine = any(f": {tf32_route(key)}" in line for line in routes)
    assert engine == takes_the_engine(key, init_args, x.shape[0]), routes
    assert ours <= SLACK * theirs, (
        f"model {key} {tuple(x.shape)}: error vs float64 {ours:.3e}, PyTorch TF32's {theirs:.3e}; "
        f"routes {routes}")


# The default sizes, odd sizes large enough for the one-product route (K not a multiple of 8,
# partial tiles in M and N), and odd sizes below it (PyTorch's TF32 GEMM).
SIZES = {
    "39": [((8192, 8192, (8192,)), 1024), ((4096, 4096, (4096,)), 2048),
           ((1000, 2052, (2052,)), 333), ((1000, 516, (516,)), 333)],
    "62": [((8192, 8192, 512), 1024), ((1000, 2080, 26), 300), ((1000, 520, 26), 300)],
    "98": [((8192, 8192, 16, 2.0), 1024), ((1001, 16384, 8, -1.5), 300),
           ((1001, 4096, 8, -1.5), 257)],
}
CASES = [(key, args, batch) for key, sizes in SIZES.items() for args, batch in sizes]


@requires_cuda
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("key,init_args,batch", CASES,
                         ids=[f"{k}-{a[0]}x{a[1]}-b{b}" for k, a, b in CASES])
def test_as_accurate_as_pytorch_tf32(key, init_args, batch, dist):
    check(key, init_args, make_input((batch, init_args[0]), dist, device="cuda"))


@pytest.mark.skipif(not HOPPER, reason="the 3xFP16 engine needs an sm_90 GPU")
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("init_args,batch", SIZES["98"][:2], ids=["default", "odd"])
def test_folded_weight_strictly_below_pytorch_tf32(init_args, batch, dist):
    """Model 98's pooled weight carried exactly: its only rounding is x's, which PyTorch's TF32
    shares, so its error is below PyTorch's with no slack, on three inputs each. (Rounded as
    TF32 rounds it, the pooled weight measured 8.43e-5 against PyTorch's 7.88e-5.)"""
    for _ in range(3):
        x = make_input((batch, init_args[0]), dist, device="cuda")
        ours, theirs, routes = errors("98", init_args, x)
        assert any(": 2xfp16-fused" in line for line in routes), routes
        assert ours <= theirs, (ours, theirs, routes)


@requires_cuda
def test_rows_of_very_different_scales():
    """Each row of x its own power-of-two scale: rows 2^-60 .. 2^60 apart keep TF32's accuracy."""
    x = make_input((512, 2048), "randn", device="cuda")
    x *= torch.pow(2.0, torch.linspace(-60, 60, 512, device="cuda")).round().unsqueeze(1)
    check("39", (2048, 2048, (2048,)), x)


@requires_cuda
def test_a_row_spanning_more_than_fp16_holds():
    """A row whose nonzero values span more than 2^30 goes to the exact path (the guard)."""
    x = make_input((256, 2048), "randn", device="cuda")
    x[7, :1024] *= 2.0 ** 20
    x[7, 1024:] *= 2.0 ** -20
    x[9, 5] = 2.0 ** 40
    check("62", (2048, 2048, 128), x)


@requires_cuda
def test_a_weight_row_far_below_the_others():
    """A weight whose rows span more than 2^26 is refused by the engine: TF32 runs instead, and
    explain says so."""
    key, init_args = "39", (1024, 1024, (1024,))
    ref, new = make_pair(key, init_args, device="cuda")
    with torch.no_grad():
        for model in (ref, new):
            model.gemm.weight[3] *= 2.0 ** -40
    x = make_input((512, 1024), "rand", device="cuda")
    ref64 = make_pair(key, init_args, device="cuda", dtype=torch.float64, randomize=False)[0]
    ref64.load_state_dict(ref.state_dict())
    for model in (ref, new, ref64):
        model.eval()
    with torch.no_grad(), tf32_allowed():
        first = new(x)  # makes W's fold: the verdict reaches the host asynchronously
        torch.cuda.synchronize()
        routes = fusedops.explain(new, x)
        ours, theirs = rel(new(x), ref64(x.double())), rel(ref(x), ref64(x.double()))
    if HOPPER:
        assert ": tf32 (the 3xFP16 engine refused the weight" in routes[-1], routes
    assert ours <= SLACK * theirs, (ours, theirs)
    # The first call (every row guarded where the verdict was not yet on the host) is exact too.
    assert rel(first, ref64(x.double())) <= SLACK * theirs


@requires_cuda
def test_non_finite_inputs_propagate_as_in_pytorch():
    key, init_args = "39", (512, 512, (512,))
    ref, new = make_pair(key, init_args, device="cuda")
    for model in (ref, new):
        model.eval()
    x = make_input((256, 512), "randn", device="cuda")
    x[3, 7] = float("inf")
    x[5, 9] = float("nan")
    with torch.no_grad(), tf32_allowed():
        ours, theirs = new(x), ref(x)
    torch.testing.assert_close(torch.isfinite(ours), torch.isfinite(theirs))
    torch.testing.assert_close(torch.isnan(ours), torch.isnan(theirs))


# Model 39 in training above the one-read BatchNorm kernel's 1024 rows: on Hopper the column
# moments come from the one-product GEMM's epilogue, by tiles of 128 rows ("1xfp16-fused"):
# at the default width, with a partial last tile and odd widths; and with N so narrow that the
# GEMM splits K, the split route by its name ("1xfp16-splitk": an epilogue would see partial
# sums), the moments then taken from y.
TRAINING_SIZES = [((4096, 4096, (4096,)), 2048), ((1000, 2052, (2052,)), 1333),
                  ((1024, 256, (256,)), 2048)]
TRAINING_ROUTE = {4096: "1xfp16-fused", 2052: "1xfp16-fused", 2048: "1xfp16-fused",
                  256: "1xfp16-splitk"}  # by out_features


def training_errors(init_args, x):
    """Ours and PyTorch TF32's errors against float64 in training mode: the output, then the
    running mean and variance after the step; and the routes ours took."""
    ref, new = make_pair("39", init_args, device="cuda")
    ref64 = make_pair("39", init_args, device="cuda", dtype=torch.float64, randomize=False)[0]
    ref64.load_state_dict(ref.state_dict())
    with torch.no_grad():
        want = ref64(x.double())
        with tf32_allowed():
            routes = fusedops.explain(copy.deepcopy(new), x)  # a step of its own
            ours, theirs = new(x), ref(x)
    errs = [(rel(ours, want), rel(theirs, want))]
    for name in ("running_mean", "running_var"):
        errs.append((rel(getattr(new.bn, name), getattr(ref64.bn, name)),
                     rel(getattr(ref.bn, name), getattr(ref64.bn, name))))
    assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked) == 1
    return errs, routes


def check_training(init_args, x):
    errs, routes = training_errors(init_args, x)
    if HOPPER:
        assert f": {TRAINING_ROUTE[init_args[1]]} (" in routes[0], routes
    for what, (ours, theirs) in zip(("output", "running_mean", "running_var"), errs):
        assert ours <= SLACK * theirs + 1e-7, (what, ours, theirs, routes)


@requires_cuda
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("init_args,batch", TRAINING_SIZES,
                         ids=[f"{a[0]}x{a[1]}-b{b}" for a, b in TRAINING_SIZES])
def test_training_statistics_from_the_gemm_epilogue(init_args, batch, dist):
    check_training(init_args, make_input((batch, init_args[0]), dist, device="cuda"))


@requires_cuda
def test_training_statistics_after_a_guarded_row():
    """A row the engine's guard recomputes exactly after the GEMM: the moments the epilogue took
    from its zeros are taken again from y."""
    x = make_input((1333, 2048), "randn", device="cuda")
    x[700, :1024] *= 2.0 ** 20
    x[700, 1024:] *= 2.0 ** -20
    check_training((2048, 2048, (2048,)), x)


@requires_cuda
@pytest.mark.parametrize("batch", [1100, 1152])
def test_training_statistics_with_a_tile_past_the_batch(batch):
    """An odd number of 128-row tiles, which CUTLASS's scheduler rounds up to whole 2 x 1
    clusters: the epilogue of the tile past the batch once wrote its moments past the end of
    theirs (in one process's sequence of calls over the guard's list, so that the guarded row
    stayed the GEMM's zeros). Where that write lands depends on the allocator, so this test
    could miss it; the sanitizer workload, run without the caching allocator, names it
    (scripts/gpu_check.sh). Four steps of one model on one x with a guarded row, each against
    float64."""
    init_args = (300, 1800, (1800,))
    x = make_input((batch, 300), "randn", device="cuda")
    x[700, :150] *= 2.0 ** 20
    x[700, 150:] *= 2.0 ** -20
    ref, new = make_pair("39", init_args, device="cuda")
    ref64 = make_pair("39", init_args, device="cuda", dtype=torch.float64, randomize=False)[0]
    ref64.load_state_dict(ref.state_dict())
    if HOPPER:
        with tf32_allowed():
            (line,) = fusedops.explain(copy.deepcopy(new), x)
        assert ": 1xfp16-fused (" in line, line
    for step in range(4):
        with torch.no_grad():
            want = ref64(x.double())
            with tf32_allowed():
                ours, theirs = new(x), ref(x)
        assert rel(ours, want) <= SLACK * rel(theirs, want) + 1e-7, step
        for name in ("running_mean", "running_var"):
            mine, wanted = getattr(new.bn, name), getattr(ref64.bn, name)
            assert rel(mine, wanted) <= SLACK * rel(getattr(ref.bn, name), wanted) + 1e-7, (step, name)
