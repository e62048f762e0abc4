"""The 3xFP16 GEMM engine on Hopper (ops/cuda/gemm/, issue 11): the accuracy contract at default
and odd sizes, adversarial rows (the range guard and its exact fixup, with split-K active and
without), weights the engine refuses, fold memory, and the fold cache across streams and threads.

Through model 39 in eval mode: its forward is y = x W^T then a per-column affine map, so GEMM
errors show unchanged. FUSEDOPS_FP32_GEMM=3xfp16 forces the engine at small sizes; where the
engine cannot run, that setting is an error, never a silent fallback, so a passing test here ran
the engine."""
import copy
import threading

import pytest
import torch

import fusedops

from fusedops.accuracy import assert_within_tolerance, tolerance_for
from fusedops_testing import assert_contract, assert_float32, make_input, make_pair, run_trio

pytestmark = pytest.mark.cuda

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER, reason="the 3xFP16 engine needs an sm_90 GPU")


@pytest.fixture
def engine():
    torch.ops.fusedops.clear_fold_cache()
    with fusedops.settings(FUSEDOPS_FP32_GEMM="3xfp16"):
        yield
    torch.ops.fusedops.clear_fold_cache()


def model39(k, n):
    ref, new = make_pair("39", (k, n, (n,)), device="cuda")
    return ref.eval(), new.eval()


