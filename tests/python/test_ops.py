"""The operators themselves: torch.library.opcheck on every op, the fold helpers against a direct
PyTorch computation, non-finite rows, meta shapes, keyword calls and non-contiguous weights."""
import math

import pytest
import torch
import torch.nn.functional as F

import fusedops
from fusedops_testing import (HOUSEKEEPING_OPS, UNIT_ROUNDOFF, assert_contract, make_input,
                              make_pair, run_trio)
from fusedops.accuracy import Tolerance, assert_within_tolerance, tolerance_for

ops = torch.ops.fusedops

# opcheck's default utilities plus the static AOT check, here with inputs that do not require
# grad; test_autograd.py runs them all with grad-requiring inputs.
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_static", "test_aot_dispatch_dynamic")


def _linear_args(batch, n_in, n_out, dtype, device):
    x = torch.randn(batch, n_in, dtype=dtype, device=device)
    w = torch.randn(n_out, n_in, dtype=dtype, device=device) / n_in ** 0.5
    b = torch.randn(n_out, dtype=dtype, device=device)
    return x, w, b


def _bn_args(n_out, dtype, device):
    return (torch.rand(n_out, dtype=dtype, device=device) + 0.5,      # bn_weight
            torch.randn(n_out, dtype=dtype, device=device),           # bn_bias
            torch.randn(n_out, dtype=dtype, device=device),           # running_mean
            torch.rand(n_out, dtype=dtype, device=device) + 0.5,      # running_var
            torch.tensor(3, dtype=torch.long, device=device))         # num_batches_tracked


def opcheck_cases(dtype, device):
    x, w, b = _linear_args(6, 12, 20, dtype, device)
    scale = torch.randn(20, dtype=dtype, device=device)
    cases = {
        "matmul_avgpool_gelu_scale_max": [(x, w, b, 3, 2.0), (x, w, b, 20, -0.5)],
        "matmul_sum_max_avgpool_logsumexp_logsumexp": [(x, w, b)],
        "gemm_scale_batchnorm": [
            (x, w, b, scale, *_bn_args(20, dtype, device), True, 0.1, 1e-5),
            (x, w, b, scale, *_bn_args(20, dtype, device), True, None, 1e-5),
            (x, w, b, scale, *_bn_args(20, dtype, device), False, 0.1, 1e-5),
            (x, w, b, scale[:1], *_bn_args(20, dtype, device), True, 0.1, 1e-3),
        ],
        "matmul_groupnorm_leakyrelu_sum": [
            (x, w, b, 4, torch.randn(20, dtype=dtype, device=device),
             torch.randn(20, dtype=dtype, device=device), 1e-5, 0.01),
            (x, w, b, 20, torch.randn(20, dtype=dtype, device=device),
             torch.randn(20, dtype=dtype, device=device), 1e-5, 0.2),
        ],
        "avgpool_fold_linear": [(w, b, 3), (w, b, 7)],
        "sum_fold_linear": [(w, b)],
        "gemm_nt": [(x, w), (x[:, 1:], w.t().contiguous().t()[:, 1:])],  # strided operands
        "groupnorm_leakyrelu_sum_backward": [
            (torch.randn(6, 20, dtype=dtype, device=device), x @ w.t() + b,
             torch.randn(20, dtype=dtype, device=device),
             torch.randn(20, dtype=dtype, device=device), 4, 1e-5, 0.01),
            (torch.randn(20, 6, dtype=dtype, device=device).t(), x @ w.t() + b,  # strided
             torch.randn(20, dtype=dtype, device=device),
             torch.randn(20, dtype=dtype, device=device), 20, 1e-3, 0.2),
        ],
        "avgpool_gelu_scale_max_backward": [
            (torch.randn(6, dtype=dtype, device=device), x @ w[:18:3].t(), x, w[:18:3].clone(),
             3, 2.0, 20, [True, True, True]),  # 20 = 6 windows of 3 and two rows dropped
            (torch.randn(6, dtype=dtype, device=device), (x @ w[:5].t()).t().contiguous().t(),
             x, w[:5].clone(), 4, -0.5, 20, [True, False, True]),  # strided pooled, no dW
        ],
    }
    return [pytest.param(name, i, id=f"{name}-{i}")
            for name, args in cases.items() for i in range(len(args))], cases


