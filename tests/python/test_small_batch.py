"""Small-batch serving (issue 25): every batch size from 1 to 256, in each dtype, for each model
in eval mode as a server runs it, against the reference in the model's dtype and in float64.
Below the planner's crossover (16 rows; float32 64 where N fills the GPU, float16/bfloat16
without a fused epilogue 32 where N is narrow) the weight-streaming tensor-core kernel runs
(float32: `skinny-3xfp16`, on W's and x's fp16 pairs, after the float32 `skinny` kernel at 1-2
rows, 1-4 where N is narrow; float16/bfloat16: `skinny-half`), with the operator's epilogue
inside where it fits (`-fused`); above it the other routes. Model 98's row reduction takes
the kernels' K-slice partials where its pooled width is a multiple of 4 (`98r`): the same fused
routes up to 128 rows, x's rows in chunks. Sizes are odd where the kernels
have edges: out_features not a multiple of the 16-row tile, in_features a multiple of 8 that
leaves a partial 256-wide round, and in_features not a multiple of 8 (no skinny-half:
cuBLAS)."""
import copy
import os
import subprocess
import sys

import pytest
import torch

import fusedops
from fusedops.accuracy import assert_within_tolerance, tolerance_for
from fusedops_testing import assert_contract, make_input, make_pair

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.float16, id="f16"),
          pytest.param(torch.bfloat16, id="bf16")]
# in_features 1032 = 4 x 256 + 8; out_features 1000 = 62 x 16 + 8 (model 98: 250 pooled). Model
# 62 with groups of 125 channels (the GEMM, then its pass over y), and of 16, 32 and 128
# channels (one group a block of the fused kernel: skinny-half-fused). Model 39 runs in eval mode
# here, as served: its whole chain in the same kernel.
SIZES = {"18": (1032, 1000), "39": (1032, 1000, (1000,)), "62": (1032, 1000, 8),
         "62g16": (1032, 1008, 63), "62g32": (1032, 1024, 32), "62g128": (1032, 1024, 8),
         "98": (1032, 1000, 4, 2.0), "98r": (1032, 1000, 5, 2.0)}
HALF_ROUTE = {"39": "skinny-half-fused", "62g16": "skinny-half-fused", "62g32": "skinny-half-fused",
              "62g128": "skinny-half-fused", "98r": "skinny-half-fused"}
# float32's block holds three sets of accumulators: groups of 128 channels run unfused.
PAIR_ROUTE = {"39": "skinny-3xfp16-fused", "62g16": "skinny-3xfp16-fused",
              "62g32": "skinny-3xfp16-fused", "98r": "skinny-3xfp16-fused"}
# A row reduction on the kernels' K-slice partials (planner.h's kMaxSkinnyPartialRows).
PARTIAL_ROWS = {"98r": 128}
ODD_K = {"39": (1001, 1000, (1000,)), "62": (1001, 1000, 8), "98": (1001, 1000, 4, 2.0)}
MAX_ROWS = 256
LINEAR = {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}


def _run_batches(case, init_args, dtype, dist, batches):
    key = case[:2]
    ref, new = make_pair(key, init_args, device="cuda", dtype=dtype)
    ref.eval()
    new.eval()
    ref64 = make_pair(key, init_args, device="cuda", dtype=torch.float64)[0].eval()
    ref64.load_state_dict(ref.state_dict())
    x = make_input((MAX_ROWS, init_args[0]), dist, dtype=dtype, device="cuda")
    with torch.no_grad():
        expected64 = ref64(x.double())
        for b in batches:
            xb = x[:b]
            out, expected = new(xb), ref(xb)
            try:
                assert_contract(out, expected, expected64[:b])
            except AssertionError as e:
                raise AssertionError(f"batch {b}: {e}") from None
    return new, x


@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SIZES))
def test_every_batch_size_matches_the_reference(case, dtype, dist):
    new, x = _run_batches(case, SIZES[case], dtype, dist, range(1, MAX_ROWS + 1))
    if case == "18" or (case == "98" and dtype == torch.float32):
        return  # 18's GEMM folds away (test_routes.py); 98's float32 one is on its pooled weight
    half = dtype != torch.float32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    narrow = SIZES[case][1] < 32 * sms  # these widths: W narrow
    # float16/bfloat16 without a fused epilogue: 32 rows where W is narrow (planner.cpp).
    limit = PARTIAL_ROWS.get(case, 32 if half and narrow and case not in HALF_ROUTE else 16)
    name = HALF_ROUTE.get(case, "skinny-half") if half else PAIR_ROUTE.get(case, "skinny-3xfp16")
    # float32's one-launch skinny kernel first (planner.cpp): at 1-2 rows, and at 3-4 where N is
    # narrow (the kernel splits K).
    skinny_rows = 4 if narrow else 2
    for b in (1, 2, 3, 4, 5, limit - 1, limit, limit + 1, 64, MAX_ROWS):
        (line,) = fusedops.explain(new, x[:b])
        if not half and b <= skinny_rows:
            assert ": skinny (" in line, line
            continue
        assert (f": {name} (" in line) == (b <= limit), line


