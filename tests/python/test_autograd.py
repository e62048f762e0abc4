"""Autograd of the fused operators (ops/autograd/): gradcheck and gradgradcheck of every op,
ModelNew's gradients against the reference model's, SGD training parity, opcheck with inputs
that require grad, partial requires_grad / no_grad, and backward through TorchScript.

The expected gradients always come from the reference models run by PyTorch."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.autograd import gradcheck, gradgradcheck

import fusedops
from fusedops.accuracy import Tolerance, assert_within_tolerance, tolerance_for
from fusedops_testing import (ERROR_FACTOR, HOUSEKEEPING_OPS, KEYS, UNIT_ROUNDOFF, assert_same_state,
                              make_input, make_pair, off_the_kink_)

ops = torch.ops.fusedops

# Small odd sizes: 21 % 4 leaves one feature that model 98's pooling drops, 21 = 3 groups of 7.
SMALL_ARGS = {"98": (13, 21, 4, 2.0), "18": (13, 21), "39": (13, 21, (21,)), "62": (13, 21, 3)}
SMALL_BATCH = 7
MODERATE_ARGS = {"98": (96, 160, 16, -1.5), "18": (96, 160), "39": (96, 160, (160,)),
                 "62": (96, 160, 20)}
MODERATE_BATCH = 64
SIZES = {"small": (SMALL_ARGS, SMALL_BATCH), "moderate": (MODERATE_ARGS, MODERATE_BATCH)}

# (key, mode): model 39 is checked in both modes (batch vs running statistics); the other
# models do not depend on the mode.
MODEL_MODES = [("98", "train"), ("18", "train"), ("39", "train"), ("39", "eval"),
               ("62", "train")]
MODEL_MODE_IDS = [f"{k}-{m}" for k, m in MODEL_MODES]

# Same-dtype gradients of ModelNew vs the reference. Both backwards run the same ATen chain, so
# in practice they agree to the last bit on the CPU; the tolerance leaves room for GPU reductions.
# atol is relative to the largest gradient entry (gradients of a sum over the batch grow with it).
GRAD_TOL = {torch.float64: dict(rtol=1e-9, atol=1e-10),
            torch.float32: dict(rtol=1e-4, atol=1e-5)}


def leaf(*shape, dtype=torch.float64, offset=0.0):
    return (torch.randn(*shape, dtype=dtype) + offset).requires_grad_()


# --- gradcheck / gradgradcheck of the operators (float64, CPU, small) ----------------------------

def linear_leaves(batch=3, n_in=5, n_out=8):
    return leaf(batch, n_in), leaf(n_out, n_in), leaf(n_out)


@pytest.mark.parametrize("k,scale_factor", [(3, 2.0), (3, -0.7), (8, 1.5)],
                         ids=["k3", "k3-negative-scale", "one-window"])
def test_gradcheck_matmul_avgpool_gelu_scale_max(k, scale_factor):
    op = lambda x, w, b: ops.matmul_avgpool_gelu_scale_max(x, w, b, k, scale_factor)  # noqa: E731
    assert gradcheck(op, linear_leaves())


def test_gradcheck_matmul_sum_max_avgpool_logsumexp_logsumexp():
    assert gradcheck(ops.matmul_sum_max_avgpool_logsumexp_logsumexp, linear_leaves())


@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("scale_shape", [(8,), (1,)], ids=["scale-out", "scale-1"])
def test_gradcheck_gemm_scale_batchnorm(scale_shape, training, momentum):
    running_mean = torch.randn(8, dtype=torch.float64)
    running_var = torch.rand(8, dtype=torch.float64) + 0.5

    def op(x, w, b, scale, gamma, beta):
        # fresh statistics each call: gradcheck evaluates many times
        return ops.gemm_scale_batchnorm(x, w, b, scale, gamma, beta, running_mean.clone(),
                                        running_var.clone(), torch.tensor(2), training,
                                        momentum, 1e-5)

    args = (*linear_leaves(), leaf(*scale_shape), leaf(8, offset=1.0), leaf(8))
    assert gradcheck(op, args)


@pytest.mark.parametrize("num_groups", [2, 1, 8], ids=["groups2", "groups1", "groups8"])
def test_gradcheck_matmul_groupnorm_leakyrelu_sum(num_groups):
    def op(x, w, b, gamma, beta):
        return ops.matmul_groupnorm_leakyrelu_sum(x, w, b, num_groups, gamma, beta, 1e-5, 0.1)

    assert gradcheck(op, (*linear_leaves(), leaf(8, offset=1.0), leaf(8)))


def test_gradcheck_fold_helpers():
    _, w, b = linear_leaves()
    assert gradcheck(lambda w, b: ops.avgpool_fold_linear(w, b, 3), (w, b))
    assert gradcheck(lambda w, b: ops.sum_fold_linear(w, b), (w, b))


def test_gradcheck_and_gradgradcheck_gemm_nt():
    x, w, _ = linear_leaves()
    assert gradcheck(ops.gemm_nt, (x, w))
    assert gradgradcheck(ops.gemm_nt, (x, w))


def test_gradcheck_of_the_weight_alone_issue_21():
    """The issue's reproduction, default arguments: gradcheck perturbs W through .data, which
    no version counter sees; a call that needs W's gradient no longer uses the fold cache."""
    x = torch.randn(5, 6, dtype=torch.double)
    b = torch.randn(8, dtype=torch.double)
    W = torch.randn(8, 6, dtype=torch.double, requires_grad=True)
    assert gradcheck(lambda W: ops.matmul_sum_max_avgpool_logsumexp_logsumexp(x, W, b), (W,))


def _one_input_cases():
    """Every operator with its default arguments and the tensor arguments gradcheck may
    perturb, by name (running statistics are buffers, never differentiated)."""
    x, w, b = (t.detach() for t in linear_leaves())
    vec = lambda offset=0.0: torch.randn(8, dtype=torch.float64) + offset  # noqa: E731
    rm, rv = torch.randn(8, dtype=torch.float64), torch.rand(8, dtype=torch.float64) + 0.5
    return {
        "98": (lambda x, w, b: ops.matmul_avgpool_gelu_scale_max(x, w, b, 3, 2.0),
               dict(x=x, w=w, b=b)),
        "18": (ops.matmul_sum_max_avgpool_logsumexp_logsumexp, dict(x=x, w=w, b=b)),
        "39": (lambda x, w, b, s, g, be: ops.gemm_scale_batchnorm(
                   x, w, b, s, g, be, rm.clone(), rv.clone(), torch.tensor(2), True, 0.1, 1e-5),
               dict(x=x, w=w, b=b, s=vec(), g=vec(1.0), be=vec())),
        "62": (lambda x, w, b, g, be: ops.matmul_groupnorm_leakyrelu_sum(x, w, b, 2, g, be, 1e-5,
                                                                          0.1),
               dict(x=x, w=w, b=b, g=vec(1.0), be=vec())),
        "avgpool_fold_linear": (lambda w, b: ops.avgpool_fold_linear(w, b, 3), dict(w=w, b=b)),
        "sum_fold_linear": (ops.sum_fold_linear, dict(w=w, b=b)),
        "gemm_nt": (ops.gemm_nt, dict(x=x, w=w)),
    }