OPCHECK_PARAMS, _ = opcheck_cases(torch.float32, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,index", OPCHECK_PARAMS)
def test_opcheck(name, index, dtype, device):
    _, cases = opcheck_cases(dtype, device)
    args = cases[name][index]
    result = torch.library.opcheck(getattr(ops, name).default, args, test_utils=OPCHECK_UTILS)
    assert set(result) == set(OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("name,index", OPCHECK_PARAMS)
def test_autograd_registration_with_grad_inputs(name, index, device):
    """With inputs that require grad, opcheck's test_autograd_registration checks that the
    backend kernel does not hand back an output carrying a graph of its *internal* ATen calls
    (a partial graph: backward would silently give wrong gradients): the Autograd kernels in
    ops/autograd/ run the backend kernel below autograd."""
    _, cases = opcheck_cases(torch.float64, device)
    # x, weight and bias (the running statistics are mutated in place: they never require grad)
    args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) and i < 3 else a
                 for i, a in enumerate(cases[name][index]))
    result = torch.library.opcheck(getattr(ops, name).default, args,
                                   test_utils=("test_autograd_registration",))
    assert result == {"test_autograd_registration": "SUCCESS"}


def test_every_schema_is_opchecked():
    """A new operator added to ops/fusedops.cpp must be added to opcheck_cases too."""
    registered = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas()
                  if s.name.startswith("fusedops::")}
    _, cases = opcheck_cases(torch.float32, "cpu")
    assert registered - HOUSEKEEPING_OPS == set(cases)


def test_version_matches_package():
    assert ops.version() == fusedops.__version__
    assert set(ops.fold_cache_stats()) == {"weights", "entries", "bytes", "misses"}


# ---- fold helpers --------------------------------------------------------------------------