# in_features that leave part of a warp's 32-wide K step past the end (80 = 2 x 32 + 16,
# 264 = 8 x 32 + 8) with few output rows (the kernel's widest blocks, 32 warps): the skinny-half
# kernel once ran its warp-wide MMAs on part of a warp there and hung the GPU (found by the
# sanitizer workload). In a child process with a time limit, so that a hang fails this test
# instead of stopping the suite.
PARTIAL_STEP = {"62": (80, 51, 3), "62g16": (80, 48, 3), "39": (264, 50, (50,)),
                "98": (264, 50, 5, 2.0)}
PARTIAL_STEP_CHILD = """
import sys, torch
from fusedops_testing import assert_contract, make_input, make_pair
key, init_args = sys.argv[1], eval(sys.argv[2])
torch.manual_seed(0)
for dtype in (torch.float16, torch.bfloat16):
    ref, new = make_pair(key[:2], init_args, device="cuda", dtype=dtype)
    ref64 = make_pair(key[:2], init_args, device="cuda", dtype=torch.float64)[0]
    ref64.load_state_dict(ref.state_dict())
    for model in (ref, new, ref64):
        model.eval()
    x = make_input((16, init_args[0]), "randn", dtype=dtype, device="cuda")
    with torch.no_grad():
        for b in range(1, 17):
            assert_contract(new(x[:b]), ref(x[:b]), ref64(x[:b].double()))
    torch.cuda.synchronize()
print("ok")
"""