@pytest.mark.parametrize("case,name", [(c, n) for c, (_, args) in _one_input_cases().items()
                                       for n in args])
def test_gradcheck_with_respect_to_each_input_alone(case, name):
    """gradcheck of every op with respect to each of its inputs on its own (the others plain
    tensors), default arguments (the fold cache on): issue 21."""
    op, args = _one_input_cases()[case]
    args = {n: (t.clone().requires_grad_() if n == name else t) for n, t in args.items()}
    assert gradcheck(op, tuple(args.values()))


def _double_backward_cases():
    rm, rv = torch.randn(8, dtype=torch.float64), torch.rand(8, dtype=torch.float64) + 0.5
    bn = lambda training: lambda x, w, b, s, g, be: ops.gemm_scale_batchnorm(  # noqa: E731
        x, w, b, s, g, be, rm.clone(), rv.clone(), torch.tensor(0), training, 0.1, 1e-5)
    bn_args = lambda: (*linear_leaves(), leaf(8), leaf(8, offset=1.0), leaf(8))  # noqa: E731
    return {
        "98": (lambda x, w, b: ops.matmul_avgpool_gelu_scale_max(x, w, b, 3, 2.0),
               linear_leaves),
        "18": (ops.matmul_sum_max_avgpool_logsumexp_logsumexp, linear_leaves),
        "39-train": (bn(True), bn_args),
        "39-eval": (bn(False), bn_args),
        "62": (lambda x, w, b, g, be: ops.matmul_groupnorm_leakyrelu_sum(x, w, b, 2, g, be,
                                                                          1e-5, 0.1),
               lambda: (*linear_leaves(), leaf(8, offset=1.0), leaf(8))),
    }


@pytest.mark.parametrize("case", ["98", "18", "39-train", "39-eval", "62"])
def test_gradgradcheck(case):
    """backward(create_graph=True) recomputes on the inputs themselves, so second derivatives
    are the reference's too. fast_mode (random projections of the Jacobian) keeps BatchNorm's
    second derivative, the slowest, to a second."""
    op, make_args = _double_backward_cases()[case]
    assert gradgradcheck(op, make_args(), fast_mode=True)


# --- ModelNew vs reference gradients --------------------------------------------------------

def forward_backward(model, x, grad_out=None):
    """Output and the gradients of x and every parameter for out.backward(grad_out)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    out = model(x)
    if grad_out is None:
        grad_out = torch.randn_like(out)
    out.backward(grad_out)
    grads = {"x": x.grad}
    grads.update({name: p.grad for name, p in model.named_parameters()})
    return out.detach(), grads, grad_out


def assert_same_grads(grads, expected, dtype, scale=1.0):
    assert grads.keys() == expected.keys()
    tol = GRAD_TOL[dtype]
    for name, g in grads.items():
        e = expected[name]
        if e is None:
            assert g is None, f"{name}: a gradient where the reference has none"
            continue
        assert g is not None, f"{name}: no gradient"
        assert g.shape == e.shape and g.dtype == e.dtype and g.device == e.device, name
        torch.testing.assert_close(g, e, rtol=tol["rtol"], atol=tol["atol"] * scale,
                                   equal_nan=True, msg=lambda m: f"grad of {name}: {m}")


def rows_off_the_kink(ref, ref64, x):
    """Model 62's LeakyReLU has a kink at 0. Where GroupNorm's output lies within float32's own
    error of 0, which slope applies is float32 noise: our y (the forward's, kept for the
    backward: at the default size its route is gemm_nt's, the 3xFP16 engine) may land on the
    other side of 0 than float64 does, a different but equally valid gradient. Such elements
    must lie within 8 times the float32 reference's own largest error of the kink (checked
    here). Our backward's kernel normalizes y itself, its output a few float32 ulps from ATen's
    (computed here): the elements within 8 ulps of the output's largest magnitude of 0 are left
    out too. Their rows of x's gradient and their groups' channels in the parameters' gradients
    (GroupNorm's backward mixes a group) are left out, at most a tenth of each, and the rest
    must meet the contract. Returns the kept indices by gradient name."""
    groups, eps = ref.gn.num_groups, ref.gn.eps
    with torch.no_grad():
        y_ours = ops.gemm_nt(x, ref.fc.weight) + ref.fc.bias
        z_ours = F.group_norm(y_ours, groups, ref.gn.weight, ref.gn.bias, eps)
        z32 = ref.gn(ref.fc(x))
        z64 = ref64.gn(ref64.fc(x.double()))
    flipped = (z_ours > 0) != (z64 > 0)
    noise = (z32.double() - z64).abs().max()
    assert (z64[flipped].abs() <= 8 * noise).all(), "a slope taken away from the kink"
    band = 8 * torch.finfo(torch.float32).eps * z_ours.abs().max()
    flipped |= z_ours.abs() <= band
    rows = (~flipped.any(dim=1)).nonzero().squeeze(1)
    group_hit = flipped.any(dim=0).view(groups, -1).any(dim=1)
    channels = (~group_hit.repeat_interleave(z64.shape[1] // groups)).nonzero().squeeze(1)
    assert rows.numel() >= 0.9 * z64.shape[0] and channels.numel() >= 0.9 * z64.shape[1], (
        rows.numel(), channels.numel())
    return {"x": rows, "fc.weight": channels, "fc.bias": channels, "gn.weight": channels,
            "gn.bias": channels}


def check_grads_match_reference(key, mode, init_args, batch, dtype, device, dist="randn",
                                check_forward=True, against_float64=False):
    """against_float64: each gradient within the tolerance of the reference's or at least as close
    to the float64 reference's (the contract's float64 clause), and its largest error against
    float64 no worse than ERROR_FACTOR times PyTorch's own (where the GEMMs differ from the
    reference's: CUDA's backward runs them on gemm_nt)."""
    ref, new = make_pair(key, init_args, device=device, dtype=dtype)
    ref.train(mode == "train")
    new.train(mode == "train")
    ref64 = copy.deepcopy(ref).double() if against_float64 else None
    x = make_input((batch, init_args[0]), dist, dtype=dtype, device=device)
    out_ref, grads_ref, grad_out = forward_backward(ref, x)
    out_new, grads_new, _ = forward_backward(new, x, grad_out)
    if check_forward:
        assert_within_tolerance(out_new, out_ref)
    scale = max(1.0, max(g.abs().max().item() for g in grads_ref.values() if g.numel()))
    if against_float64:
        _, grads64, _ = forward_backward(ref64, x.double(), grad_out.double())
        tol = Tolerance(rtol=GRAD_TOL[dtype]["rtol"], atol=GRAD_TOL[dtype]["atol"] * scale)
        assert grads_new.keys() == grads_ref.keys()
        kept = rows_off_the_kink(ref, ref64, x) if key == "62" else {}
        for name, g in grads_new.items():
            rows = kept.get(name, slice(None))
            g, e32, e64 = g[rows], grads_ref[name][rows], grads64[name][rows]
            assert_within_tolerance(g, e32, tol, e64)
            ours = (g.double() - e64).abs().max().item()
            torchs = (e32.double() - e64).abs().max().item()
            assert ours <= ERROR_FACTOR * torchs + 4 * UNIT_ROUNDOFF[dtype] * scale, (
                f"grad of {name}: error {ours:.3e} against float64, PyTorch's own {torchs:.3e}")
    else:
        assert_same_grads(grads_new, grads_ref, dtype, scale)
    if key == "39":  # one forward each: the statistics moved (train) or stayed (eval) alike
        # BatchNorm statistics come from the fused forward: the contract's tolerance.
        assert_same_state(new, ref, rtol=tolerance_for(dtype).rtol,
                          atol=tolerance_for(dtype).atol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("size", ["small", "moderate"])
@pytest.mark.parametrize("key,mode", MODEL_MODES, ids=MODEL_MODE_IDS)
def test_grads_match_reference(key, mode, size, dtype, device):
    init_args, batch = SIZES[size]
    check_grads_match_reference(key, mode, init_args[key], batch, dtype, device)


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.parametrize("key,mode", MODEL_MODES, ids=MODEL_MODE_IDS)
def test_grads_match_reference_default_size_cuda(key, mode):
    problem = fusedops.get_problem(key)
    # The forward at these sizes (8192-term sums, where float32 results differ from each other
    # by more than this test's tight forward tolerance) is held to the float32 contract against
    # the float64 reference by test_models.py::test_default_sizes; here only the gradients.
    check_grads_match_reference(key, mode, problem.init_args, problem.batch_size,
                                torch.float32, "cuda", dist="rand", check_forward=False,
                                against_float64=True)


def test_max_tie_goes_to_first_index():
    """Two identical pooling windows tie in every row: the gradient goes where torch.max sends
    it in the reference (the first index)."""
    ref, new = make_pair("98", (6, 12, 3, 2.0), dtype=torch.float64)
    with torch.no_grad():
        for m in (ref, new):
            m.matmul.weight[3:6] = m.matmul.weight[0:3]
            m.matmul.bias[3:6] = m.matmul.bias[0:3]
            m.matmul.weight[6:] *= 0.01  # windows 2, 3 stay below the tied pair
            m.matmul.bias[6:] = -5.0
    x = make_input((5, 6), "rand", dtype=torch.float64)
    _, grads_ref, grad_out = forward_backward(ref, x)
    _, grads_new, _ = forward_backward(new, x, grad_out)
    assert grads_ref["matmul.weight"][3:6].abs().max() == 0  # the reference took window 0
    assert_same_grads(grads_new, grads_ref, torch.float64)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_non_finite_sum_gets_reference_nan_gradient(value, dtype):
    """Model 18's logsumexp tail has gradient exp(out - out): 1 on a finite row, NaN on a row
    whose sum is infinite or NaN, as the reference's."""
    ref, new = make_pair("18", (6, 10), dtype=dtype)
    x = make_input((4, 6), "randn", dtype=dtype)
    x[1, 2] = value
    _, grads_ref, grad_out = forward_backward(ref, x)
    _, grads_new, _ = forward_backward(new, x, grad_out)
    assert grads_ref["x"][1].isnan().all() and grads_ref["x"][0].isfinite().all()
    assert_same_grads(grads_new, grads_ref, dtype)


