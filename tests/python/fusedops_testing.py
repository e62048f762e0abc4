"""Helpers shared by the pytest files: building a reference model and its ModelNew with the
same weights, drawing inputs, and the accuracy contract of docs/MODELS.md as assertions (the rule
itself is fusedops.accuracy's, shared with `python -m fusedops.compare`).

Every expected value comes from the reference models in fusedops.reference run by PyTorch;
nothing is compared against numbers produced by fusedops itself.
"""
from __future__ import annotations

import copy
import threading

import torch

import fusedops
from fusedops.accuracy import Tolerance, assert_within_tolerance, tolerance_for

KEYS = ("98", "18", "39", "62")

# Operators of the library that take no tensor (ops/fusedops.cpp): the fold cache's, the
# version, and what ran (ops/plan/explain.h) with the settings' reload.
HOUSEKEEPING_OPS = {"clear_fold_cache", "fold_cache_stats", "fold_check", "version",
                    "record_routes", "routes_taken", "reload_settings"}

# Unit roundoff of each dtype (half an ulp at 1.0).
UNIT_ROUNDOFF = {
    torch.float64: 2.0 ** -53,
    torch.float32: 2.0 ** -24,
    torch.float16: 2.0 ** -11,
    torch.bfloat16: 2.0 ** -8,
}

# Our error vs float64 may be at most this many times PyTorch's own error in the same dtype
# (plus a few units in the last place of the output), measured as a max over >= MIN_ROWS rows
# so that the ratio of two maxima is stable.
ERROR_FACTOR = 4.0
MIN_ROWS_FOR_ERROR_RATIO = 32
# A last sanity bound for float16/bfloat16 against float64 (not the float32-computed reference of
# the contract), relative to the output magnitude: passed to the one rule as its tolerance.
REDUCED_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


def classes(key):
    p = fusedops.get_problem(key)
    return p.model, p.model_new


def in_features(init_args) -> int:
    return init_args[0]


def out_features(init_args) -> int:
    return init_args[1]


