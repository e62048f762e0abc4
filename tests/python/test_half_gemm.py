"""The native float16/bfloat16 GEMM with model 62's epilogue fused (ops/cuda/gemm/gemm_half.h,
epilogue_groupnorm_sm90.cuh): the reduced-precision contract against the reference in its dtype
and in float64, every group size the register reduction takes, partial tiles in M, N and K, both
input distributions, determinism, streams, and the cases it refuses.

FUSEDOPS_HALF_GEMM=fused forces the fused GEMM at sizes too small for the automatic choice;
where it cannot run, that setting is an error, never a silent fallback, so a passing test here
ran the fused kernel."""
import copy

import pytest
import torch

import fusedops

from fusedops.accuracy import assert_within_tolerance, tolerance_for
from fusedops_testing import assert_reduced, make_input, make_pair, run_trio

pytestmark = pytest.mark.cuda

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER, reason="the fused half GEMM needs an sm_90 GPU")
DTYPES = [torch.float16, torch.bfloat16]


@pytest.fixture
def fused():
    with fusedops.settings(FUSEDOPS_HALF_GEMM="fused"):
        yield


def model62(in_features, hidden, groups, dtype):
    return make_pair("62", (in_features, hidden, groups), device="cuda", dtype=dtype)


def forward_with(monkeypatch, setting, model, x):
    """model(x) with FUSEDOPS_HALF_GEMM=setting."""
    with fusedops.settings(FUSEDOPS_HALF_GEMM=setting), torch.no_grad():
        return model(x)