def rel_error(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# (M, N, K): tile multiples; odd M and K with N a multiple of 4 but not of the tile; few output
# tiles (split-K) and many (data-parallel); K not a multiple of 8 (padded K).
SIZES = [(256, 1024, 2048), (77, 52, 1001), (300, 260, 513), (5, 1000, 4096), (1030, 2052, 130)]


@requires_hopper
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("m,n,k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
def test_engine_contract(engine, m, n, k, dist):
    ref, new = model39(k, n)
    x = make_input((m, k), dist, device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_float32(out, expected, expected64)


@requires_hopper
@pytest.mark.parametrize("dist", ["rand", "randn"])
def test_engine_error_below_sgemm(engine, dist):
    """The engine's float32 error against float64 is no larger than PyTorch's own SGEMM's."""
    ref, new = model39(4096, 1024)
    x = make_input((512, 4096), dist, device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    ours, torchs = rel_error(out, expected64), rel_error(expected, expected64)
    assert ours <= torchs, f"3xfp16 error {ours:.2e} > PyTorch float32 error {torchs:.2e}"


def adversarial_row(kind, k, device):
    """One row of x that fp16 cannot carry as is (or, for zeros, carries exactly)."""
    row = torch.randn(k, device=device)
    if kind == "span":  # magnitudes 2^-40 .. 2^40 in one row, random signs
        return torch.sign(row) * torch.exp2(torch.empty(k, device=device).uniform_(-40, 40))
    if kind == "denormal":
        return row * 1e-40
    if kind == "tiny":  # a normal float32 row 2^-60 below the others
        return row * 2.0 ** -60
    if kind == "inf":
        row[k // 3] = float("inf")
    elif kind == "-inf":
        row[1] = -float("inf")
    elif kind == "nan":
        row[k - 1] = float("nan")
    elif kind == "zeros":
        row.zero_()
    elif kind == "huge":  # one huge element: the row spans > 2^30 (guarded), the others unharmed
        row[k // 2] = 3e30
    else:
        raise ValueError(kind)
    return row


KINDS = ["span", "denormal", "tiny", "inf", "-inf", "nan", "zeros", "huge"]
# (128, 256, 4096): one or two output tiles, split-K slices summed by combine_slices_kernel;
# (1024, 2048, 264): data-parallel tiles, the combination in the promoted GEMM's epilogue.
GUARD_SIZES = [(128, 256, 4096), (1024, 2048, 264)]


@requires_hopper
@pytest.mark.parametrize("m,n,k", GUARD_SIZES, ids=["splitk", "tiles"])
@pytest.mark.parametrize("kind", KINDS)
def test_adversarial_rows(engine, kind, m, n, k):
    ref, new = model39(k, n)
    x = make_input((m, k), "randn", device="cuda")
    for i in (0, m // 2 + 1, m - 1):  # first, middle and last row (partial tiles, split ends)
        x[i] = adversarial_row(kind, k, "cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_matches_with_nonfinite(out, expected, expected64)


def assert_matches_with_nonfinite(out, expected, expected64):
    """inf and nan land where the reference puts them (the same infinities); rows the reference
    computes finite meet the whole float32 contract (its error ratio needs finite rows)."""
    assert torch.equal(torch.isnan(out), torch.isnan(expected))
    assert_within_tolerance(out, expected, tolerance_for(torch.float32), expected64)
    finite = torch.isfinite(expected).all(dim=1)
    assert finite.any()
    assert_float32(out[finite], expected[finite], expected64[finite])


def assert_exact_for_refused_weight(kind, out, expected, expected64):
    if kind == "tiny_row":
        assert_float32(out, expected, expected64)
    else:  # an inf or nan in W reaches every row: compare element by element
        assert torch.equal(torch.isnan(out), torch.isnan(expected))
        assert_within_tolerance(out, expected, tolerance_for(torch.float32), expected64)


@requires_hopper
@pytest.mark.parametrize("m,n,k", GUARD_SIZES, ids=["splitk", "tiles"])
@pytest.mark.parametrize("kind", ["inf", "nan", "tiny_row"])
def test_weight_refused_is_exact_from_the_first_call(engine, kind, m, n, k):
    """A weight the split cannot carry (inf/nan, or a row 2^-60 below the largest) is checked on
    the GPU: its first call guards every row (recomputed exactly), and once the verdict is on the
    host the next call runs the exact SGEMM, which explain names. Both match the reference."""
    ref, new = model39(k, n)
    with torch.no_grad():
        for model in (ref, new):
            if kind == "inf":
                model.gemm.weight[3, 5] = float("inf")
            elif kind == "nan":
                model.gemm.weight[7, 0] = float("nan")
            else:
                model.gemm.weight[11] *= 2.0 ** -60
    x = make_input((m, k), "randn", device="cuda")
    expected, expected64 = run_trio(ref, new, x)[1:3]
    with torch.no_grad():
        (first,), routes = on_the_engine(lambda: new(x))  # the call that makes the fold
    # The engine's route (split-K or not), no fallback: the guard recomputed the rows.
    assert ": 3xfp16" in routes[0], routes
    assert_exact_for_refused_weight(kind, first, expected, expected64)
    torch.cuda.synchronize()  # the verdict's copy has landed
    later = fusedops.explain(new, x)
    assert ": sgemm (the 3xFP16 engine refused the weight" in later[-1], later
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_exact_for_refused_weight(kind, out, expected, expected64)


@requires_hopper
def test_weight_preparation_never_waits_on_the_gpu(engine):
    """W's range check, scale and split stay on the GPU: a call that makes the fold (every call
    of a training step) issues without a host sync, as CUDA's sync debug mode sees it."""
    ref, new = model39(1024, 512)
    x = make_input((256, 1024), "randn", device="cuda")
    with torch.no_grad():
        new(x)  # the library's first-use work (settings, device facts) outside the check
        torch.ops.fusedops.clear_fold_cache()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = new(x)  # a fresh fold
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.ops.fusedops.fold_cache_stats()["entries"] == 1
        expected, expected64 = ref(x), ref.double()(x.double())
    assert_float32(out, expected, expected64.float())


@requires_hopper
def test_fold_is_one_weight(engine):
    """The engine keeps W's fp16 pair: one W's bytes (3xTF32 kept two), plus its scale and
    verdict (8 bytes on the GPU) and the verdict's host copy (4 bytes)."""
    k, n = 2048, 1024
    ref, new = model39(k, n)
    with torch.no_grad():
        new(make_input((256, k), "rand", device="cuda"))
    stats = torch.ops.fusedops.fold_cache_stats()
    assert stats["entries"] == 1
    assert stats["bytes"] == n * k * 4 + 8 + 4, stats


@requires_hopper
def test_streams_and_threads(engine):
    """One model called from two threads, each on its own CUDA stream: the fold is made once,
    and every call matches the reference."""
    k, n = 2048, 1024
    ref, new = model39(k, n)
    xs = [make_input((256, k), "randn", device="cuda") for _ in range(4)]
    with torch.no_grad():
        expected = [ref(x) for x in xs]
    torch.cuda.synchronize()
    results, errors = {}, []
    misses = torch.ops.fusedops.fold_cache_stats()["misses"]

    def worker(t):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream), torch.no_grad():
                for r in range(3):
                    for i, x in enumerate(xs):
                        results[(t, r, i)] = new(x)
            stream.synchronize()
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert torch.ops.fusedops.fold_cache_stats()["misses"] == misses + 1  # made once
    assert torch.ops.fusedops.fold_cache_stats()["entries"] == 1
    for (t, r, i), out in results.items():
        torch.testing.assert_close(out, expected[i], atol=1e-4, rtol=1e-4)


@requires_hopper
def test_weight_update_refolds(engine):
    """An in-place weight change (an optimizer step) makes a new fp16 pair."""
    ref, new = model39(1024, 512)
    x = make_input((256, 1024), "randn", device="cuda")
    with torch.no_grad():
        new(x)
        for model in (ref, new):
            model.gemm.weight.mul_(-0.5)
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_float32(out, expected, expected64)


@pytest.mark.skipif(HOPPER, reason="on Hopper the engine runs")
def test_forcing_engine_elsewhere_is_an_error():
    ref, new = model39(256, 128)
    with fusedops.settings(FUSEDOPS_FP32_GEMM="3xfp16"), pytest.raises(
            RuntimeError, match="FUSEDOPS_FP32_GEMM=3xfp16 needs an sm_90 GPU"):
        new(make_input((64, 256), "rand", device="cuda"))


# Model 98 runs the engine split over K with its epilogue (pooled bias, GELU, scale, row max)
# fused into the K-slices' combination: y is never written, and the rows the guard rejects are
# recomputed exactly inside that epilogue. (in, out, pool): pooled widths 256, 520 and 52 (a
# multiple of 4, as the engine needs), odd K, a pool that leaves rows over.
SIZES_98 = [(128, 4096, 4096, 16), (300, 513, 2083, 4), (77, 1001, 366, 7)]


def model98(k, out, pool, scale=-1.5):
    return make_pair("98", (k, out, pool, scale), device="cuda")


@requires_hopper
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("m,k,out_f,pool", SIZES_98, ids=[f"{m}x{k}x{o}p{p}" for m, k, o, p in SIZES_98])
def test_engine_fused_epilogue_98(engine, m, k, out_f, pool, dist):
    ref, new = model98(k, out_f, pool)
    x = make_input((m, k), dist, device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_float32(out, expected, expected64)


@requires_hopper
@pytest.mark.parametrize("kind", KINDS)
def test_adversarial_rows_98(engine, kind):
    m, k = 128, 4096
    ref, new = model98(k, 1024, 4)
    x = make_input((m, k), "randn", device="cuda")
    for i in (0, m // 2 + 1, m - 1):
        x[i] = adversarial_row(kind, k, "cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    # One output per row: nan where the reference has nan, the same infinities, and the float32
    # contract on the rows the reference computes finite.
    assert torch.equal(torch.isnan(out), torch.isnan(expected))
    assert_within_tolerance(out, expected, tolerance_for(torch.float32), expected64)
    finite = torch.isfinite(expected)
    assert finite.sum() >= m - 3
    assert_float32(out[finite], expected[finite], expected64[finite])


@requires_hopper
def test_rows_far_apart_keep_their_bits(engine):
    """Each row of x has its own scale: rows 2^100 above and below the rest, all within the
    contract (with one scale for all of x, every other row would sit in fp16's subnormals and
    take the slow exact path)."""
    ref, new = model39(2048, 512)
    x = make_input((256, 2048), "randn", device="cuda")
    x[7] *= 2.0 ** 100
    x[9] *= 2.0 ** -100
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_float32(out, expected, expected64)


def on_the_engine(*calls, tries=3):
    """Each call's output and route, none sent elsewhere by a verdict. A refused weight's verdict
    (the GPU's check of W, made with its fold) reaches the host asynchronously and, once there,
    sends the calls after it to the exact SGEMM (other bits). So each try clears the folds (its
    first call makes them again) and keeps the GPU busy before every call, so that the verdict
    cannot land during one; where it landed anyway (a host slower than the sleep, seen under
    pytest -n 8 on an H200), the calls are made again with a 10x longer sleep."""
    cycles = 20_000_000
    for _ in range(tries):
        torch.ops.fusedops.clear_fold_cache()
        outs, routes = [], []
        for call in calls:
            torch.cuda._sleep(cycles)
            torch.ops.fusedops.record_routes(True)
            try:
                outs.append(call())
            finally:
                torch.ops.fusedops.record_routes(False)
            routes += list(torch.ops.fusedops.routes_taken())
        if not any("instead of" in r for r in routes):
            assert len(routes) == len(calls), routes
            return outs, routes
        cycles *= 10
    pytest.fail(f"the verdict reached the host during the calls in {tries} tries: {routes}")


@requires_hopper
@pytest.mark.parametrize("m,n,k", SIZES + [(64, 36, 64)],
                         ids=[f"{m}x{n}x{k}" for m, n, k in SIZES + [(64, 36, 64)]])
@pytest.mark.parametrize("kind", ["plain", "guarded_row", "inf"])
def test_gemm_nt_reads_a_transposed_b_as_it_lies(engine, m, n, k, kind):
    """gemm_nt(a, bt.t()) splits the transposed b without copying it (the column-range and
    tiled split kernels, gemm_3xfp16.cu): the same bits as gemm_nt of b's contiguous copy, with a
    row of a the guard recomputes and with a weight the check refuses (the guard's fixup reading
    b down its columns)."""
    a = make_input((m, k), "randn", device="cuda")
    bt = make_input((k, n), "randn", device="cuda")  # b = bt.t(): (n, k), stride (1, n)
    if kind == "guarded_row":
        a[m // 2, : k // 2] *= 2.0 ** 20
        a[m // 2, k // 2:] *= 2.0 ** -20
    elif kind == "inf":
        bt[k // 3, n // 2] = float("inf")
    (as_view, copied), _ = on_the_engine(
        lambda: torch.ops.fusedops.gemm_nt(a, bt.t()),
        lambda: torch.ops.fusedops.gemm_nt(a, bt.t().contiguous()))
    assert torch.equal(as_view.isnan(), copied.isnan())
    assert torch.equal(as_view.nan_to_num(), copied.nan_to_num())
    if kind != "inf":
        assert_contract(as_view, a @ bt, a.double() @ bt.double())


def step_grads(model, x, grad_out):
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    model(x).backward(grad_out)
    return {"x": x.grad, **{name: p.grad for name, p in model.named_parameters()}}


@requires_hopper
@pytest.mark.parametrize("key,init_args", [("39", (1024, 512, (512,))), ("62", (1024, 512, 8)),
                                           ("98", (1024, 64, 4, 2.0))], ids=["39", "62", "98"])
def test_training_step_on_the_engine_without_a_host_sync(engine, key, init_args):
    """Issue 40: a float32 training step's GEMMs, forward and backward (the backward's through
    gemm_nt), run on the 3xFP16 engine: no cuBLAS float32 GEMM kernel runs, and nothing in the
    step waits on the GPU (CUDA's sync debug mode: W's fold, made every step, stays on the GPU).
    The gradients meet the float32 tolerance against the reference's in float64 (model 98 with
    16 pooled columns: a row's maximum then has no near-tie that float32 could break
    differently)."""
    ref, new = make_pair(key, init_args, device="cuda")
    ref64 = copy.deepcopy(ref).double()
    for model in (ref64, new):
        model.train()
    x = make_input((256, init_args[0]), "randn", device="cuda")
    grad_out = torch.randn_like(ref(x))
    expected = step_grads(ref64, x.double(), grad_out.double())
    step_grads(new, x, grad_out)  # the library's first-use work outside the checks
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            grads = step_grads(new, x, grad_out)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    kernels = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    assert any("GemmUniversal" in name for name in kernels), sorted(kernels)
    cublas_f32 = sorted(n for n in kernels if "sgemm" in n or "f32f32" in n)
    assert not cublas_f32, cublas_f32
    # One scale for every gradient (test_autograd.py's rule): a bias whose gradient cancels to
    # nearly zero behind BatchNorm is compared at the magnitude of the terms it sums.
    scale = max(1.0, max(e.abs().max().item() for e in expected.values()))
    for name, g in grads.items():
        torch.testing.assert_close(g.double(), expected[name], rtol=1e-4, atol=1e-5 * scale,
                                   msg=lambda m: f"grad of {name}: {m}")