FOLD_TOL = {torch.float64: dict(rtol=1e-12, atol=1e-14), torch.float32: dict(rtol=1e-5, atol=1e-6)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("n_out,n_in,k", [(1000, 1023, 7), (1023, 64, 16), (1000, 33, 3),
                                          (1023, 1023, 3), (50, 17, 1), (50, 17, 50), (8, 5, 3)])
def test_avgpool_fold_linear(n_out, n_in, k, dtype, device):
    w = torch.randn(n_out, n_in, dtype=dtype, device=device)
    b = torch.randn(n_out, dtype=dtype, device=device)
    pw, pb = ops.avgpool_fold_linear(w, b, k)
    # Direct: AvgPool1d (floor mode: the last n_out % k rows are dropped) along the out dim,
    # in float64.
    expected_w = F.avg_pool1d(w.double().t().unsqueeze(0), k).squeeze(0).t()
    expected_b = F.avg_pool1d(b.double().view(1, 1, -1), k).view(-1)
    assert pw.shape == (n_out // k, n_in) and pb.shape == (n_out // k,)
    assert pw.dtype == dtype and pb.dtype == dtype
    assert pw.device == w.device and pb.device == b.device
    torch.testing.assert_close(pw, expected_w.to(dtype), **FOLD_TOL[dtype])
    torch.testing.assert_close(pb, expected_b.to(dtype), **FOLD_TOL[dtype])
    # and the algebra the op rests on: pool(x W^T + b) == x pooled_W^T + pooled_b
    x = torch.randn(4, n_in, dtype=torch.float64, device=device)
    y = F.avg_pool1d(F.linear(x, w.double(), b.double()).unsqueeze(1), k).squeeze(1)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(F.linear(x, pw.double(), pb.double()), y, rtol=tol, atol=tol)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=["f64", "f32", "f16", "bf16"])
@pytest.mark.parametrize("n_out,n_in,k,offset", [(1024, 512, 16, 0), (1000, 33, 3, 0),
                                                 (1024, 512, 16, 1), (64, 24, 5, 0)])
def test_avgpool_fold_linear_on_cuda_is_the_cpus_bit_for_bit(n_out, n_in, k, offset, dtype):
    """The CUDA fold takes 16-byte columns where n_in and both pointers allow (n_in 512 and 24
    in every dtype, 33 in none; offset 1: W a contiguous view one value into its storage, not
    16-byte aligned) and single columns otherwise: each pooled value is the same double sum in
    the same order as the CPU's, so the two agree bit for bit (and with float64's pooling to
    within its one rounding to the dtype)."""
    storage = torch.randn(n_out * n_in + offset, dtype=torch.float64).to(dtype)
    w = storage[offset:].view(n_out, n_in)
    b = torch.randn(n_out, dtype=torch.float64).to(dtype)
    pw_cpu, pb_cpu = ops.avgpool_fold_linear(w, b, k)
    w_cuda = torch.empty(n_out * n_in + offset, dtype=dtype, device="cuda")
    w_cuda.copy_(storage)
    w_cuda = w_cuda[offset:].view(n_out, n_in)
    assert (w_cuda.data_ptr() % 16 == 0) == (offset == 0)
    pw, pb = ops.avgpool_fold_linear(w_cuda, b.cuda(), k)
    assert torch.equal(pw.cpu(), pw_cpu) and torch.equal(pb.cpu(), pb_cpu)
    # float64's pooling, rounded once (half of fp16's smallest subnormal apart at most near 0).
    expected = F.avg_pool1d(w.double().t().unsqueeze(0), k).squeeze(0).t()
    tol = {torch.float64: dict(rtol=1e-12, atol=1e-14),
           torch.float32: dict(rtol=2.0 ** -24, atol=1e-14),
           torch.float16: dict(rtol=2.0 ** -11, atol=2.0 ** -25),
           torch.bfloat16: dict(rtol=2.0 ** -8, atol=1e-14)}[dtype]
    torch.testing.assert_close(pw.cpu().double(), expected, **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("n_out,n_in", [(1000, 1023), (1023, 1000), (8192, 3), (1, 1), (5, 17)])
def test_sum_fold_linear(n_out, n_in, dtype, device):
    w = torch.randn(n_out, n_in, dtype=dtype, device=device)
    b = torch.randn(n_out, dtype=dtype, device=device)
    colsum, bsum = ops.sum_fold_linear(w, b)
    assert colsum.shape == (n_in,) and bsum.shape == ()
    assert colsum.dtype == dtype and bsum.dtype == dtype
    expected_c = w.double().sum(0)
    expected_b = b.double().sum()
    # a sum of n_out terms: allow a few roundings of the sum of magnitudes
    atol_c = 4 * UNIT_ROUNDOFF[dtype] * n_out ** 0.5 * w.double().abs().sum(0).max().item()
    atol_b = 4 * UNIT_ROUNDOFF[dtype] * n_out ** 0.5 * b.double().abs().sum().item()
    torch.testing.assert_close(colsum.double(), expected_c, rtol=0, atol=max(atol_c, 1e-300))
    torch.testing.assert_close(bsum.double(), expected_b, rtol=0, atol=max(atol_b, 1e-300))


# (m, n, k): a GEMM the 3xFP16 engine takes on Hopper, odd sizes, few rows, empty ones.
GEMM_NT_SIZES = [(1024, 1024, 2048), (300, 260, 513), (77, 52, 1001), (3, 7, 5), (0, 5, 3),
                 (5, 4, 0)]


@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("m,n,k", GEMM_NT_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in GEMM_NT_SIZES])
def test_gemm_nt(m, n, k, dtype, dist, device):
    """a b^T against PyTorch's own in the dtype and in float64, each dtype's accuracy contract
    (float32: as accurate as PyTorch's float32 GEMM, whichever engine ran)."""
    if device == "cpu" and dtype in (torch.float16, torch.bfloat16) and m * n * k > 10**7:
        pytest.skip("a large half-precision GEMM on the CPU is slow and adds nothing")
    a = make_input((m, k), dist, dtype=dtype, device=device)
    b = make_input((n, k), dist, dtype=dtype, device=device)
    out = ops.gemm_nt(a, b)
    assert out.shape == (m, n) and out.dtype == dtype and out.device == a.device
    assert_contract(out, a @ b.t(), a.double() @ b.double().t())


# (batch, hidden, groups): the default size (groups of 16), odd sizes, groups of 1 channel and
# groups wider than a warp, no rows.
GN_BACKWARD_SIZES = [(1024, 8192, 512), (37, 60, 5), (9, 21, 21), (5, 96, 1), (3, 130, 2),
                     (0, 12, 3)]


@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("batch,hidden,groups", GN_BACKWARD_SIZES,
                         ids=[f"{m}x{n}g{g}" for m, n, g in GN_BACKWARD_SIZES])
def test_groupnorm_leakyrelu_sum_backward(batch, hidden, groups, dtype, dist, device):
    """Model 62's backward after its Linear against autograd through the reference's ops
    (group_norm, leaky_relu, v + v) in the dtype and in float64: on the CPU bit for bit (the
    same ATen ops), on CUDA (one pass of our own) within the gradient contract."""
    if device == "cpu" and batch * hidden > 10**6:
        pytest.skip("the default size on the CPU adds nothing to the odd ones")
    y = make_input((batch, hidden), dist, dtype=dtype, device=device)
    grad_out = make_input((batch, hidden), "randn", dtype=dtype, device=device)
    gamma = make_input((hidden,), "randn", dtype=dtype, device=device)
    beta = make_input((hidden,), dist, dtype=dtype, device=device)
    eps, slope = 1e-5, 0.01

    def reference(y, gamma, beta, grad_out):
        y, gamma, beta = (t.detach().requires_grad_() for t in (y, gamma, beta))
        v = F.leaky_relu(F.group_norm(y, groups, gamma, beta, eps), slope)
        return torch.autograd.grad(v + v, (y, gamma, beta), grad_out)

    ours = ops.groupnorm_leakyrelu_sum_backward(grad_out, y, gamma, beta, groups, eps, slope)
    same = reference(y, gamma, beta, grad_out)
    wide = reference(y.double(), gamma.double(), beta.double(), grad_out.double())
    # LeakyReLU's kink: where GroupNorm's output lies within the dtype's own error of 0, which
    # slope applies is rounding noise (ours and ATen's may differ there, both valid). Such
    # elements' segments are left out of y's gradient, their channels out of gamma's and beta's
    # (a column sum), at most a tenth of either.
    with torch.no_grad():
        v64 = F.group_norm(y.double(), groups, gamma.double(), beta.double(), eps)
        v = F.group_norm(y, groups, gamma, beta, eps)
        noise = (v.double() - v64).abs().max().item() if v.numel() else 0.0
        near = v64.abs() <= 8 * noise
        segments = near.view(batch, groups, hidden // groups).any(-1, keepdim=True).expand(
            batch, groups, hidden // groups).reshape(batch, hidden)
        channels = near.any(0)
    if batch:
        assert segments.float().mean().item() <= 0.1 and channels.float().mean().item() <= 0.1
    for name, o, e, e64 in zip(("y", "gn_weight", "gn_bias"), ours, same, wide):
        assert o.shape == e.shape and o.dtype == dtype and o.device == y.device, name
        if device == "cpu":
            assert torch.equal(o, e), name
            continue
        kept = ~(segments if name == "y" else channels)
        o, e, e64 = o[kept], e[kept], e64[kept]
        # GroupNorm's parameter gradients sum over the rows: the tolerance scales with the
        # largest entry.
        scale = max(1.0, e64.abs().max().item()) if e64.numel() else 1.0
        tol = Tolerance(rtol=1e-4 if dtype == torch.float32 else 1e-9,
                        atol=(1e-5 if dtype == torch.float32 else 1e-10) * scale)
        assert_within_tolerance(o, e, tol, e64)


# (batch, in_features, out_features, k): the default sizes, odd sizes with rows the pooling drops,
# one window, no rows.
GSM_BACKWARD_SIZES = [(1024, 8192, 8192, 16), (37, 45, 61, 6), (13, 21, 21, 4), (7, 5, 8, 8),
                      (0, 12, 20, 3)]


def gsm_reference_grads(x, weight, bias, k, scale, grad_out):
    """Model 98's chain after x (the reference's ops) and its gradients by autograd."""
    x, weight, bias = (t.detach().requires_grad_() for t in (x, weight, bias))
    pooled = F.avg_pool1d(F.linear(x, weight, bias).unsqueeze(1), k).squeeze(1)
    out = torch.max(F.gelu(pooled) * scale, dim=1).values
    return pooled.detach(), torch.autograd.grad(out, (x, weight, bias), grad_out)


@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("batch,n_in,n_out,k", GSM_BACKWARD_SIZES,
                         ids=[f"{m}x{i}x{o}k{k}" for m, i, o, k in GSM_BACKWARD_SIZES])
def test_avgpool_gelu_scale_max_backward(batch, n_in, n_out, k, dtype, dist, device):
    """Model 98's backward after its pooled Linear against autograd through the reference's ops
    (linear, avg_pool1d, gelu, * scale, max) from the same pooled values, in the dtype and in
    float64: the argmax is the reference's (the same pooled tensor), x's gradient a row of the
    pooled weight, W's and b's the window sums spread 1/k to each row, zero past the last
    window; on CPU and CUDA within the gradient contract."""
    if device == "cpu" and (batch * n_out > 10**6 or dtype in (torch.float16, torch.bfloat16)
                            and batch * n_out > 10**4):
        pytest.skip("the default size on the CPU adds nothing to the odd ones")
    x = make_input((batch, n_in), dist, dtype=dtype, device=device)
    weight = make_input((n_out, n_in), "randn", dtype=dtype, device=device) / n_in ** 0.5
    bias = make_input((n_out,), dist, dtype=dtype, device=device)
    grad_out = make_input((batch,), "randn", dtype=dtype, device=device)
    scale = -1.5 if dist == "rand" else 2.0
    pooled, same = gsm_reference_grads(x, weight, bias, k, scale, grad_out)
    # float64 from the same rounded inputs: where the dtype's pooled values tie, the reference
    # in the dtype decides (the helper is given them).
    _, wide = gsm_reference_grads(x.double(), weight.double(), bias.double(), k, scale,
                                  grad_out.double())
    pooled_weight, _ = ops.avgpool_fold_linear(weight, bias, k)
    ours = ops.avgpool_gelu_scale_max_backward(grad_out, pooled, x, pooled_weight, k, scale,
                                               n_out, [True, True, True])
    tol = tolerance_for(dtype)
    for name, o, e, e64 in zip(("x", "weight", "bias"), ours, same, wide):
        assert o.shape == e.shape and o.dtype == dtype and o.device == x.device, name
        # The weight's and bias's gradients sum over the rows: atol scales with the largest.
        mag = max(1.0, e.abs().max().item()) if e.numel() else 1.0
        assert_within_tolerance(o, e, Tolerance(rtol=tol.rtol, atol=tol.atol * mag), e64)
    if batch:
        assert not ours[1][n_out // k * k:].any() and not ours[2][n_out // k * k:].any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
def test_avgpool_gelu_scale_max_backward_cuda_ties_nans_and_masks(dtype):
    """The CUDA kernels against the CPU's ATen ops on what the argmax rule decides: exact ties
    (the first window wins), a NaN among a row's values (the first NaN wins), a row of one
    value, every row in one window (its sum over all rows, in row order), more rows than a
    block's tile; and each output_mask: the outputs asked for, the same values; the others
    empty."""
    batch, n_in, k, windows = 600, 70, 3, 9
    n_out = windows * k + 2
    x = make_input((batch, n_in), "randn", dtype=dtype, device="cuda")
    pooled_weight = make_input((windows, n_in), "randn", dtype=dtype, device="cuda")
    grad_out = make_input((batch,), "randn", dtype=dtype, device="cuda")
    pooled = make_input((batch, windows), "randn", dtype=dtype, device="cuda")
    pooled[:100, 5] = pooled[:100, 2]          # ties: window 2 wins
    pooled[100:200, 7] = float("nan")          # a NaN wins
    pooled[150:200, 3] = float("nan")          # the first NaN wins
    pooled[200:300] = 0.25                     # one value: window 0
    pooled[300:, 4] = 50.0                     # the rest in window 4, across tiles
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        cuda = ops.avgpool_gelu_scale_max_backward(grad_out, pooled, x, pooled_weight, k, 2.0,
                                                   n_out, mask)
        cpu = ops.avgpool_gelu_scale_max_backward(grad_out.cpu(), pooled.cpu(), x.cpu(),
                                                  pooled_weight.cpu(), k, 2.0, n_out, mask)
        tol = {torch.float32: Tolerance(rtol=1e-5, atol=1e-5),
               torch.float64: Tolerance(rtol=1e-12, atol=1e-12)}.get(dtype, tolerance_for(dtype))
        for name, wanted, o, e in zip(("x", "weight", "bias"), mask, cuda, cpu):
            if not wanted:
                assert o.numel() == 0 and e.numel() == 0, name
                continue
            assert o.shape == e.shape and o.dtype == dtype, name
            mag = max(1.0, e.nan_to_num().abs().max().item())
            torch.testing.assert_close(o.cpu(), e, rtol=tol.rtol, atol=tol.atol * mag,
                                       equal_nan=True, msg=lambda m: f"{name} {mask}: {m}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_fold_helpers_reduced_precision(dtype, device):
    w = torch.randn(1000, 64, dtype=dtype, device=device)
    b = torch.randn(1000, dtype=dtype, device=device)
    pw, pb = ops.avgpool_fold_linear(w, b, 7)
    expected = F.avg_pool1d(w.double().t().unsqueeze(0), 7).squeeze(0).t()
    assert pw.dtype == dtype
    # accumulated in float32: at most ~one rounding of the result
    u = UNIT_ROUNDOFF[dtype]
    torch.testing.assert_close(pw.double(), expected, rtol=2 * u, atol=2 * u)
    colsum, bsum = ops.sum_fold_linear(w, b)
    expected_c = w.double().sum(0)
    atol = 2 * u * expected_c.abs().max().item() + 1e-3
    torch.testing.assert_close(colsum.double(), expected_c, rtol=2 * u, atol=atol)
    torch.testing.assert_close(bsum.double(), b.double().sum(), rtol=2 * u,
                               atol=2 * u * b.double().abs().sum().item())


# ---- non-finite inputs ---------------------------------------------------------------------

def _nonfinite_x(n_in, dtype, device):
    x = make_input((8, n_in), "randn", dtype=dtype, device=device)
    inf, nan = float("inf"), float("nan")
    x[1, 3] = inf
    x[2, 0] = -inf
    x[3, n_in - 1] = nan
    x[4, 1] = inf
    x[4, 2] = -inf
    x[5, :] = inf
    x[6, :] = nan
    return x  # rows 0 and 7 stay finite


def assert_same_nonfinite_pattern(out, expected):
    assert out.shape == expected.shape
    assert torch.equal(torch.isnan(out), torch.isnan(expected)), (out, expected)
    assert torch.equal(torch.isposinf(out), torch.isposinf(expected)), (out, expected)
    assert torch.equal(torch.isneginf(out), torch.isneginf(expected)), (out, expected)
    finite = torch.isfinite(expected)
    assert_within_tolerance(out[finite], expected[finite], tolerance_for(torch.float32))


@pytest.mark.parametrize("weights", ["default-init", "positive"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("key,args", [("98", (40, 60, 4, 2.0)), ("98", (40, 61, 3, -1.5)),
                                      ("18", (40, 60)), ("18", (40, 1))],
                         ids=["98", "98-negscale", "18", "18-out1"])
def test_nonfinite_rows(key, args, dtype, weights, device):
    """A row of x holding inf or nan gives the reference's inf/nan pattern: with mixed-sign
    weights +inf * w makes +inf and -inf outputs whose sum/mean is nan; with positive weights
    the infinities survive."""
    ref, new = make_pair(key, args, device=device, dtype=dtype)
    if weights == "positive":
        with torch.no_grad():
            for m in (ref, new):
                lin = m.matmul if key == "98" else m.linear
                lin.weight.abs_()
    x = _nonfinite_x(args[0], dtype, device)
    with torch.no_grad():
        out, expected = new(x), _reference_without_blas(key, ref, x)
    assert_same_nonfinite_pattern(out, expected)


def _reference_without_blas(key, ref, x):
    """The reference chain with its Linear as elementwise products and a sum: IEEE semantics
    for inf and NaN. A BLAS GEMM may turn inf into NaN where it multiplies zero padding (seen
    with the CPU GEMM on the GPU machine's Xeon: +inf * positive weights came out NaN there)."""
    lin = ref.matmul if key == "98" else ref.linear
    y = (x.unsqueeze(1) * lin.weight.unsqueeze(0)).sum(-1) + lin.bias
    if key == "98":
        p = ref.avg_pool(y.unsqueeze(1)).squeeze(1)
        # GELU from math.erf, element by element: ATen's vectorized CPU erf gave gelu(+inf) = NaN
        # on that Xeon too (its polynomial multiplies 0 * inf), where the exact GELU is +inf.
        g = torch.tensor([[0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in row]
                          for row in p.double().tolist()], dtype=p.dtype, device=p.device)
        return torch.max(g * ref.scale_factor, dim=1).values
    s = torch.sum(y, dim=1, keepdim=True)
    s = torch.max(s, dim=1, keepdim=True)[0]
    s = torch.mean(s, dim=1, keepdim=True)
    return torch.logsumexp(torch.logsumexp(s, dim=1, keepdim=True), dim=1, keepdim=True)


# ---- meta shapes, keyword calls, non-contiguous weights -------------------------------------

@pytest.mark.parametrize("key,args", [("98", (12, 20, 3, 2.0)), ("18", (12, 20)),
                                      ("39", (12, 20, (20,))), ("62", (12, 20, 4))],
                         ids=["98", "18", "39", "62"])
def test_meta_shapes_match_reference(key, args):
    ref, new = make_pair(key, args)
    ref.to("meta")
    new.to("meta")
    for batch in (0, 1, 7):
        if key == "39" and batch == 1:
            continue
        x = torch.empty(batch, args[0], device="meta")
        expected = ref(x)
        out = new(x)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        assert out.device.type == "meta"


def test_keyword_arguments(device):
    x, w, b = _linear_args(5, 12, 20, torch.float64, device)
    out = ops.matmul_avgpool_gelu_scale_max(x=x, weight=w, bias=b, pool_kernel_size=3,
                                            scale_factor=2.0)
    expected = (F.gelu(F.avg_pool1d(F.linear(x, w, b).unsqueeze(1), 3).squeeze(1)) * 2.0).max(1)
    assert_within_tolerance(out, expected.values, tolerance_for(torch.float64))


def _strided(t):
    """The same values with non-unit strides: a transposed copy transposed back (2-D) or every
    other element of a twice-as-long vector (1-D)."""
    if t.dim() == 2:
        return t.t().contiguous().t()
    wide = torch.empty(2 * t.numel(), dtype=t.dtype, device=t.device)
    wide[::2] = t
    return wide[::2]


@pytest.mark.parametrize("key,args", [("98", (33, 50, 4, 2.0)), ("18", (33, 50)),
                                      ("39", (33, 50, (50,))), ("62", (33, 50, 5))],
                         ids=["98", "18", "39", "62"])
def test_noncontiguous_parameters(key, args, device):
    """Parameters with non-unit strides (as after a transpose or a slice) are accepted by the
    reference, so by ModelNew too."""
    ref, new = make_pair(key, args, device=device, dtype=torch.float64)
    with torch.no_grad():
        for name, p in list(new.named_parameters()):
            if p.dim() >= 1 and p.numel() > 1:
                mod_name, _, attr = name.rpartition(".")
                mod = new.get_submodule(mod_name) if mod_name else new
                setattr(mod, attr, torch.nn.Parameter(_strided(p.detach().clone())))
    assert not dict(new.named_parameters())[
        {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}[key] + ".weight"
    ].is_contiguous()
    for mode in (["train", "eval"] if key == "39" else ["eval"]):
        ref.train(mode == "train")
        new.train(mode == "train")
        x = make_input((16, args[0]), "randn", dtype=torch.float64, device=device)
        out, expected, _, _ = run_trio(ref, new, x)
        assert_within_tolerance(out, expected, tolerance_for(torch.float64))