# (M, K, hidden, groups): group sizes 16 (the default) .. 128, the tile's N; M not a multiple of
# the 128-row tile; K not a multiple of the 64-wide K step; hidden leaving a partial 128-wide
# tile (400 = 3 x 128 + 16); a single row.
CASES = [
    (1024, 1024, 2048, 128),
    (300, 520, 400, 25),
    (77, 64, 512, 16),
    (130, 200, 768, 12),
    (129, 136, 256, 2),
    (1, 8, 256, 2),
]


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("m,k,n,groups", CASES, ids=[f"{m}x{k}x{n}g{g}" for m, k, n, g in CASES])
def test_fused_contract(fused, m, k, n, groups, dist, dtype):
    ref, new = model62(k, n, groups, dtype)
    x = make_input((m, k), dist, dtype=dtype, device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_reduced(out, expected, expected64)


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_fused_closer_to_float64_than_reference(fused, dtype):
    """"accurate" numerics: float32 intermediates, one rounding at the end; so the error against
    float64 is below the reference's, which rounds y and the normalized values to the dtype."""
    ref, new = model62(1024, 1024, 64, dtype)
    x = make_input((512, 1024), "randn", dtype=dtype, device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    ours = (out.double() - expected64).abs().max().item()
    torchs = (expected.double() - expected64).abs().max().item()
    assert ours < torchs, f"fused error {ours:.3e} vs the reference's {torchs:.3e}"


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_fused_deterministic_and_stream_safe(fused, dtype):
    """Bit-identical across runs (no atomics: shuffle reductions), and on a side stream."""
    _, new = model62(512, 768, 48, dtype)
    x = make_input((260, 512), "randn", dtype=dtype, device="cuda")
    with torch.no_grad():
        first = new(x)
        second = new(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            third = new(x)
        torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(first, second)
    assert torch.equal(first, third)


@requires_hopper
def test_fused_matches_unfused_path(monkeypatch):
    """The fused and the unfused (cuBLAS GEMM + epilogue kernel) paths compute the same float32
    chain; they differ by accumulation order and one final rounding."""
    dtype = torch.float16
    _, new = model62(1024, 1024, 64, dtype)
    x = make_input((256, 1024), "randn", dtype=dtype, device="cuda")
    fused_out = forward_with(monkeypatch, "fused", new, x)
    unfused_out = forward_with(monkeypatch, "cublas", new, x)
    torch.testing.assert_close(fused_out, unfused_out, atol=4e-3, rtol=4e-3)


@requires_hopper
@pytest.mark.parametrize(
    "k,n,groups,why",
    [(100, 512, 32, "in_features a positive multiple of 8"),
     (64, 512, 64, "epilogue cannot take these sizes"),   # group size 8
     (64, 480, 10, "epilogue cannot take these sizes"),   # group size 48: not a power of two
     (64, 512, 2, "epilogue cannot take these sizes")],   # group size 256: wider than a tile
    ids=["k100", "group8", "group48", "group256"])
def test_fused_refuses_what_it_cannot_run(fused, k, n, groups, why):
    _, new = model62(k, n, groups, torch.float16)
    x = make_input((64, k), dtype=torch.float16, device="cuda")
    with pytest.raises(RuntimeError, match=f"FUSEDOPS_HALF_GEMM=fused cannot run here: .*{why}"):
        new(x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_half_gemm_setting_is_checked(monkeypatch):
    _, new = model62(64, 256, 16, torch.float16)
    x = make_input((8, 64), dtype=torch.float16, device="cuda")
    # Refused when read (issue 36), the environment restored.
    with pytest.raises(RuntimeError,
                       match="FUSEDOPS_HALF_GEMM must be auto, cublas or fused, got fast"):
        with fusedops.settings(FUSEDOPS_HALF_GEMM="fast"):
            pass
    new(x)


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_eager_numerics_ignore_the_fused_gemm(monkeypatch, dtype):
    """"eager" numerics need the reference's own GEMM rounding (common/numerics.h): the fused
    setting does not apply to them (bit-identical results either way, no error)."""
    _, new = model62(256, 512, 32, dtype)
    new.numerics = "eager"
    x = make_input((64, 256), "rand", dtype=dtype, device="cuda")
    with_fused_setting = forward_with(monkeypatch, "fused", new, x)
    without = forward_with(monkeypatch, "cublas", new, x)
    assert torch.equal(with_fused_setting, without)


# Model 39 in training above the one-read BatchNorm kernel's 1024 rows: the column moments in the
# half GEMM's epilogue (route sm90-half-fused; gemm_half.h's half_moments_gemm_sm90). Rows: 1025
# (a last tile of one row), 1100 (nine 128-row tiles: CUTLASS's 2 x 1 clusters make a tenth past
# M), 2048 (whole tiles); out_features 3844 = 15 x 256 + 4 (a partial 256-wide tile), enough
# tiles to fill the GPU; in_features 520 (a partial 64-wide K step).
MOMENTS_ROWS = [1025, 1100, 2048]


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("m", MOMENTS_ROWS)
def test_39_training_moments_in_the_half_gemm(m, dist, dtype):
    """Three training steps against the reference in its dtype and in float64: the output and
    the running statistics, which compound the batch statistics the epilogue's moments give."""
    init_args = (520, 3844, (3844,))
    ref, new = make_pair("39", init_args, device="cuda", dtype=dtype)
    ref64 = copy.deepcopy(ref).double()
    for step in range(3):
        x = make_input((m, 520), dist, dtype=dtype, device="cuda")
        if step == 0:
            (line,) = fusedops.explain(copy.deepcopy(new), x)
            assert ": sm90-half-fused (training: the column moments" in line, line
        with torch.no_grad():
            out, expected, expected64 = new(x), ref(x), ref64(x.double())
        assert_reduced(out, expected, expected64)
        for name in ("running_mean", "running_var"):
            stat, stat_ref, stat64 = (getattr(mod.bn, name) for mod in (new, ref, ref64))
            assert_reduced(stat, stat_ref, stat64)
        assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)


@requires_hopper
def test_39_training_moments_match_the_cublas_route():
    """The moments route and cuBLAS's GEMM followed by the moments pass compute the same
    statistics of the same float32 y: outputs and running statistics within a few float16
    units of each other."""
    ref, new = make_pair("39", (520, 3844, (3844,)), device="cuda", dtype=torch.float16)
    other = copy.deepcopy(new)
    x = make_input((1100, 520), "randn", dtype=torch.float16, device="cuda")
    with torch.no_grad():
        fused_out = new(x)
        with fusedops.settings(FUSEDOPS_HALF_GEMM="cublas"):
            (line,) = fusedops.explain(copy.deepcopy(other), x)
            assert ": cublas-half (" in line, line
            cublas_out = other(x)
    torch.testing.assert_close(fused_out, cublas_out, rtol=4e-3, atol=4e-3)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(new.bn, name), getattr(other.bn, name), rtol=2e-3,
                                   atol=1e-4)


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_39_training_moments_under_autocast(dtype):
    """Model 39 built in float32, in training under torch.autocast at 1100 rows: its Linear in
    the autocast dtype with the moments in the half GEMM's epilogue, the chain after it in
    float32 (the operator's autocast form), against the reference in the same region: the
    output (float32), within the autocast dtype's tolerance or as close to the float64 reference
    on the rounded weights as the reference is, and the running statistics."""
    ref, new = make_pair("39", (520, 3844, (3844,)), device="cuda")
    exact = copy.deepcopy(ref)
    with torch.no_grad():
        exact.gemm.weight.copy_(exact.gemm.weight.to(dtype))
        exact.gemm.bias.copy_(exact.gemm.bias.to(dtype))
    exact = exact.double()
    x = make_input((1100, 520), "randn", device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        (line,) = fusedops.explain(copy.deepcopy(new), x)
        with torch.no_grad():
            out, expected = new(x), ref(x)
    with torch.no_grad():
        expected64 = exact(x.to(dtype).double())
    assert ": sm90-half-fused (training: the column moments" in line, line
    assert out.dtype == expected.dtype == torch.float32
    assert_within_tolerance(out, expected, tolerance_for(dtype), expected64)
    tol = tolerance_for(dtype)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(new.bn, name), getattr(ref.bn, name), atol=tol.atol,
                                   rtol=tol.rtol)
