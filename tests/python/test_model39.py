"""Model 39 (Gemm_Scale_BatchNorm): training and eval mode, the running statistics after several
steps (exponential and cumulative momentum), scale shapes, the batch-1 training error."""
import copy

import pytest
import torch

from fusedops import Model39, ModelNew39
from fusedops_testing import assert_contract, make_input, make_pair, run_trio
from fusedops.accuracy import assert_within_tolerance, tolerance_for

STAT_TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-6)}


def assert_same_stats(new, ref, dtype):
    tol = STAT_TOL[dtype]
    torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, **tol)
    torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, **tol)
    assert new.bn.num_batches_tracked.dtype == torch.int64
    assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)


@pytest.mark.parametrize("momentum", [0.1, None, 0.5, 0.0], ids=["m0.1", "mNone", "m0.5", "m0"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_training_steps_then_eval(momentum, dtype, device):
    args = (96, 80, (80,), 1e-5, momentum)
    ref, new = make_pair("39", args, device=device, dtype=dtype)
    assert new.training and ref.training  # a fresh module trains, as the benchmark runs it
    batches = [64, 3, 17, 2, 64, 33]
    for step, b in enumerate(batches):
        x = make_input((b, 96), "randn" if step % 2 else "rand", dtype=dtype, device=device)
        out, expected, expected64, _ = run_trio(ref, new, x)
        assert_contract(out, expected, expected64)
        assert_same_stats(new, ref, dtype)
    assert int(new.bn.num_batches_tracked) == len(batches)
    # eval after train: the running statistics the training steps produced are used
    ref.eval()
    new.eval()
    before = copy.deepcopy(new.state_dict())
    x = make_input((64, 96), "randn", dtype=dtype, device=device)
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)
    for k, v in new.state_dict().items():  # eval does not touch the statistics
        assert torch.equal(v, before[k]), k
    # and back to training
    ref.train()
    new.train()
    x = make_input((16, 96), "rand", dtype=dtype, device=device)
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)
    assert_same_stats(new, ref, dtype)


def test_running_stats_follow_with_autograd_on(device):
    """The statistics update does not depend on grad mode."""
    ref, new = make_pair("39", (40, 24, (24,)), device=device, dtype=torch.float64)
    for _ in range(3):
        x = make_input((10, 40), "randn", dtype=torch.float64, device=device)
        out = new(x)
        expected = ref(x)
        assert_within_tolerance(out.detach(), expected.detach(), tolerance_for(torch.float64))
    assert_same_stats(new, ref, torch.float64)


