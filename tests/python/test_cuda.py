"""GPU-only checks (skipped without CUDA): CUDA results against the CPU float64 reference, a
second GPU, TF32 under torch.set_float32_matmul_precision, half precision at default sizes,
and a non-default stream. The device-parametrized tests in the other files also run on CUDA."""
import copy

import pytest
import torch

import fusedops
from fusedops_testing import (
    KEYS, assert_contract, assert_float32, assert_reduced, make_input, make_pair, max_abs,
    max_abs_err, run_trio)
from fusedops.accuracy import assert_within_tolerance, tolerance_for

pytestmark = pytest.mark.cuda

ODD = {"98": (1023, 1000, 7, 2.0), "18": (1000, 1023), "39": (1000, 1023, (1023,)),
       "62": (1023, 1023, 31)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("batch", [1, 3, 257])
@pytest.mark.parametrize("key", KEYS)
def test_cuda_against_cpu_float64_reference(key, batch, dtype):
    ref, new = make_pair(key, ODD[key], device="cuda", dtype=dtype)
    if key == "39" and batch == 1:  # an error in training (test_model39.py): eval mode here
        ref.eval()
        new.eval()
    x = make_input((batch, ODD[key][0]), "randn", dtype=dtype, device="cuda")
    out, expected, expected64_cpu, _ = run_trio(ref, new, x, ref_device="cpu")
    assert expected64_cpu.device.type == "cpu"
    assert out.device.type == "cuda"
    if dtype == torch.float64:
        assert_within_tolerance(out.cpu(), expected64_cpu, tolerance_for(torch.float64))
    else:
        assert_float32(out.cpu(), expected.cpu(), expected64_cpu)


@pytest.mark.parametrize("momentum", [0.1, None], ids=["m0.1", "mNone"])
@pytest.mark.parametrize("batch", [2, 3, 256, 257, 512, 513, 1000, 1024, 1025])
def test_39_training_kernel_tiers(batch, momentum):
    """Model 39 in training with float32 and one scale per column takes the one-read kernel up
    to batch 1024 (4, 8 or 16 rows a thread) and the streaming passes above: each tier, a width
    that leaves a partial block of columns (1000 = 31.25 x 32), rand and randn inputs, three
    steps so the running statistics compound."""
    ref, new = make_pair("39", (64, 1000, (1000,), 1e-5, momentum), device="cuda")
    for step in range(3):
        x = make_input((batch, 64), "rand" if step % 2 else "randn", device="cuda")
        out, expected, expected64, ref64 = run_trio(ref, new, x)
        assert_float32(out, expected, expected64)
        # The statistics carry the GEMM's rounding (column means near zero among entries of a
        # few units): allclose(1e-4, 1e-4) to the float32 model's, and to the float64 one's.
        for name in ("running_mean", "running_var"):
            stat, stat32, stat64 = (getattr(m.bn, name) for m in (new, ref, ref64))
            assert_within_tolerance(stat, stat32, tolerance_for(torch.float32))
            torch.testing.assert_close(stat.double(), stat64, rtol=1e-4, atol=1e-5)
        assert torch.equal(new.bn.num_batches_tracked, ref.bn.num_batches_tracked)


@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("batch", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("key,init_args", [("39", (1024, 1001, (1001,))), ("62", (1024, 1000, 8)),
                                           ("98", (1024, 1001, 7, 2.0))])
def test_skinny_batches(key, init_args, batch, dist):
    """With the float32 GEMM named (FUSEDOPS_FP32_GEMM=ieee: SGEMM, which is also what the fp16
    pairs' skinny route falls back to), up to 4 rows of x run fusedops' own float32 skinny GEMM
    (K a multiple of 4, aligned), 5 rows cuBLAS: each row count, an odd output width (a warp
    left with one row of W), and x as a contiguous view at an odd storage offset (not 16-byte
    aligned: cuBLAS again)."""
    ref, new = make_pair(key, init_args, device="cuda")
    if key == "39" and batch == 1:  # training needs two rows (test_model39.py)
        ref.eval()
        new.eval()
    x = make_input((batch, init_args[0]), dist, device="cuda")
    with fusedops.settings(FUSEDOPS_FP32_GEMM="ieee"):
        if key != "98":  # 98's GEMM is on its pooled weight
            (line,) = fusedops.explain(copy.deepcopy(new), x)
            assert (": skinny (" in line) == (batch <= 4), line
        out, expected, expected64, _ = run_trio(ref, new, x)
        assert_float32(out, expected, expected64)
        storage = torch.empty(batch * init_args[0] + 1, device="cuda")
        x_offset = storage[1:].view(batch, init_args[0]).copy_(x)
        assert x_offset.is_contiguous() and x_offset.data_ptr() % 16 != 0
        with torch.no_grad():
            again = new(x_offset)  # 39 in training: the same batch statistics, the same output
    assert_float32(again, expected, expected64)


@pytest.mark.parametrize("split", [1, 2, 4, 8])
def test_skinny_splits_k_where_few_rows_of_w_would_leave_sms_idle(split):
    """The float32 skinny kernel gives a pair of W's rows 1, 2, 4 or 8 warps splitting K (their
    sums added in warp order), the fewest that make two blocks per SM (ops/cuda/gemm/skinny.cu;
    model 98's pooled weight takes 8): an output width for each, odd (a warp left with one row,
    a partial block), at 1-4 rows of x, against the reference in float32 and float64."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = {1: 32 * sms + 1, 2: 16 * sms + 1, 4: 8 * sms + 1, 8: 4 * sms - 3}[split]
    init_args = (1028, n, (n,))
    ref, new = make_pair("39", init_args, device="cuda")
    ref.eval()
    new.eval()
    ref64 = make_pair("39", init_args, device="cuda", dtype=torch.float64)[0].eval()
    ref64.load_state_dict(ref.state_dict())
    for dist in ("rand", "randn"):
        x = make_input((4, 1028), dist, device="cuda")
        with fusedops.settings(FUSEDOPS_FP32_GEMM="ieee"), torch.no_grad():
            for batch in (1, 2, 3, 4):
                (line,) = fusedops.explain(new, x[:batch])
                assert ": skinny (" in line, line
                assert_float32(new(x[:batch]), ref(x[:batch]), ref64(x[:batch].double()))


@pytest.mark.multi_gpu
@pytest.mark.parametrize("key", KEYS)
def test_second_gpu(key):
    """A model on cuda:1 runs there while cuda:0 is the current device (device guard)."""
    assert torch.cuda.current_device() == 0
    ref, new = make_pair(key, ODD[key], device="cuda:1")
    x = make_input((64, ODD[key][0]), "rand", device="cuda:1")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert out.device == torch.device("cuda:1")
    assert_float32(out, expected, expected64)
    if key == "39":
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, rtol=1e-4, atol=1e-6)
    assert torch.cuda.current_device() == 0


@pytest.mark.multi_gpu
def test_second_gpu_device_mismatch():
    _, new = make_pair("98", (32, 48, 5, 2.0), device="cuda:1")
    with pytest.raises(RuntimeError,
                       match="must be on the same device as x \\(cuda:0\\), got cuda:1"):
        new(torch.rand(4, 32, device="cuda:0"))


@pytest.mark.slow
@pytest.mark.parametrize("key,mode", [("98", "eval"), ("18", "eval"), ("39", "train"),
                                      ("39", "eval"), ("62", "eval")])
def test_tf32_high_then_highest(key, mode):
    """"high" permits TF32, as for PyTorch's matmul: within 1e-2 of the float64 reference
    relative to the output's magnitude. Back at "highest" in the same process (same weights,
    same cached folds), the float32 contract holds again."""
    p = fusedops.get_problem(key)
    ref, new = make_pair(key, p.init_args, device="cuda")
    ref.train(mode == "train")
    new.train(mode == "train")
    x = p.make_input(device="cuda")
    ref64 = copy.deepcopy(ref).double()
    with torch.no_grad():
        expected64 = ref64(x.double())
        torch.set_float32_matmul_precision("high")
        out_high = new(x)
        torch.set_float32_matmul_precision("highest")
        out_highest = new(x)
        expected32 = ref(x)
    err = max_abs_err(out_high, expected64)
    scale = max_abs(expected64)
    assert err <= 1e-2 * scale, f"TF32 error {err:.3e}, max |reference| {scale:.3e}"
    assert_float32(out_highest, expected32, expected64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("key", KEYS)
def test_reduced_precision_default_sizes(key, dtype):
    p = fusedops.get_problem(key)
    ref, new = make_pair(key, p.init_args, device="cuda", dtype=dtype)
    x = p.make_input(dtype=dtype, device="cuda")
    out, expected, expected64, _ = run_trio(ref, new, x)
    assert_reduced(out, expected, expected64)


@pytest.mark.parametrize("key", KEYS)
def test_non_default_stream(key):
    """Kernels run on the current stream: results are right when read after syncing only the
    side stream, and the inputs are produced on that stream."""
    ref, new = make_pair(key, ODD[key], device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = make_input((256, ODD[key][0]), "randn", device="cuda")
        ref64 = copy.deepcopy(ref).double()
        with torch.no_grad():
            out = new(x)
    s.synchronize()
    with torch.no_grad():
        expected = ref(x)
        expected64 = ref64(x.double())
    assert_float32(out, expected, expected64)


@pytest.mark.parametrize("key", KEYS)
def test_cuda_then_cpu_same_model(key):
    """The same module moved between devices: each device's result is right (the fold cache
    keys on the device)."""
    ref, new = make_pair(key, ODD[key], dtype=torch.float64)
    ref.eval()
    new.eval()
    x = make_input((32, ODD[key][0]), "randn", dtype=torch.float64)
    for device in ("cpu", "cuda", "cpu"):
        ref.to(device)
        new.to(device)
        out, expected, expected64, _ = run_trio(ref, new, x.to(device))
        assert_contract(out, expected, expected64)