def randomize_(model: torch.nn.Module) -> torch.nn.Module:
    """Makes the non-Linear state non-trivial (fresh modules have gamma=1, beta=0, running
    stats 0/1), so that an affine or running-statistics mistake cannot hide."""
    with torch.no_grad():
        bn = getattr(model, "bn", None)
        if bn is not None:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_(0.0, 0.5)
            bn.running_mean.normal_(0.0, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        gn = getattr(model, "gn", None)
        if gn is not None:
            gn.weight.uniform_(0.5, 1.5)
            gn.weight.mul_(torch.where(torch.rand_like(gn.weight) < 0.2, -1.0, 1.0))
            gn.bias.normal_(0.0, 0.5)
    return model


def off_the_kink_(model: torch.nn.Module) -> torch.nn.Module:
    """Model 62's GroupNorm parameters such that every GroupNorm output lies at least 0.2 from
    LeakyReLU's kink at 0, where its gradient jumps from 1 to negative_slope: a channel's output
    is gamma x_hat + beta with |x_hat| <= sqrt(group_size - 1), so |beta| >= 1 and
    |gamma| sqrt(group_size - 1) <= 0.8 keep it there, both slopes taken (beta's sign per
    channel). In float16/bfloat16 the reference's GroupNorm rounds its mean and rstd to the
    model's dtype, moving outputs near 0 by up to ~1e-2: there it takes the other slope than an
    exact computation would, and one such element moves its whole row of x's gradient. Tests
    of half-precision gradients use these parameters; float32's exclude the rows instead
    (test_autograd.py, rows_off_the_kink)."""
    gn = model.gn
    bound = max(gn.num_channels // gn.num_groups - 1, 1) ** 0.5
    with torch.no_grad():
        sign = torch.where(torch.rand_like(gn.bias) < 0.5, -1.0, 1.0)
        gn.bias.copy_(sign * torch.empty_like(gn.bias).uniform_(1.0, 2.0))
        gamma_sign = torch.where(torch.rand_like(gn.weight) < 0.2, -1.0, 1.0)
        gn.weight.copy_(gamma_sign * torch.empty_like(gn.weight).uniform_(0.1, 0.8) / bound)
    return model


def make_pair(key, init_args, *, device="cpu", dtype=torch.float32, randomize=True):
    """A reference model and its ModelNew holding identical parameters and buffers."""
    Ref, New = classes(key)
    ref = Ref(*init_args)
    if randomize:
        randomize_(ref)
    new = New(*init_args)
    new.load_state_dict(ref.state_dict(), strict=True)
    return ref.to(device=device, dtype=dtype), new.to(device=device, dtype=dtype)


def make_input(shape, dist="rand", *, dtype=torch.float32, device="cpu"):
    """torch.rand (the public benchmark) or torch.randn (the originals), freshly drawn from the
    per-test seeded global generator, then cast; the float64 reference gets the cast values."""
    draw = {"rand": torch.rand, "randn": torch.randn}[dist]
    return draw(tuple(shape), dtype=torch.float64).to(dtype=dtype, device=device)


def run_trio(ref, new, x, *, ref_device=None):
    """Runs ModelNew, the reference in x's dtype, and the reference in float64 (on ref_device,
    default x's device). The float64 copy is made before any forward, so model 39's running
    statistics start equal. Returns (out, expected, expected64, ref64_model)."""
    ref64_model = copy.deepcopy(ref).double()
    device64 = x.device if ref_device is None else torch.device(ref_device)
    ref64_model = ref64_model.to(device64)
    with torch.no_grad():
        out = new(x)
        expected = ref(x)
        expected64 = ref64_model(x.to(device=device64, dtype=torch.float64))
    return out, expected, expected64, ref64_model


def assert_same_meta(out, expected):
    assert isinstance(out, torch.Tensor)
    assert out.shape == expected.shape, f"shape {tuple(out.shape)} != {tuple(expected.shape)}"
    assert out.dtype == expected.dtype, f"dtype {out.dtype} != {expected.dtype}"
    assert out.device == expected.device, f"device {out.device} != {expected.device}"


def max_abs_err(a, b) -> float:
    if a.numel() == 0:
        return 0.0
    return (a.double().cpu() - b.double().cpu()).abs().max().item()


def max_abs(a) -> float:
    if a.numel() == 0:
        return 0.0
    return a.double().abs().max().item()


def assert_float64(out, expected64, tolerance=None):
    assert_within_tolerance(out, expected64, tolerance or tolerance_for(torch.float64))


def _assert_error_ratio(out, expected, expected64, dtype, factor):
    if out.dim() == 0 or out.shape[0] < MIN_ROWS_FOR_ERROR_RATIO:
        return
    ours = max_abs_err(out, expected64)
    torchs = max_abs_err(expected, expected64)
    floor = 4 * UNIT_ROUNDOFF[dtype] * max(max_abs(expected64), 1e-30)
    assert ours <= factor * torchs + floor, (
        f"{dtype}: max error vs float64 reference is {ours:.3e}, PyTorch's own {dtype} error is "
        f"{torchs:.3e} (allowed {factor} x that + {floor:.1e})")


def assert_float32(out, expected32, expected64, factor=ERROR_FACTOR):
    """SPEC's float32 contract: allclose(1e-4, 1e-4) to the float32 reference, and an error vs
    the float64 reference no worse than a few times PyTorch's own float32 error."""
    # Where a sum cancels (randn inputs, 8192 terms) PyTorch's own float32 result can be more than
    # 1e-4 away from the exact value: the rule's float64 clause (fusedops.accuracy).
    assert_within_tolerance(out, expected32, tolerance_for(torch.float32), expected64)
    _assert_error_ratio(out, expected32, expected64, torch.float32, factor)


def assert_reduced(out, expected, expected64, factor=ERROR_FACTOR):
    """float16/bfloat16 (accumulating in float32): no worse than PyTorch's own computation in
    that dtype, and within REDUCED_TOL of the float64 reference of the same (rounded) weights."""
    dtype = out.dtype
    assert_same_meta(out, expected)
    _assert_error_ratio(out, expected, expected64, dtype, factor)
    magnitude = max(max_abs(expected64), 1.0)
    assert_within_tolerance(out.double(), expected64,
                            Tolerance(atol=REDUCED_TOL[dtype] * magnitude, rtol=REDUCED_TOL[dtype]))


def assert_contract(out, expected, expected64):
    """Dispatches on the output dtype to the matching accuracy contract."""
    dtype = expected.dtype
    if dtype == torch.float64:
        assert_float64(out, expected64)
    elif dtype == torch.float32:
        assert_float32(out, expected, expected64)
    else:
        assert_reduced(out, expected, expected64)


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module, rtol=0.0, atol=0.0):
    """Same names, shapes, dtypes and (within tolerance) values in state_dict order."""
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa.keys()) == list(sb.keys())
    for name in sa:
        ta, tb = sa[name], sb[name]
        assert ta.shape == tb.shape, name
        assert ta.dtype == tb.dtype, name
        if ta.is_floating_point():
            torch.testing.assert_close(ta, tb, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
        else:
            assert torch.equal(ta, tb), f"{name}: {ta} != {tb}"


def run_threads(count, work):
    """Runs work(index) on `count` threads released together; fails on a thread's exception
    (with its index) or on a thread still running after 300 s."""
    barrier = threading.Barrier(count)
    errors = []

    def body(index):
        try:
            barrier.wait()
            work(index)
        except BaseException as e:  # noqa: BLE001 - reported below with its thread
            errors.append((index, e))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


def busy_stream(stream, size=4096, steps=20):
    """Queues a few hundred milliseconds of matmuls on `stream` (what runs after it there runs
    late); returns the result, which the caller keeps alive until the stream is done."""
    with torch.cuda.stream(stream):
        a = torch.randn(size, size, device="cuda")
        for _ in range(steps):
            a = (a @ a).clamp_(-1, 1)
    return a