def test_model18_forward_under_autograd_runs_only_the_operator():
    """The forward of a training step runs what an inference call runs and nothing beside it:
    the backward's factor comes from the saved output (it computed a mask of the finite rows,
    four more kernels in every step's forward on a GPU)."""
    _, new = make_pair("18", (64, 48), dtype=torch.float32)
    x = make_input((32, 64), "randn")

    def ops_of(call):
        call()  # the weights' folds made and cached first
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            call()
        return sorted(e.name for e in prof.events())

    def inference():
        with torch.no_grad():
            new(x)

    x_grad = x.detach().requires_grad_()
    training = ops_of(lambda: new(x_grad))
    assert training == ops_of(inference)


def test_model18_output_written_in_place_refuses_the_backward_as_the_reference():
    """The output is saved for the backward, as the reference's last logsumexp saves its
    result: an in-place write to it before backward is refused on both."""
    for model in make_pair("18", (6, 10), dtype=torch.float64):
        x = make_input((4, 6), "randn", dtype=torch.float64).requires_grad_()
        out = model(x)
        out.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_model18_backward_is_its_own_algebra():
    """Issue 40: model 18's backward is the model's algebra (W's gradient has rank one: one
    GEMV, broadcast; x's is the gradient times W's column sums): no GEMM runs, where the
    recomputed reference ran its Linear forward and backward. A double backward still
    recomputes the reference's chain (create_graph)."""
    ref, new = make_pair("18", (64, 48), dtype=torch.float32)
    x = make_input((32, 64), "randn").requires_grad_()
    gemms = {"aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm"}
    out = new(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out.backward(torch.randn_like(out))
    ran = {e.name for e in prof.events()}
    assert not ran & gemms, sorted(ran & gemms)
    out = new(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.autograd.grad(out.sum(), x, create_graph=True)
    assert "aten::linear" in {e.name for e in prof.events()}


def test_model98_backward_is_its_own_algebra():
    """Issue 40: model 98's backward multiplies by the pooled weight (out_features / k rows): no
    tensor of the reference's Linear output's shape (batch, out_features) is formed, where the
    recomputed reference formed it forward and backward."""
    ref, new = make_pair("98", (64, 48, 4, 2.0), dtype=torch.float32)
    x = make_input((32, 64), "randn").requires_grad_()
    out = new(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        out.backward(torch.randn_like(out))
    shapes = [shape for e in prof.events() for shape in e.input_shapes]
    assert [32, 48] not in shapes, sorted({e.name for e in prof.events() if [32, 48] in
                                           e.input_shapes})
    _, grads_ref, grad_out = forward_backward(ref, x.detach())
    _, grads_new, _ = forward_backward(new, x.detach(), grad_out)
    assert_same_grads(grads_new, grads_ref, torch.float32)


def exact_half_reference(ref, linear, dtype):
    """The reference in float64 on the values a half chain multiplies: its Linear's (attribute
    `linear`) weight and bias rounded to dtype (the caller rounds the input)."""
    exact = copy.deepcopy(ref)
    layer = getattr(exact, linear)
    with torch.no_grad():
        layer.weight.copy_(layer.weight.to(dtype))
        layer.bias.copy_(layer.bias.to(dtype))
    return exact.double()


def half_backward_runs(ref, new, x, dtype, form):
    """For the reference and ModelNew in turn (the same dL/dout): the gradients of x and every
    parameter, dL/dout, the autograd nodes the backward evaluated and its GEMM calls; `form`
    "autocast" runs the forward inside torch.autocast(dtype)."""
    runs = {}
    for name, model in (("ref", ref), ("new", new)):
        model.zero_grad(set_to_none=True)
        xr = x.clone().requires_grad_()
        with torch.autocast(x.device.type, dtype=dtype, enabled=form == "autocast"):
            out = model(xr)
        grad_out = runs["ref"]["grad_out"] if name == "new" else torch.randn_like(out)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out.backward(grad_out)
        runs[name] = {
            "grads": {"x": xr.grad, **{n: p.grad for n, p in model.named_parameters()}},
            "grad_out": grad_out,
            "nodes": {e.name.rsplit(": ", 1)[-1] for e in prof.events()
                      if e.name.startswith("autograd::engine::evaluate_function")},
            "gemms": [e.name for e in prof.events() if e.name in ("aten::mm", "aten::addmm")]}
    return runs


def assert_half_grads_match(runs, exact, x, dtype):
    """Every gradient of ModelNew within dtype's tolerance (atol scaled to the gradient's
    magnitude) of the reference's, or at least as close to the float64 reference `exact` on the
    rounded input."""
    exact.zero_grad(set_to_none=True)
    x64 = x.to(dtype).double().requires_grad_()
    exact(x64).backward(runs["ref"]["grad_out"].double())
    grads64 = {"x": x64.grad, **{n: p.grad for n, p in exact.named_parameters()}}
    grads_ref, grads_new = runs["ref"]["grads"], runs["new"]["grads"]
    assert grads_new.keys() == grads_ref.keys()
    tol = tolerance_for(dtype)
    for name, g in grads_new.items():
        e = grads_ref[name]
        assert g.dtype == e.dtype and g.shape == e.shape, name
        scale = max(float(e.abs().max()), 1.0)
        assert_within_tolerance(g, e, Tolerance(atol=tol.atol * scale, rtol=tol.rtol),
                                grads64[name])


HALF_98_ARGS = {"default": (256, 384, 16, 2.0), "odd": (77, 61, 6, -1.5)}


@pytest.mark.parametrize("numerics", ["accurate", "eager"])
@pytest.mark.parametrize("form", ["half", "autocast"])
@pytest.mark.parametrize("sizes", ["default", "odd"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_model98_half_backward_recomputes_only_the_argmax(dtype, sizes, form, numerics, device):
    """Issue 40: a float16/bfloat16 model 98 (`form` "half": the model in that dtype;
    "autocast": a float32 model inside torch.autocast) differentiates its own algebra like
    float32, taking each row's argmax window from the reference's forward recomputed without
    autograd (its rounded chain breaks the near-ties its own way): no node of the reference's
    chain is evaluated, where the recompute ran them all and two more GEMMs. With
    numerics="eager" the chain is recomputed under autograd as before. Every gradient is
    within the dtype's tolerance of the reference's or at least as close to the float64
    reference (the Linear's values rounded as autocast rounds them), on rand and randn
    inputs."""
    init_args = HALF_98_ARGS[sizes]
    model_dtype = dtype if form == "half" else torch.float32
    ref, new = make_pair("98", init_args, device=device, dtype=model_dtype)
    new.numerics = numerics
    exact = exact_half_reference(ref, "matmul", dtype)
    chain = {"AddmmBackward0", "AvgPool2DBackward0", "GeluBackward0", "MaxBackward0",
             "MulBackward0", "SqueezeBackward1", "UnsqueezeBackward0"}
    for dist in ("rand", "randn"):
        x = make_input((96, init_args[0]), dist, dtype=model_dtype, device=device)
        runs = half_backward_runs(ref, new, x, dtype, form)
        assert runs["ref"]["nodes"] & chain  # the profile sees the reference's nodes
        if numerics == "accurate":
            assert not runs["new"]["nodes"] & chain, sorted(runs["new"]["nodes"])
        else:
            assert runs["new"]["nodes"] & chain, sorted(runs["new"]["nodes"])
        assert_half_grads_match(runs, exact, x, dtype)


@pytest.mark.parametrize("numerics", ["accurate", "eager"])
@pytest.mark.parametrize("key,mode", [("39", "train"), ("39", "eval"), ("62", "train")],
                         ids=["39-train", "39-eval", "62"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
def test_backward_runs_the_reference_formulas_without_a_graph(key, mode, dtype, numerics):
    """Issue 40: models 39's and 62's backward runs the reference's ops and their backward
    formulas directly, in every dtype: no autograd node of a recomputed graph is evaluated
    inside it (the recompute kept the whole chain's activations for autograd), and on the CPU
    its gradients equal the reference's bit for bit. A float16/bfloat16 model with
    numerics="eager" (the reference's roundings, common/numerics.h: in the backward too) and a
    double backward (create_graph) still recompute the reference's chain under autograd."""
    ref, new = make_pair(key, SMALL_ARGS[key], dtype=dtype)
    new.numerics = numerics
    ref.train(mode == "train")
    new.train(mode == "train")
    x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=dtype)
    out = new(x.clone().requires_grad_())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out.backward(torch.randn_like(out))
    own = {"39": "GemmScaleBatchnorm", "62": "MatmulGroupnormLeakyreluSum"}[key]
    nodes = {e.name for e in prof.events() if e.name.startswith("autograd::engine::")
             and "AccumulateGrad" not in e.name and own not in e.name}
    if numerics == "eager" and dtype in (torch.float16, torch.bfloat16):
        assert any("AddmmBackward" in name for name in nodes), sorted(nodes)
    else:
        assert not nodes, sorted(nodes)
    _, grads_ref, grad_out = forward_backward(ref, x)
    _, grads_new, _ = forward_backward(new, x, grad_out)
    assert grads_new.keys() == grads_ref.keys()
    for name, g in grads_new.items():
        assert torch.equal(g, grads_ref[name]), name
    out = new(x.clone().requires_grad_())
    weight = next(p for name, p in new.named_parameters() if name.endswith("weight"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.autograd.grad(out.square().sum(), weight, create_graph=True)
    assert any("AddmmBackward" in e.name for e in prof.events())


@pytest.mark.cuda
@pytest.mark.parametrize("key,mode", [("39", "train"), ("39", "eval"), ("62", "train")],
                         ids=["39-train", "39-eval", "62"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_backward_keeps_the_forwards_y(key, mode, dtype):
    """Issue 40: where the CUDA forward writes y = x W^T whole (its unfused routes: 1024 rows
    here), models 39's and 62's backward takes that y (common/kept_linear.h) instead of
    recomputing it: two GEMMs in the backward (x's and W's gradients), not three. The kept y is
    not written by the backward: a second backward of the retained graph gives the same
    gradients, and both match the reference's in float64 and in the model's dtype (model 62's
    away from LeakyReLU's kink: rows_off_the_kink)."""
    in_features, out_features = 256, 384
    init_args = {"39": (in_features, out_features, (out_features,)),
                 "62": (in_features, out_features, 24)}[key]
    ref, new = make_pair(key, init_args, device="cuda", dtype=dtype)
    ref.train(mode == "train")
    new.train(mode == "train")
    for dist in ("rand", "randn"):
        x = make_input((1024, in_features), dist, dtype=dtype, device="cuda")
        new.zero_grad(set_to_none=True)
        xr = x.clone().requires_grad_()
        out = new(xr)
        grad_out = torch.randn_like(out)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out.backward(grad_out, retain_graph=True)
        # gemm_nt's Autograd kernel calls its CUDA kernel through the dispatcher: count the
        # outer calls.
        gemms = [e for e in prof.events() if e.name == "fusedops::gemm_nt" and
                 (e.cpu_parent is None or e.cpu_parent.name != "fusedops::gemm_nt")]
        assert len(gemms) == 2, [e.name for e in prof.events() if e.name.startswith("fusedops")]
        first = {"x": xr.grad.clone()}
        first.update({n: p.grad.clone() for n, p in new.named_parameters()})
        new.zero_grad(set_to_none=True)
        xr.grad = None
        out.backward(grad_out)
        second = {"x": xr.grad}
        second.update({n: p.grad for n, p in new.named_parameters()})
        for name, g in second.items():
            assert torch.equal(g, first[name]), name
        _, grads_ref, _ = forward_backward(ref, x, grad_out)
        ref64 = copy.deepcopy(ref).double()
        _, grads64, _ = forward_backward(ref64, x.double(), grad_out.double())
        scale = max(1.0, max(g.abs().max().item() for g in grads_ref.values()))
        tol = Tolerance(rtol=GRAD_TOL[dtype]["rtol"], atol=GRAD_TOL[dtype]["atol"] * scale)
        kept = rows_off_the_kink(ref, ref64, x) if key == "62" else {}
        assert first.keys() == grads_ref.keys()
        for name, g in first.items():
            rows = kept.get(name, slice(None))
            assert_within_tolerance(g[rows], grads_ref[name][rows], tol, grads64[name][rows])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_model98_backward_reads_the_forwards_fold(device, dtype):
    """Model 98's backward takes the pooled weight its forward made and cached with W instead of
    folding all of W again (a training step's second read of W); with cache_folds=False (and so
    for a raw op call recorded with a weight that requires grad, as gradcheck makes) it folds
    again. The gradients are the same bits either way (one fold function makes both) and match
    the reference's."""
    in_features, out_features, k = MODERATE_ARGS["98"][:3]
    ref, new = make_pair("98", MODERATE_ARGS["98"], device=device, dtype=dtype)
    x = make_input((MODERATE_BATCH, in_features), "randn", dtype=dtype, device=device)
    grad_out = torch.randn(MODERATE_BATCH, dtype=dtype, device=device)
    grads, folds = {}, {}
    for cache in (True, False):
        new.cache_folds = cache
        new.zero_grad(set_to_none=True)
        xr = x.clone().requires_grad_()
        out = new(xr)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out.backward(grad_out)
        folds[cache] = sum(e.name == "fusedops::avgpool_fold_linear" for e in prof.events())
        grads[cache] = {"x": xr.grad, **{n: p.grad for n, p in new.named_parameters()}}
    assert folds == {True: 0, False: 1}, folds
    for name, g in grads[True].items():
        assert torch.equal(g, grads[False][name]), name
    _, grads_ref, _ = forward_backward(ref, x, grad_out)
    assert_same_grads(grads[True], grads_ref, dtype,
                      scale=max(1.0, max(g.abs().max().item() for g in grads_ref.values())))


HALF_DTYPES = [pytest.param(torch.float16, id="f16"), pytest.param(torch.bfloat16, id="bf16")]


@pytest.mark.cuda
@pytest.mark.parametrize("numerics", ["accurate", "eager"])
@pytest.mark.parametrize("form", ["half", "autocast"])
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("key,mode", [("39", "train"), ("39", "eval"), ("62", "train")],
                         ids=["39-train", "39-eval", "62"])
def test_half_backward_runs_without_a_graph_cuda(key, mode, dtype, form, numerics):
    """Issue 40: a float16/bfloat16 model (`form` "half": the model in that dtype; "autocast": a
    float32 model inside torch.autocast) trains on the same direct backward as float32, on
    1024 rows (the GEMM routes of a training step): no autograd node of a recomputed chain runs
    (autocast's own casts of x and the parameters do, for the reference too); with
    numerics="eager" the backward recomputes the reference's chain (its roundings). Model 39's
    backward takes the y its forward wrote (common/kept_linear.h), rounded to the dtype: two
    GEMMs, not three. Every gradient is within the dtype's tolerance of the reference's or at
    least as close to the float64 reference on the values the Linear multiplies, on rand and
    randn inputs (model 62 with GroupNorm's outputs away from LeakyReLU's kink:
    off_the_kink_)."""
    in_features, out_features = 256, 384
    init_args = {"39": (in_features, out_features, (out_features,)),
                 "62": (in_features, out_features, 24)}[key]
    model_dtype = dtype if form == "half" else torch.float32
    ref, new = make_pair(key, init_args, device="cuda", dtype=model_dtype)
    if key == "62":  # the half reference's GroupNorm takes LeakyReLU's kink its own way
        new.load_state_dict(off_the_kink_(ref).state_dict())
    new.numerics = numerics
    ref.train(mode == "train")
    new.train(mode == "train")
    exact = exact_half_reference(ref, "gemm" if key == "39" else "fc", dtype)
    exact.train(mode == "train")
    recomputed = {"AddmmBackward0", "MmBackward0", "NativeGroupNormBackward0",
                  "LeakyReluBackward0", "AddBackward0", "MulBackward0",
                  "NativeBatchNormBackward0", "CudnnBatchNormBackward0"}
    for dist in ("rand", "randn"):
        x = make_input((1024, in_features), dist, dtype=model_dtype, device="cuda")
        runs = half_backward_runs(ref, new, x, dtype, form)
        assert runs["ref"]["nodes"] & recomputed  # the profile sees the reference's nodes
        if numerics == "accurate":
            assert not runs["new"]["nodes"] & recomputed, sorted(runs["new"]["nodes"])
        else:  # "eager": the reference's roundings, its chain recomputed (common/numerics.h)
            assert runs["new"]["nodes"] & recomputed, sorted(runs["new"]["nodes"])
        if numerics == "accurate" and key == "39":
            # Model 39's routes write y whole: its backward takes it (rounded to the dtype)
            # and runs x's and W's GEMMs only, not a third for y.
            assert len(runs["new"]["gemms"]) == 2, runs["new"]["gemms"]
        assert_half_grads_match(runs, exact, x, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("key", ["39", "62"])
def test_kept_y_is_freed_with_the_graph(key):
    """The forward's y kept for the backward (common/kept_linear.h) lives as long as autograd's
    graph: freed after the backward, and with the output when no backward runs (KernelBench's
    calls with grad mode on); a thread's slot holds nothing between calls."""
    init_args = {"39": (256, 384, (384,)), "62": (256, 384, 24)}[key]
    _, new = make_pair(key, init_args, device="cuda", dtype=torch.float32)
    x = make_input((1024, 256), "randn", device="cuda").requires_grad_()
    y_bytes = 1024 * 384 * 4
    new(x).sum().backward()  # the weight's cached folds and cuBLAS's workspace, made once
    for _ in range(2):
        new.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        out = new(x)
        assert torch.cuda.memory_allocated() >= baseline + 2 * y_bytes  # out and the kept y
        del out
        assert torch.cuda.memory_allocated() == baseline
        new(x).sum().backward()
        grads = sum(t.grad.numel() * 4 for t in [x, *new.parameters()])
        assert torch.cuda.memory_allocated() == baseline + grads


@pytest.mark.cuda
@pytest.mark.parametrize("key", ["39", "62"])
def test_a_training_step_refolds_w_in_the_memory_of_its_old_fold(key):
    """Each optimizer step changes W and the next forward refolds it (float32: W's 3xFP16 pair,
    W's size): the stale fold is freed before the new one is made, so the forward holds one
    fold of W, not two (issue 40: the refold held W's size twice)."""
    init_args = {"39": (8192, 8192, (8192,)), "62": (8192, 8192, 32)}[key]
    _, new = make_pair(key, init_args, device="cuda", dtype=torch.float32)
    x = make_input((1024, 8192), "randn", device="cuda")
    optimizer = torch.optim.SGD(new.parameters(), lr=1e-6)
    w_bytes = next(p for p in new.parameters() if p.dim() == 2).numel() * 4
    for _ in range(2):
        new(x).float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    held = ops.fold_cache_stats()["bytes"]
    assert held >= w_bytes, held  # the step folds W (else this test would test nothing)
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = new(x)
    torch.cuda.synchronize()
    assert ops.fold_cache_stats()["bytes"] == held  # refolded in place of the old fold
    peak = torch.cuda.max_memory_allocated() - baseline
    assert peak < w_bytes, (peak, w_bytes)
    assert torch.isfinite(y).all()


@pytest.mark.cuda
@pytest.mark.parametrize("key", ["39", "62"])
def test_saved_tensor_hooks_see_the_kept_y(key):
    """Activation checkpointing and offloading work through saved-tensor hooks
    (torch.autograd.graph.saved_tensors_hooks): where hooks are set, the forward's kept y is
    saved through them, as the reference's saved y is (kept aside, the hooks would never free or
    move it); checkpointed gradients equal the plain ones."""
    in_features, out_features = 256, 384
    init_args = {"39": (in_features, out_features, (out_features,)),
                 "62": (in_features, out_features, 24)}[key]
    _, new = make_pair(key, init_args, device="cuda", dtype=torch.float32)
    x = make_input((1024, in_features), "randn", device="cuda")
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = new(x)
    assert (1024, out_features) in packed, packed  # y (x is (1024, in_features))
    out.float().square().mean().backward()
    plain = {n: p.grad.clone() for n, p in new.named_parameters()}
    new.zero_grad(set_to_none=True)
    out = torch.utils.checkpoint.checkpoint(new, x, use_reentrant=False)
    out.float().square().mean().backward()
    for n, p in new.named_parameters():
        assert torch.equal(p.grad, plain[n]), n


def float32_backward_allocations(key):
    """One float32 backward of model 39's or 62's fused node at the default sizes (folds and
    workspaces made by a step before), recorded by the caching allocator: its ("alloc" |
    "free_requested", address, bytes) events in order, the index of W's gradient's allocation,
    the address of the gradient given to the node, and y's bytes. The node's output is held
    until the record ends (its block is not freed in it)."""
    init_args = {"39": (8192, 8192, (8192,)), "62": (8192, 8192, 32)}[key]
    _, new = make_pair(key, init_args, device="cuda", dtype=torch.float32)
    x = make_input((1024, init_args[0]), "randn", device="cuda")
    w_bytes = next(p for p in new.parameters() if p.dim() == 2).numel() * 4
    new(x).float().square().mean().backward()
    new.zero_grad(set_to_none=True)
    out = new(x)
    given = []
    out.register_hook(lambda g: given.append(g.data_ptr()))  # the address only: no reference
    loss = out.float().square().mean()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    try:
        loss.backward()
        torch.cuda.synchronize()
        events = [e for trace in torch.cuda.memory._snapshot()["device_traces"] for e in trace]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    order = [(e["action"], e["addr"], e["size"]) for e in events
             if e["action"] in ("alloc", "free_requested")]
    w_grad = next(i for i, (action, _, size) in enumerate(order)
                  if action == "alloc" and size >= w_bytes)
    return order, w_grad, given[0], out.numel() * 4


@pytest.mark.cuda
@pytest.mark.parametrize("key", ["39", "62"])
def test_a_float32_backward_frees_the_gradient_given_before_w_gets_its_own(key):
    """A float32 step's peak is at W's gradient (issue 40), where the reference's engine has
    already freed the gradient of its output (each node's inputs go once the node is done). The
    fused node's backward frees the gradient it was given once the normalization's backward has
    consumed it: before W's gradient is allocated (the caching allocator's history says when)."""
    order, w_grad, given, _ = float32_backward_allocations(key)
    freed = [i for i, (action, addr, _) in enumerate(order)
             if action == "free_requested" and addr == given]
    assert freed and freed[0] < w_grad, (freed, w_grad)


@pytest.mark.cuda
@pytest.mark.parametrize("key", ["39", "62"])
def test_a_float32_backward_frees_the_kept_y_before_w_gets_its_gradient(key):
    """The forward's y, kept for the backward (common/kept_linear.h), goes once the
    normalization's backward has used it: before W's gradient is allocated, as the reference's
    engine frees the Linear output that its mul/group_norm node saved when that node is done (a
    float32 step's peak is at W's gradient, issue 40). The kept y is the one block of y's size,
    below W's, allocated before the backward and freed in it."""
    order, w_grad, _, y_bytes = float32_backward_allocations(key)
    w_bytes = order[w_grad][2]
    made_here = set()
    kept = []
    for i, (action, addr, size) in enumerate(order):
        if action == "alloc":
            made_here.add(addr)
        elif addr not in made_here and y_bytes <= size < w_bytes:
            kept.append(i)
    assert len(kept) == 1 and kept[0] < w_grad, (kept, w_grad)


@pytest.mark.parametrize("key", KEYS)
def test_empty_batch_backward(key):
    ref, new = make_pair(key, SMALL_ARGS[key], dtype=torch.float64)
    x = make_input((0, SMALL_ARGS[key][0]), "randn", dtype=torch.float64)
    _, grads_ref, grad_out = forward_backward(ref, x)
    _, grads_new, _ = forward_backward(new, x, grad_out)
    assert_same_grads(grads_new, grads_ref, torch.float64)


# --- which gradients are computed -----------------------------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_no_graph_without_grad(key):
    """No autograd node under no_grad or when nothing requires grad; the op still runs."""
    ref, new = make_pair(key, SMALL_ARGS[key], dtype=torch.float64)
    x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=torch.float64)
    with torch.no_grad():
        out = new(x)
    assert out.grad_fn is None and not out.requires_grad
    new.requires_grad_(False)
    out = new(x)
    assert out.grad_fn is None and not out.requires_grad
    out = new(x.clone().requires_grad_())
    assert out.grad_fn is not None


@pytest.mark.parametrize("key", KEYS)
def test_frozen_parameters(key):
    """Only x requires grad (frozen model), then only the weight: each gets the reference's
    gradient and nothing else gets one."""
    ref, new = make_pair(key, SMALL_ARGS[key], dtype=torch.float64)
    x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=torch.float64)
    ref.requires_grad_(False)
    new.requires_grad_(False)
    _, grads_ref, grad_out = forward_backward(ref, x)
    _, grads_new, _ = forward_backward(new, x, grad_out)
    assert all(g is None for name, g in grads_new.items() if name != "x")
    assert_same_grads(grads_new, grads_ref, torch.float64)

    weight = {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}[key] + ".weight"
    for m in (ref, new):
        m.get_parameter(weight).requires_grad_(True)
    outs = []
    for m in (ref, new):
        m.zero_grad(set_to_none=True)
        out = m(x)  # x does not require grad
        out.backward(grad_out)
        outs.append(m.get_parameter(weight).grad)
        assert all(p.grad is None for name, p in m.named_parameters() if name != weight)
    torch.testing.assert_close(outs[1], outs[0], **GRAD_TOL[torch.float64])


def test_backward_leaves_running_stats_alone():
    """Training-mode backward recomputes the batch statistics without the running ones: only
    the forward moves them (once), as in BatchNorm1d."""
    ref, new = make_pair("39", SMALL_ARGS["39"], dtype=torch.float64)
    x = make_input((SMALL_BATCH, SMALL_ARGS["39"][0]), "randn", dtype=torch.float64)
    versions = [t._version for t in new.buffers()]
    out = new(x)
    after_forward = {k: v.clone() for k, v in new.bn.state_dict().items()}
    # mutated in place, so their version counters move as for an in-place ATen op
    assert all(t._version > v for t, v in zip(new.buffers(), versions))
    out.square().sum().backward()
    for k, v in new.bn.state_dict().items():
        assert torch.equal(v, after_forward[k]), k
    ref(x)
    assert_same_state(new, ref, rtol=1e-9, atol=1e-10)


def assert_refused_and_unchanged(model, x, match):
    """model(x) raises a RuntimeError matching `match`, and its state_dict is as it was."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match=match):
        model(x)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_recorded_call_with_inference_tensors_fails_before_updating_statistics():
    """A model built under torch.inference_mode() (as Triton builds it) holds inference
    tensors, which autograd cannot save. Called in training outside inference mode with an x
    that requires grad, the reference refuses; ours refused too, but only after its kernel had
    updated the running statistics and num_batches_tracked: a failed call that changed the
    model. Now it refuses first, naming the tensor, and the model is as it was."""
    with torch.inference_mode():
        ref, new = make_pair("39", SMALL_ARGS["39"], dtype=torch.float64)
    x = make_input((SMALL_BATCH, SMALL_ARGS["39"][0]), "randn", dtype=torch.float64)
    x.requires_grad_()
    with pytest.raises(RuntimeError):
        ref(x)
    count = new.bn.num_batches_tracked.item()
    assert_refused_and_unchanged(new, x, r"gemm_scale_batchnorm: weight must not be an inference "
                                         r"tensor .*, got an inference tensor")
    # Under inference mode (how Triton calls it) the same model runs and trains its statistics.
    with torch.inference_mode():
        new(x.detach())
    assert new.bn.num_batches_tracked.item() == count + 1


@pytest.mark.parametrize("x_requires_grad", [False, True], ids=["x", "x-requires-grad"])
@pytest.mark.parametrize("key", KEYS)
def test_model_built_under_inference_mode_does_what_the_reference_does(key, x_requires_grad,
                                                                          device):
    """issue 36: built under torch.inference_mode() and called outside it with grad mode on, the
    reference returns a result where its autograd saves no inference tensor (models 18 and 98:
    the Linear keeps x for the weight's gradient, the weight only for x's) and raises where it
    must save one (39 and 62 save their normalization's weight, every model the weight when x
    requires grad). Ours raised "Inference tensors cannot be saved for backward" in every case.
    Where both return: the same output, and backward gives the same gradients to the same
    parameters (none to the weight: the reference's W^T is a view autograd does not track)."""
    with torch.inference_mode():
        ref, new = make_pair(key, SMALL_ARGS[key], device=device)
    x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "rand", device=device)
    outcomes = []
    for model in (ref, new):
        xm = x.clone().requires_grad_(x_requires_grad)
        try:
            out = model(xm)
        except RuntimeError as e:
            outcomes.append(("raised", str(e)))
            continue
        out.square().sum().backward()
        outcomes.append(("returned", out.detach(), {n: p.grad for n, p in model.named_parameters()}))
    assert [o[0] for o in outcomes] == [outcomes[0][0]] * 2, outcomes
    if outcomes[0][0] == "raised":
        return
    assert key in ("18", "98") and not x_requires_grad
    tol = dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outcomes[1][1], outcomes[0][1], **tol)
    grads_ref, grads_new = outcomes[0][2], outcomes[1][2]
    assert {n for n, g in grads_new.items() if g is None} == \
        {n for n, g in grads_ref.items() if g is None}
    for name, g in grads_ref.items():
        if g is not None:
            torch.testing.assert_close(grads_new[name], g, **tol, msg=lambda m: f"{name}: {m}")


def test_recorded_call_refuses_inference_running_statistics_before_the_kernel():
    """Running statistics that are inference tensors cannot be updated outside inference mode
    (PyTorch refuses the in-place write); the recorded call refuses before anything moved."""
    _, new = make_pair("39", SMALL_ARGS["39"], dtype=torch.float64)
    with torch.inference_mode():
        new.bn.running_var = new.bn.running_var.clone()
    x = make_input((SMALL_BATCH, SMALL_ARGS["39"][0]), "randn", dtype=torch.float64)
    assert_refused_and_unchanged(new, x, r"gemm_scale_batchnorm: running_var must not be an "
                                         r"inference tensor")


@pytest.mark.parametrize("key,mode", MODEL_MODES, ids=MODEL_MODE_IDS)
def test_backward_inside_autocast_recomputes_in_forward_dtype(key, mode):
    """A float32 forward whose backward() runs inside an autocast region: the recomputation
    stays in float32 (as the forward ran), so the gradients are the float32 reference's."""
    ref, new = make_pair(key, SMALL_ARGS[key], dtype=torch.float32)
    ref.train(mode == "train")
    new.train(mode == "train")
    x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=torch.float32)
    _, grads_ref, grad_out = forward_backward(ref, x)
    new.zero_grad(set_to_none=True)
    x_new = x.clone().requires_grad_()
    out = new(x_new)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out.backward(grad_out)
    grads_new = {"x": x_new.grad, **{n: p.grad for n, p in new.named_parameters()}}
    scale = max(1.0, max(g.abs().max().item() for g in grads_ref.values()))
    assert_same_grads(grads_new, grads_ref, torch.float32, scale)


# --- training parity ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("key", KEYS)
def test_sgd_training_parity(key, dtype, device):
    """5 SGD steps (lr 0.1, momentum 0.9) on the same batches, loss = mean of squares: the same
    losses, parameters and BatchNorm running statistics as the reference."""
    ref, new = make_pair(key, SMALL_ARGS[key], device=device, dtype=dtype)
    ref.train()
    new.train()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ref, new)]
    tol = dict(rtol=tolerance_for(dtype).rtol, atol=tolerance_for(dtype).atol)
    for step in range(5):
        x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=dtype, device=device)
        losses = []
        for model, optimizer in zip((ref, new), optimizers):
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], **tol, msg=lambda m: f"step {step}: {m}")
    assert_same_state(new, ref, **tol)


# --- opcheck with inputs that require grad --------------------------------------------------

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_static", "test_aot_dispatch_dynamic")


def _grad_opcheck_cases():
    """Every differentiable tensor argument requires grad; running statistics never do.

    float64: opcheck compares eager and AOT gradients at float32-level tolerances, and in
    training mode BatchNorm makes the output invariant to scale (up to eps), so scale's true
    gradient is ~0 and float32 rounding in the two traces would dominate it."""
    x, w, b = linear_leaves(6, 12, 20)
    vec = lambda offset=0.0: leaf(20, offset=offset)  # noqa: E731
    stats = lambda: (torch.randn(20, dtype=torch.float64),  # noqa: E731
                     torch.rand(20, dtype=torch.float64) + 0.5, torch.tensor(3))
    return {
        "matmul_avgpool_gelu_scale_max-k3": (
            ops.matmul_avgpool_gelu_scale_max, (x, w, b, 3, 2.0)),
        "matmul_avgpool_gelu_scale_max-k20": (
            ops.matmul_avgpool_gelu_scale_max, (x, w, b, 20, -0.5)),
        "matmul_sum_max_avgpool_logsumexp_logsumexp": (
            ops.matmul_sum_max_avgpool_logsumexp_logsumexp, (x, w, b)),
        "gemm_scale_batchnorm-train": (
            ops.gemm_scale_batchnorm, (x, w, b, vec(), vec(1.0), vec(), *stats(), True, 0.1,
                                       1e-5)),
        "gemm_scale_batchnorm-train-cumulative-scale1": (
            ops.gemm_scale_batchnorm, (x, w, b, vec()[:1].detach().requires_grad_(), vec(1.0),
                                       vec(), *stats(), True, None, 1e-3)),
        "gemm_scale_batchnorm-eval": (
            ops.gemm_scale_batchnorm, (x, w, b, vec(), vec(1.0), vec(), *stats(), False, 0.1,
                                       1e-5)),
        "matmul_groupnorm_leakyrelu_sum": (
            ops.matmul_groupnorm_leakyrelu_sum, (x, w, b, 4, vec(1.0), vec(), 1e-5, 0.01)),
        "avgpool_fold_linear": (ops.avgpool_fold_linear, (w, b, 3)),
        "sum_fold_linear": (ops.sum_fold_linear, (w, b)),
        "gemm_nt": (ops.gemm_nt, (x, w)),
    }


@pytest.mark.parametrize("case", list(_grad_opcheck_cases()))
def test_opcheck_with_grad(case):
    op, args = _grad_opcheck_cases()[case]
    assert any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    result = torch.library.opcheck(op.default, args, test_utils=OPCHECK_UTILS)
    assert result == {u: "SUCCESS" for u in OPCHECK_UTILS}


def test_every_differentiable_op_has_an_autograd_kernel():
    registered = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas()
                  if s.name.startswith("fusedops::")}
    for name in registered - HOUSEKEEPING_OPS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fusedops::{name}", "Autograd"), name


# --- TorchScript ----------------------------------------------------------------------------

@pytest.mark.parametrize("key,mode", MODEL_MODES, ids=MODEL_MODE_IDS)
def test_backward_through_torchscript(key, mode):
    """The Autograd kernel sits in the dispatcher, so a scripted ModelNew is differentiable; three
    iterations take the profiling executor past its profiling runs."""
    _, eager = make_pair(key, SMALL_ARGS[key], dtype=torch.float64)
    eager.train(mode == "train")
    scripted = torch.jit.script(copy.deepcopy(eager))
    for _ in range(3):
        x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=torch.float64)
        out_eager, grads_eager, grad_out = forward_backward(eager, x)
        out_scripted, grads_scripted, _ = forward_backward(scripted, x, grad_out)
        torch.testing.assert_close(out_scripted, out_eager, rtol=0, atol=0)
        assert_same_grads(grads_scripted, grads_eager, torch.float64)
    assert_same_state(scripted, eager)