@pytest.mark.parametrize("mode", ["train", "eval"])
# (64, 48) and (64, 1): a scale per row (the batch is 64), which the passes after the GEMM
# read row by row where the others read one value a column once.
@pytest.mark.parametrize("scale_shape", [(48,), (1,), (1, 48), (), (64, 48), (64, 1)],
                         ids=["out", "one", "1xout", "scalar", "batchxout", "batchx1"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_scale_shapes(scale_shape, mode, dtype, device):
    ref, new = make_pair("39", (40, 48, scale_shape), device=device, dtype=dtype)
    assert new.scale.shape == torch.Size(scale_shape)
    ref.train(mode == "train")
    new.train(mode == "train")
    x = make_input((64, 40), "randn", dtype=dtype, device=device)
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)
    if mode == "train":
        assert_same_stats(new, ref, dtype)


# The same per-row scales under numerics="eager" in float16/bfloat16 (the passes' 8-column,
# half-precision y), against the reference in its dtype and in float64.
@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("scale_shape", [(64, 48), (64, 1)], ids=["batchxout", "batchx1"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_eager_scale_per_row(scale_shape, mode, dtype):
    ref, new = make_pair("39", (40, 48, scale_shape), device="cuda", dtype=dtype)
    new.numerics = "eager"
    ref.train(mode == "train")
    new.train(mode == "train")
    x = make_input((64, 40), "randn", dtype=dtype, device="cuda")
    out, expected, _, _ = run_trio(ref, new, x)
    assert_within_tolerance(out, expected, tolerance_for(dtype))
    tol = tolerance_for(dtype)
    torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, atol=tol.atol,
                               rtol=tol.rtol)
    torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, atol=tol.atol,
                               rtol=tol.rtol)


def test_negative_and_zero_scale_entries(device):
    """A negative scale flips a feature's sign (its batch mean and running mean flip too); a
    zero scale makes the feature constant (variance 0, normalized to beta)."""
    ref, new = make_pair("39", (40, 48, (48,)), device=device, dtype=torch.float64)
    with torch.no_grad():
        ref.scale[::3] = -ref.scale[::3].abs()
        ref.scale[1] = 0.0
        new.load_state_dict(ref.state_dict())
    for mode in ("train", "eval"):
        ref.train(mode == "train")
        new.train(mode == "train")
        x = make_input((32, 40), "randn", dtype=torch.float64, device=device)
        out, expected, expected64, _ = run_trio(ref, new, x)
        assert_contract(out, expected, expected64)
    assert_same_stats(new, ref, torch.float64)


def test_batch1_training_raises(device):
    ref, new = make_pair("39", (40, 48, (48,)), device=device)
    x = make_input((1, 40), "rand", device=device)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        ref(x)  # the reference rejects it too
    mean, var = new.bn.running_mean.clone(), new.bn.running_var.clone()
    with pytest.raises(RuntimeError,
                       match=r"x must have more than 1 row in training mode .*got batch size 1"):
        new(x)
    # the statistics are not half-updated by a rejected call
    assert torch.equal(new.bn.running_mean, mean)
    assert torch.equal(new.bn.running_var, var)


def test_batch1_eval_is_fine(device):
    ref, new = make_pair("39", (40, 48, (48,)), device=device, dtype=torch.float64)
    ref.eval()
    new.eval()
    x = make_input((1, 40), "randn", dtype=torch.float64, device=device)
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)


def test_constructor_defaults_match_reference():
    torch.manual_seed(3)
    ref = Model39(8, 6, (6,))
    torch.manual_seed(3)
    new = ModelNew39(8, 6, (6,))
    assert new.bn.eps == ref.bn.eps == 1e-5
    assert new.bn.momentum == ref.bn.momentum == 0.1
    torch.manual_seed(3)
    new = ModelNew39(8, 6, (6,), momentum=None)
    assert new.bn.momentum is None


@pytest.mark.cuda
@pytest.mark.slow
def test_public_benchmark_size_cuda():
    """The public benchmark runs model 39 at B = 16384, in = out = 4096 (docs/MODELS.md)."""
    from fusedops.problems import BENCH_39_LARGE
    args, b = BENCH_39_LARGE["init_args"], BENCH_39_LARGE["batch_size"]
    ref, new = make_pair("39", args, device="cuda")
    x = make_input((b, args[0]), "rand", device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)
    assert_same_stats(new, ref, torch.float32)


def test_strided_running_statistics(device):
    """Running statistics that are views with a stride (e.g. slices of one shared buffer) are
    read and updated in place, as BatchNorm does."""
    ref, new = make_pair("39", (40, 48, (48,)), device=device, dtype=torch.float64)
    storage = torch.zeros(2, 2 * 48, dtype=torch.float64, device=device)
    mean_view, var_view = storage[0, ::2], storage[1, 1::2]
    mean_view.copy_(ref.bn.running_mean)
    var_view.copy_(ref.bn.running_var)
    new.bn.running_mean = mean_view
    new.bn.running_var = var_view
    for mode in ("train", "train", "eval"):
        ref.train(mode == "train")
        new.train(mode == "train")
        x = make_input((16, 40), "randn", dtype=torch.float64, device=device)
        out, expected, expected64, _ = run_trio(ref, new, x)
        assert_contract(out, expected, expected64)
        assert_same_stats(new, ref, torch.float64)
    # the update landed in the shared buffer, not in a private copy
    torch.testing.assert_close(storage[0, ::2], ref.bn.running_mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(storage[1, 1::2], ref.bn.running_var, rtol=1e-10, atol=1e-12)
