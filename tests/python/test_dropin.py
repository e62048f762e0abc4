"""The drop-in contract: same constructor and forward signatures, the same parameters and
buffers (names, shapes, order of random draws), state_dict loading both ways with strict=True,
and the reference's output shape, dtype and device in train and eval mode."""
import inspect

import pytest
import torch

import fusedops
from fusedops_testing import KEYS, assert_same_state, classes, make_input, make_pair
from fusedops.accuracy import assert_within_tolerance, tolerance_for

SMALL_ARGS = {"98": (32, 48, 5, 2.0), "18": (32, 48), "39": (32, 48, (48,)), "62": (32, 48, 6)}


@pytest.mark.parametrize("key", KEYS)
def test_signatures_match(key):
    """The reference's constructor parameters, names, kinds and defaults, then one keyword-only
    addition with a default (numerics, docs/MODELS.md): every call the reference's constructor
    accepts means the same to ModelNew's."""
    Ref, New = classes(key)
    ref_params = list(inspect.signature(Ref.__init__).parameters.values())
    new_params = list(inspect.signature(New.__init__).parameters.values())
    assert new_params[:len(ref_params)] == ref_params
    assert new_params[len(ref_params):] == [inspect.Parameter(
        "numerics", inspect.Parameter.KEYWORD_ONLY, default="accurate")]
    assert inspect.signature(New.forward) == inspect.signature(Ref.forward)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("sizes", ["small", "default"])
def test_same_seed_same_tensors(key, sizes):
    """After torch.manual_seed(s), Model(*a) and ModelNew(*a) hold identical tensors (same
    names, order, shapes, dtypes, values) and leave the generator in the same state."""
    Ref, New = classes(key)
    args = SMALL_ARGS[key] if sizes == "small" else fusedops.get_init_inputs(key)
    torch.manual_seed(1234)
    ref = Ref(*args)
    after_ref = torch.rand(4)
    torch.manual_seed(1234)
    new = New(*args)
    after_new = torch.rand(4)
    assert [n for n, _ in new.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in new.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert_same_state(new, ref)
    assert torch.equal(after_new, after_ref), "a different number of random draws"


@pytest.mark.parametrize("key", KEYS)
def test_state_dict_loads_both_ways(key, device):
    Ref, New = classes(key)
    args = SMALL_ARGS[key]
    ref, new = make_pair(key, args, device=device, dtype=torch.float64)
    # ModelNew <- reference (strict) and reference <- ModelNew (strict), fresh modules each.
    fresh_new = New(*args).to(device, torch.float64)
    result = fresh_new.load_state_dict(ref.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert_same_state(fresh_new, ref)
    fresh_ref = Ref(*args).to(device, torch.float64)
    result = fresh_ref.load_state_dict(new.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert_same_state(fresh_ref, new)
    x = make_input((8, args[0]), "randn", dtype=torch.float64, device=device)
    ref.eval()
    fresh_new.eval()
    with torch.no_grad():
        assert_within_tolerance(fresh_new(x), ref(x), tolerance_for(torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("key", KEYS)
def test_output_shape_dtype_device(key, dtype, device):
    ref, new = make_pair(key, SMALL_ARGS[key], device=device, dtype=dtype)
    for train in (True, False):
        ref.train(train)
        new.train(train)
        for batch in (2, 5):
            x = make_input((batch, SMALL_ARGS[key][0]), "rand", dtype=dtype, device=device)
            with torch.no_grad():
                out, expected = new(x), ref(x)
            assert out.shape == expected.shape
            assert out.dtype == expected.dtype
            assert out.device == expected.device
            assert out.is_contiguous() or out.numel() <= 1


@pytest.mark.parametrize("key", KEYS)
def test_submodules_and_attributes(key):
    """Code that reaches into the model (m.matmul.weight, m.bn.momentum, ...) keeps working."""
    Ref, New = classes(key)
    args = SMALL_ARGS[key]
    ref, new = Ref(*args), New(*args)
    assert [n for n, _ in new.named_children()] == [n for n, _ in ref.named_children()]
    for (n, a), (_, b) in zip(ref.named_children(), new.named_children()):
        assert type(a) is type(b), n
        assert a.extra_repr() == b.extra_repr(), n
    if key == "98":
        assert new.scale_factor == ref.scale_factor
