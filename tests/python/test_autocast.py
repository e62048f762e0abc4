"""ModelNew inside torch.autocast(device, dtype) behaves like the reference inside the same
region (ops/autocast/): the same output dtype, values within the autocast dtype's tolerance of
the reference's (or at least as close to float64 as the reference is), the same running
statistics for model 39, and gradients that reach the float32 parameters, with and without
grad mode, on the CPU and on CUDA. Expected values are the reference model's, run by PyTorch
in the same region.
"""
import copy

import pytest
import torch

from fusedops.accuracy import Tolerance, assert_within_tolerance, tolerance_for
from fusedops_testing import KEYS, make_input, make_pair

INIT_ARGS = {"98": (96, 80, 8, 2.0), "18": (96, 80), "39": (96, 80, (80,)), "62": (96, 80, 10)}
ODD_INIT_ARGS = {"98": (77, 61, 6, -1.5), "18": (77, 61), "39": (77, 61, (61,)),
                 "62": (77, 63, 7)}
AUTOCAST_DTYPES = [pytest.param(torch.bfloat16, id="bf16"),
                   pytest.param(torch.float16, id="f16")]


def _magnitude_tolerance(dtype, expected):
    """The dtype's tolerance with atol scaled to the tensor's magnitude: a gradient sums many
    products, each rounded to the autocast dtype."""
    tol = tolerance_for(dtype)
    scale = max(float(expected.detach().abs().max()), 1.0)
    return Tolerance(atol=tol.atol * scale, rtol=tol.rtol)


LINEAR = {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}


def _exact_reference(ref, key, dtype):
    """The reference in float64 on the values autocast multiplies: the Linear's weight and bias
    rounded to the autocast dtype (the input is rounded by the caller). The accuracy rule's
    second clause measures against it: where the reference's own roundings take it farther
    than the tolerance from its result, ours must be at least as close to this."""
    exact = copy.deepcopy(ref)
    linear = getattr(exact, LINEAR[key])
    with torch.no_grad():
        linear.weight.copy_(linear.weight.to(dtype))
        linear.bias.copy_(linear.bias.to(dtype))
    return exact.double()


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("numerics", ["accurate", "eager"])
@pytest.mark.parametrize("sizes", ["small", "odd"])
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
@pytest.mark.parametrize("key", KEYS)
def test_autocast_matches_the_reference(key, dtype, sizes, numerics, grad, device):
    init_args = (INIT_ARGS if sizes == "small" else ODD_INIT_ARGS)[key]
    ref, new = make_pair(key, init_args, device=device)  # float32 models, as autocast expects
    new.numerics = numerics
    exact = _exact_reference(ref, key, dtype)
    x = make_input((16, init_args[0]), "rand", device=device)
    x64 = x.to(dtype).double().requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        with torch.autocast(device, dtype=dtype):
            expected = ref(x)
            out = new(x)
        expected64 = exact(x64)
    assert out.dtype == expected.dtype, f"dtype {out.dtype}, the reference's {expected.dtype}"
    assert out.shape == expected.shape and out.device == expected.device
    assert_within_tolerance(out, expected, tolerance_for(dtype), expected64)
    if key == "39":
        tol = tolerance_for(dtype)
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(new.bn, name), getattr(ref.bn, name),
                                       atol=tol.atol, rtol=tol.rtol)
            assert getattr(new.bn, name).dtype == torch.float32
        assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)
    if not grad:
        assert not out.requires_grad
        return
    g = torch.randn_like(expected)
    expected.backward(g)
    out.backward(g)
    expected64.backward(g.double())
    params = zip(ref.named_parameters(), new.named_parameters(), exact.parameters())
    for (name, p_ref), (_, p_new), p_exact in params:
        assert p_new.grad is not None and p_new.grad.dtype == torch.float32, name
        # Model 39's Linear bias has a zero gradient (training BatchNorm subtracts the batch
        # mean): there the exact value decides, as everywhere the reference's roundings exceed
        # the tolerance.
        assert_within_tolerance(p_new.grad, p_ref.grad, _magnitude_tolerance(dtype, p_ref.grad),
                                p_exact.grad)


@pytest.mark.parametrize("key", KEYS)
def test_autocast_casts_each_weight_once_across_regions(key, device):
    """A server enters an autocast region per request. Where autograd does not differentiate
    the call, the Linear's weight and bias in the autocast dtype are folds of the float32
    parameters (ops/autocast/autocast_helpers.h): made once per version, not once per region
    as autocast's own cache makes them (and models 18 and 98 then folded each new cast again).
    A weight written in place is cast again, and every result matches the reference's."""
    dtype = torch.bfloat16
    ref, new = make_pair(key, INIT_ARGS[key], device=device)
    x = make_input((16, INIT_ARGS[key][0]), "rand", device=device)

    def call():  # one request: its own region
        exact = _exact_reference(ref, key, dtype)
        with torch.no_grad():
            with torch.autocast(device, dtype=dtype):
                expected, out = ref(x), new(x)
            expected64 = exact(x.to(dtype).double())
        assert_within_tolerance(out, expected, tolerance_for(dtype), expected64)

    def misses():
        return torch.ops.fusedops.fold_cache_stats()["misses"]

    call()
    before = misses()
    for _ in range(3):
        call()
    assert misses() == before, "a fold made again in a new autocast region"
    with torch.no_grad():
        for model in (ref, new):
            getattr(model, LINEAR[key]).weight.mul_(0.5)
    call()
    assert misses() > before, "the weight's cast not made again after an in-place write"
    before = misses()
    call()
    assert misses() == before


@pytest.mark.parametrize("key", KEYS)
def test_autocast_leaves_float64_alone(key, device):
    """autocast casts no float64 tensor: a float64 model stays float64 throughout."""
    ref, new = make_pair(key, INIT_ARGS[key], device=device, dtype=torch.float64)
    x = make_input((16, INIT_ARGS[key][0]), "randn", dtype=torch.float64, device=device)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        expected = ref(x)
        out = new(x)
    assert out.dtype == expected.dtype == torch.float64
    assert_within_tolerance(out, expected, tolerance_for(torch.float64))


@pytest.mark.parametrize("key", KEYS)
def test_autocast_scripted(key, device):
    """A scripted ModelNew reaches the same Autocast kernels (they are the operator's)."""
    ref, new = make_pair(key, INIT_ARGS[key], device=device)
    new.numerics = "eager"
    scripted = torch.jit.script(new)
    x = make_input((16, INIT_ARGS[key][0]), "rand", device=device)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        expected = ref(x)
        out = scripted(x)
    assert out.dtype == expected.dtype
    with torch.no_grad():
        expected64 = _exact_reference(ref, key, torch.bfloat16)(x.to(torch.bfloat16).double())
    assert_within_tolerance(out, expected, tolerance_for(torch.bfloat16), expected64)
