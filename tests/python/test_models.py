"""Every ModelNew against its reference model: float64 (tight), float32 (SPEC's contract),
float16/bfloat16 (against the float64 reference of the same weights), torch.rand and
torch.randn inputs, odd sizes, empty batches and SPEC's default sizes."""
import pytest
import torch

import fusedops
from fusedops_testing import (
    KEYS, assert_contract, assert_float32, in_features, make_input, make_pair, run_trio)
from fusedops.accuracy import assert_within_tolerance, tolerance_for

# Odd sizes: widths 1000 and 1023, pool kernels that do not divide the width (the last
# out % k features are dropped), k = 1 and k = out, a negative scale (max turns into min of
# the unscaled values), scalar/(1,)/(1, out) scales, one group and one channel per group,
# group sizes that are not powers of two, and 1-wide layers.
ODD_CASES = {
    "98": [
        ((1023, 1000, 7, 2.0), "in1023-out1000-k7"),     # 142 windows, 6 features dropped
        ((1000, 1023, 16, 2.0), "in1000-out1023-k16"),   # 63 windows, 15 dropped
        ((1000, 1000, 3, 0.5), "in1000-out1000-k3"),     # 333 windows, 1 dropped
        ((1023, 1023, 3, -1.5), "in1023-out1023-k3-negscale"),  # divides; negative scale
        ((1000, 1000, 1, 2.0), "k1"),
        ((1000, 1000, 1000, 2.0), "k-equals-out"),
        ((1, 1, 1, 2.0), "in1-out1-k1"),
        ((17, 5, 2, 3.0), "in17-out5-k2"),
    ],
    "18": [
        ((1000, 1023), "in1000-out1023"),
        ((1023, 1000), "in1023-out1000"),
        ((1, 1), "in1-out1"),
        ((17, 5), "in17-out5"),
    ],
    "39": [
        ((1000, 1023, (1023,)), "in1000-out1023-scale-out"),
        ((1023, 1000, (1000,)), "in1023-out1000-scale-out"),
        ((1023, 1000, (1,)), "scale-1"),
        ((1000, 1023, (1, 1023)), "scale-1xout"),
        ((17, 5, ()), "scale-scalar"),
        ((17, 5, (5,), 1e-3, None), "eps1e-3-momentum-none"),
    ],
    "62": [
        ((1000, 1000, 8), "hidden1000-g8"),
        ((1000, 1000, 1), "g1"),
        ((1000, 1000, 1000), "g-equals-channels"),
        ((1000, 1000, 40), "group-size-25"),
        ((1023, 1023, 31), "hidden1023-g31"),      # 33 channels a group
        ((1023, 1023, 1023), "hidden1023-g1023"),
        ((17, 6, 3, 1e-3, 0.2), "eps1e-3-slope0.2"),
    ],
}

ODD_PARAMS = [pytest.param(key, args, id=f"{key}-{name}")
              for key in KEYS for args, name in ODD_CASES[key]]
BATCHES = [1, 3, 64]
DISTS = ["rand", "randn"]


def _modes(key):
    return ["train", "eval"] if key == "39" else ["train"]


def _check(key, init_args, batch, dtype, dist, device, mode):
    ref, new = make_pair(key, init_args, device=device, dtype=dtype)
    ref.train(mode == "train")
    new.train(mode == "train")
    x = make_input((batch, in_features(init_args)), dist, dtype=dtype, device=device)
    out, expected, expected64, ref64 = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)
    if key == "39" and mode == "train":
        # The training forward also updated the running statistics.
        tol = {torch.float64: 1e-9, torch.float32: 1e-5}.get(dtype, 1e-2)
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, rtol=tol, atol=tol)
        torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, rtol=tol, atol=tol)
        assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)
    return out


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("key,init_args", ODD_PARAMS)
def test_odd_sizes(key, init_args, dtype, batch, dist, device):
    for mode in _modes(key):
        if key == "39" and mode == "train" and batch == 1:
            continue  # an error, as in the reference: test_model39.py
        if key == "62" and batch == 1 and init_args[2] == init_args[1]:
            continue  # one value per group: an error in the reference, test below
        _check(key, init_args, batch, dtype, dist, device, mode)


REDUCED_PARAMS = [
    pytest.param("98", (1023, 1000, 7, 2.0), id="98"),
    pytest.param("18", (1000, 1023), id="18"),
    pytest.param("39", (1000, 1023, (1023,)), id="39"),
    pytest.param("62", (1023, 1023, 31), id="62"),
]


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("key,init_args", REDUCED_PARAMS)
def test_reduced_precision(key, init_args, dtype, dist, device):
    # .half()/.bfloat16() models: compared with the float64 reference of the same rounded
    # weights and inputs, and with PyTorch's own computation in that dtype.
    for mode in _modes(key):
        _check(key, init_args, 64, dtype, dist, device, mode)


@pytest.mark.parametrize("hidden", [6, 1000])
def test_model62_one_value_per_group_is_rejected(hidden, device):
    """GroupNorm with one channel per group on a batch of 1 normalizes single values: the
    reference raises ("Expected more than 1 value per channel when training"); SPEC asks the
    drop-in to reject what the reference rejects. Batch 2 is fine for both."""
    ref, new = make_pair("62", (8, hidden, hidden), device=device)
    x = make_input((1, 8), "rand", device=device)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        ref(x)
    with pytest.raises((RuntimeError, ValueError)):
        new(x)
    x2 = make_input((2, 8), "rand", device=device)
    out, expected, expected64, _ = run_trio(ref, new, x2)
    assert_float32(out, expected, expected64)