@pytest.mark.parametrize("case", list(PARTIAL_STEP))
def test_skinny_half_with_a_partial_warp_step(case):
    done = subprocess.run([sys.executable, "-c", PARTIAL_STEP_CHILD, case,
                           repr(PARTIAL_STEP[case])],
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("key", ["39", "62", "98"])
def test_in_features_not_a_multiple_of_8_takes_cublas(key, dtype):
    new, x = _run_batches(key, ODD_K[key], dtype, "randn", (1, 5, 16))
    (line,) = fusedops.explain(new, x[:1])
    assert ": cublas-half (" in line, line


@pytest.mark.parametrize("key", ["39", "62", "98"])
def test_float32_pairs_take_any_in_features(key):
    """The float32 form pads K itself (the 3xFP16 engine's split): in_features 1001 too."""
    new, x = _run_batches(key, ODD_K[key], torch.float32, "randn", (1, 5, 16, 17))
    if key != "98":  # 98's GEMM is on its pooled weight
        (line,) = fusedops.explain(new, x[:5])
        assert ": skinny-3xfp16" in line, line


def _wide_case(case):
    """A width just past the one that gives half the SMs a 64-row block (N >= 32 SMs; not a
    multiple of 64: a partial last block) for 39 in eval and 62 with groups of 16 and 32
    (several groups a block) and of 64 (unfused)."""
    n = 32 * torch.cuda.get_device_properties(0).multi_processor_count
    return {"39": (264, n + 8, (n + 8,)), "62g16": (264, n + 16, (n + 16) // 16),
            "62g32": (264, n + 32, (n + 32) // 32), "62": (264, n + 64, (n + 64) // 64)}[case]


@pytest.mark.parametrize("dist", ["rand", "randn"])
@pytest.mark.parametrize("case", ["39", "62g16", "62g32", "62"])
def test_float32_pairs_up_to_64_rows_where_n_fills_the_gpu(case, dist):
    """17-64 rows run 64-row blocks of W where N gives half the SMs one (N >= 32 SMs), their
    loads staged in shared memory; 33-64 rows on two chunks of x's rows (a partial second chunk
    at 33-63), each block writing its chunk's rows of the output."""
    new, x = _run_batches(case, _wide_case(case), torch.float32, dist,
                          (17, 24, 31, 32, 33, 40, 47, 63, 64, 65))
    name = PAIR_ROUTE.get(case, "skinny-3xfp16")
    for b in (17, 32, 33, 64, 65):
        (line,) = fusedops.explain(new, x[:b])
        assert (f": {name} (" in line) == (b <= 64), line


@pytest.mark.parametrize("case", ["39", "62"])
@pytest.mark.parametrize("dist", ["rand", "randn"])
def test_float32_pairs_at_33_to_64_rows_at_the_default_sizes(case, dist):
    """The SPEC's sizes (8192 x 8192) at 33-64 rows: the skinny kernel on two chunks of x, the
    epilogue inside (39 in eval, 62), against the reference in float32 and float64."""
    init_args = {"39": (8192, 8192, (8192,)), "62": (8192, 8192, 512)}[case]
    new, x = _run_batches(case, init_args, torch.float32, dist, (33, 48, 64))
    for b in (33, 64):
        (line,) = fusedops.explain(new, x[:b])
        assert ": skinny-3xfp16-fused (" in line, line


@pytest.mark.parametrize("case", ["39", "62g16"])
def test_tf32_allowed_from_9_rows_runs_tf32s_gemm(case):
    """With TF32 allowed, 9 rows and more run TF32's own GEMM (ahead of the three products'
    kernel there: planner.cpp), 3-8 the exact skinny kernel; within TF32's tolerance of the
    float64 reference."""
    init_args = _wide_case(case)
    ref, new = make_pair(case[:2], init_args, device="cuda")
    ref.eval()
    new.eval()
    ref64 = make_pair(case[:2], init_args, device="cuda", dtype=torch.float64)[0].eval()
    ref64.load_state_dict(ref.state_dict())
    x = make_input((40, init_args[0]), "randn", device="cuda")
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        with torch.no_grad():
            for b, route in ((8, PAIR_ROUTE[case]), (9, "tf32"), (17, "tf32"), (40, "tf32")):
                (line,) = fusedops.explain(new, x[:b])
                assert f": {route} (" in line, line
                out, expected64 = new(x[:b]), ref64(x[:b].double())
                err = (out.double() - expected64).abs().max().item()
                assert err <= 1e-2 * expected64.abs().max().item(), (b, err)
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved


@pytest.mark.parametrize("case", ["39", "62g16"])
def test_float32_pairs_recompute_guarded_rows_in_the_second_chunk(case):
    """Guarded rows of x (inf; a scale below float32's normal range) in the second chunk of 32
    rows (and one in the first) are recomputed exactly in the block of their chunk; a zero row
    beside them."""
    key = case[:2]
    init_args = _wide_case(case)
    ref, new = make_pair(key, init_args, device="cuda")
    ref.eval()
    new.eval()
    x = make_input((64, init_args[0]), "randn", device="cuda")
    x[3, 7] = float("inf")
    x[40, 3] = float("inf")
    x[45] *= 2.0 ** -140
    x[50] = 0.0
    with torch.no_grad():
        (line,) = fusedops.explain(new, x)
        assert ": skinny-3xfp16-fused (" in line, line
        for b in (46, 64):
            out, expected = new(x[:b]), ref(x[:b])
            torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("case", ["39", "62g16", "62", "98r"])
def test_float32_pairs_recompute_guarded_rows_in_the_kernel(case):
    """Rows the split cannot carry as fp16 pairs (inf, a row spanning more than 2^30, a scale
    leaving float32's normal range) are recomputed exactly inside the kernel, before the fused
    epilogue (98's row reduction: by the reduction, from its K-slice partials); a zero row
    beside them. Against the reference, NaN where it has NaN."""
    key = case[:2]
    ref, new = make_pair(key, SIZES[case], device="cuda")
    ref.eval()
    new.eval()
    x = make_input((16, SIZES[case][0]), "randn", device="cuda")
    x[1, 3] = float("inf")
    x[2, :500] *= 2.0 ** 20
    x[2, 500:] *= 2.0 ** -20
    x[3] *= 2.0 ** -140
    x[4] = 0.0
    with torch.no_grad():
        (line,) = fusedops.explain(new, x)
        assert ": skinny-3xfp16" in line, line
        for b in (5, 16):
            out, expected = new(x[:b]), ref(x[:b])
            torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                    reason="the 3xFP16 engine needs sm_90")
@pytest.mark.parametrize("case", ["39", "62"])
def test_float32_from_65_rows_runs_the_3xfp16_engine_where_the_fold_is_cached(case):
    """65-127 rows of float32 run the 3xFP16 engine where W's fold outlives the call (eval, no
    gradients: planner.cpp), SGEMM at 64 rows and where the fold would be made per call
    (gradients to the weights); 2^30 FLOP and more (65 x 4104 x 2056 with 2 x 65 x 4104 x 2056
    = 1.1e9; in_features not a multiple of the 64-wide K step, out_features of a partial tile)."""
    init_args = {"39": (2056, 4104, (4104,)), "62": (2056, 4104, 4104 // 8)}[case]
    new, x = _run_batches(case, init_args, torch.float32, "randn", (64, 65, 100, 127))
    # (33 output tiles of the promoted GEMM: the engine splits K, a route of its own name.)
    for b, route in ((64, "sgemm"), (65, "3xfp16-splitk"), (127, "3xfp16-splitk")):
        (line,) = fusedops.explain(new, x[:b])
        assert f": {route} (" in line, line
    # With gradients to the weights (fusedops.explain runs under no_grad: recorded directly).
    ref = make_pair(case, init_args, device="cuda")[0]
    ref.load_state_dict(new.state_dict())
    torch.ops.fusedops.record_routes(True)
    try:
        out = new(x[:100])
    finally:
        torch.ops.fusedops.record_routes(False)
    (line,) = torch.ops.fusedops.routes_taken()
    assert ": sgemm (" in line, line
    ref64 = make_pair(case, init_args, device="cuda", dtype=torch.float64)[0]
    ref64.load_state_dict(ref.state_dict())
    with torch.no_grad():
        assert_contract(out.detach(), ref.eval()(x[:100]), ref64.eval()(x[:100].double()))


@pytest.mark.parametrize("case", ["39", "62g16", "98r"])
@pytest.mark.parametrize("batch", [2, 9])
def test_float32_pairs_fall_back_where_the_weight_is_refused(case, batch):
    """A weight the 3xFP16 range check refuses (a row far below the others: its fp16 pair could
    not carry it) runs the plan's fallback: the float32 skinny kernel at 2 rows, SGEMM at 9,
    then the operator's pass."""
    key = case[:2]
    ref, new = make_pair(key, SIZES[case], device="cuda")
    with torch.no_grad():
        ref.get_submodule(LINEAR[key]).weight[5] *= 2.0 ** -40
    new.load_state_dict(ref.state_dict())
    ref.eval()
    new.eval()
    ref64 = make_pair(key, SIZES[case], device="cuda", dtype=torch.float64)[0].eval()
    ref64.load_state_dict(ref.state_dict())
    x = make_input((batch, SIZES[case][0]), "randn", device="cuda")
    with torch.no_grad():
        assert_contract(new(x), ref(x), ref64(x.double()))


@pytest.mark.parametrize("case", ["62", "62g16", "98r"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32],
                         ids=["f16", "bf16", "f32"])
def test_skinny_half_deterministic_and_on_a_side_stream(dtype, case):
    """No atomics: the warps' partial sums (and 98's K-slice partials) add in a fixed order, so
    repeated calls and a call on another stream give the same bits; 98 also at 100 rows (x's
    rows in chunks)."""
    _, new = make_pair(case[:2], SIZES[case], device="cuda", dtype=dtype)
    new.eval()
    x = make_input((100 if case == "98r" else 9, SIZES[case][0]), "randn", dtype=dtype,
                   device="cuda")
    with torch.no_grad():
        first = new(x)
        again = new(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = new(x)
        torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(first, again) and torch.equal(first, on_side)


def _kernels_of_one_call(new, ref, ref64, x):
    """The CUDA kernels one no_grad call of `new` runs, its output checked against the reference
    in x's dtype and in float64."""
    with torch.no_grad():
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = new(x)
            torch.cuda.synchronize()
        assert_contract(out, ref(x), ref64(x.double()))
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("init_args", [SIZES["98r"], (8192, 8192, 16, 2.0)], ids=["odd", "default"])
@pytest.mark.parametrize("dtype,batch", [(d, b) for d in (torch.float16, torch.bfloat16)
                                         for b in (1, 8, 40, 100)] +
                         [(torch.float32, b) for b in (8, 40, 100)])
def test_98_at_few_rows_reads_its_partials_in_the_same_launch(dtype, batch, init_args):
    """Model 98 on the skinny fused routes (float32 from 5 rows, below which its float32 skinny
    kernel runs) is one launch of the weight-streaming kernel: its blocks read back the grid's
    K-slice partials after a grid-wide barrier (issue 38: a second kernel cost a launch on the
    host and a gap on the GPU), with the contract kept. In float32 the split of x before it lists
    no rows (the reader finds a guarded row by its scale), so no memset zeroes a count."""
    ref, new = make_pair("98", init_args, device="cuda", dtype=dtype)
    ref.eval()
    new.eval()
    ref64 = make_pair("98", init_args, device="cuda", dtype=torch.float64)[0].eval()
    ref64.load_state_dict(ref.state_dict())
    x = make_input((batch, init_args[0]), "randn", dtype=dtype, device="cuda")
    route = fusedops.explain(new, x)[0]
    assert "skinny-half-fused" in route or "skinny-3xfp16-fused" in route, route
    kernels = _kernels_of_one_call(new, ref, ref64, x)
    assert sum("gemv_half_kernel" in k for k in kernels) == 1, kernels
    assert not any("gelu_scale_max_partials_kernel" in k or "gelu_scale_max_kernel" in k
                   for k in kernels), kernels
    assert not any("memset" in k.lower() for k in kernels), kernels


@pytest.mark.parametrize("init_args", [SIZES["39"], ODD_K["39"], (8192, 8192, (8192,))],
                         ids=["odd", "odd_k", "default"])
@pytest.mark.parametrize("numerics", ["accurate", "eager"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [40, 200])
def test_39_in_eval_mode_normalizes_in_one_pass_after_the_gemm(batch, dtype, numerics, init_args):
    """Model 39 served (eval mode) above the fused few-row routes: the GEMM, then one pass that
    takes each column's (center, multiplier) from the running statistics itself (issue 38: a
    finish kernel before it cost a launch and two allocations a call), with the contract kept
    and the running statistics untouched."""
    if numerics == "eager" and dtype == torch.float32:
        pytest.skip("numerics='eager' is the half-precision mode")
    ref, new = make_pair("39", init_args, device="cuda", dtype=dtype)  # running stats random
    new.numerics = numerics
    ref64 = make_pair("39", init_args, device="cuda", dtype=torch.float64)[0]
    ref64.load_state_dict(ref.state_dict())
    for m in (ref, new, ref64):
        m.eval()
    before = {k: v.clone() for k, v in new.state_dict().items()}
    x = make_input((batch, init_args[0]), "randn", dtype=dtype, device="cuda")
    route = fusedops.explain(new, x)[0]
    kernels = _kernels_of_one_call(new, ref, ref64, x)
    assert not any("finish_kernel" in k or "finish_tiles_kernel" in k for k in kernels), kernels
    if "fused" not in route.split(": ")[1].split(" ")[0]:  # the GEMM, then the pass over y
        assert sum("normalize_kernel" in k for k in kernels) == 1, (route, kernels)
    for k, v in new.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("case", ["39", "62g16", "98r"])
def test_skinny_half_in_a_cuda_graph(case):
    """Captured after warm-up and replayed on new inputs: the same as a direct call."""
    _, new = make_pair(case[:2], SIZES[case], device="cuda", dtype=torch.float16)
    new.eval()
    static_x = make_input((8, SIZES[case][0]), "randn", dtype=torch.float16, device="cuda")
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                new(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = new(static_x)
        for dist in ("rand", "randn"):
            static_x.copy_(make_input(static_x.shape, dist, dtype=torch.float16, device="cuda"))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_out, new(static_x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", ["39", "62g16"])
def test_autocast_small_batch(case, dtype):
    """A float32 model under torch.autocast at small batch (models 39 and 62: the operators
    with an autocast form, docs/MODELS.md): the half-precision kernels with the
    float32 parameters and result of the operator's autocast form, against the reference under
    the same autocast and in float64 on the values autocast multiplies (the Linear's weight and
    bias rounded to the autocast dtype)."""
    init_args = SIZES[case]
    ref, new = make_pair(case[:2], init_args, device="cuda")
    ref.eval()
    new.eval()
    exact = copy.deepcopy(ref)
    linear = getattr(exact, LINEAR[case[:2]])
    with torch.no_grad():
        linear.weight.copy_(linear.weight.to(dtype))
        linear.bias.copy_(linear.bias.to(dtype))
    exact = exact.double()
    x = make_input((16, init_args[0]), "randn", device="cuda")
    with torch.no_grad():
        expected64 = exact(x.to(dtype).double())
        for b in (1, 7, 16):
            with torch.autocast("cuda", dtype=dtype):
                (line,) = fusedops.explain(new, x[:b])
                out, expected = new(x[:b]), ref(x[:b])
            assert out.dtype == expected.dtype == torch.float32
            assert ": skinny-half" in line, line
            assert_within_tolerance(out, expected, tolerance_for(dtype), expected64[:b])