SMALL_ARGS = {"98": (32, 48, 5, 2.0), "18": (32, 48), "39": (32, 48, (48,)), "62": (32, 48, 6)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("key", KEYS)
def test_empty_batch(key, dtype, device):
    for mode in _modes(key):
        ref, new = make_pair(key, SMALL_ARGS[key], device=device, dtype=dtype)
        ref.train(mode == "train")
        new.train(mode == "train")
        x = torch.empty(0, SMALL_ARGS[key][0], dtype=dtype, device=device)
        with torch.no_grad():
            try:
                expected = ref(x)
            except Exception:
                with pytest.raises(RuntimeError):  # rejected by the reference: rejected too
                    new(x)
                continue
            out = new(x)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        assert out.device == expected.device
        if key == "39":
            # Whatever the reference does with the statistics of an empty batch, do the same.
            torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, equal_nan=True)
            torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, equal_nan=True)
            assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)


@pytest.mark.parametrize("key", KEYS)
def test_problem_inputs_small(key, device):
    """The problems table's make_input (rand, as in the benchmark) at a small batch."""
    p = fusedops.get_problem(key)
    args = SMALL_ARGS[key]
    ref, new = make_pair(key, args, device=device)
    x = p.make_input(batch_size=16, init_args=args, device=device)
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_float32(out, expected, expected64)


# SPEC default sizes (B = 1024, 8192 x 8192 weights). On CPU these are heavy, so they run once
# per model (float32, rand); on CUDA with both input distributions.
@pytest.mark.slow
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("key", KEYS)
def test_default_sizes(key, dist, device):
    if device == "cpu" and dist != "rand":
        pytest.skip("default sizes run once per model on CPU (rand, float32)")
    p = fusedops.get_problem(key)
    ref, new = make_pair(key, p.init_args, device=device)
    x = p.make_input(dist=dist, device=device)
    out, expected, expected64, ref64 = run_trio(ref, new, x)
    assert_float32(out, expected, expected64)
    if key == "39":
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, rtol=1e-5, atol=1e-5)
        assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)
        # and the eval-mode (folded) path at the same size
        for m in (ref, new, ref64):
            m.eval()
        with torch.no_grad():
            out, expected = new(x), ref(x)
            expected64 = ref64(x.double())
        assert_float32(out, expected, expected64)


@pytest.mark.parametrize("key", KEYS)
def test_noncontiguous_input(key, device):
    """A column-major x, a column slice (row stride > width) and a strided column view: the
    reference accepts them all."""
    args = {"98": (1000, 1023, 16, 2.0), "18": (1000, 1023), "39": (1000, 1023, (1023,)),
            "62": (1000, 1000, 8)}[key]
    ref, new = make_pair(key, args, device=device, dtype=torch.float64)
    n_in = in_features(args)
    base = make_input((64, n_in), "randn", dtype=torch.float64, device=device)
    wide = make_input((64, 2 * n_in + 5), "randn", dtype=torch.float64, device=device)
    views = {
        "column-major": base.t().contiguous().t(),
        "column-slice": wide[:, 5:5 + n_in],
        "strided-columns": wide[:, 1:2 * n_in:2],
        "strided-rows": make_input((128, n_in), "randn", dtype=torch.float64, device=device)[::2],
    }
    for name, x in views.items():
        assert not x.is_contiguous() or name == "strided-rows"
        out, expected, expected64, _ = run_trio(ref, new, x)
        assert_contract(out, expected, expected64)
        # the same numbers as the contiguous copy, too
        out_c, _, _, _ = run_trio(ref, new, x.contiguous())
        torch.testing.assert_close(out, out_c, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("key", KEYS)
def test_grad_mode_does_not_change_result(key, device):
    """no_grad, autograd on (parameters require grad) and inference_mode give the same values,
    with the reference's shape, dtype and device in train and eval mode."""
    ref, new = make_pair(key, SMALL_ARGS[key], device=device, dtype=torch.float64)
    x = make_input((8, SMALL_ARGS[key][0]), "randn", dtype=torch.float64, device=device)
    for train in (True, False):
        ref.train(train)
        new.train(train)
        outs = []
        for ctx in (torch.no_grad, torch.enable_grad, torch.inference_mode):
            if key == "39" and train:
                # each training forward moves the running statistics: start each one equal
                state = {k: v.clone() for k, v in new.state_dict().items()}
            with ctx():
                out = new(x)
                expected = ref(x)
            assert out.shape == expected.shape and out.dtype == expected.dtype
            assert out.device == expected.device
            assert_within_tolerance(out.detach(), expected.detach(), tolerance_for(torch.float64))
            outs.append(out.detach().clone())
            if key == "39" and train:
                with torch.no_grad():
                    new.load_state_dict(state)
                    ref.load_state_dict(state)
        exact = 0.0 if device == "cpu" else 1e-12  # CUDA kernels may reduce with atomics
        for o in outs[1:]:
            torch.testing.assert_close(o, outs[0], rtol=exact, atol=exact)
