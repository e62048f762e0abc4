"""Which calls reuse their weight folds (ops/common/fold_cache.h, "When folds are cached"), and
the fold checker that finds writes no version counter sees (issue 35).

- A ModelNew timed as KernelBench times it (training mode, grad mode on, parameters that require
  grad, the same weights every call) folds once and returns what a torch.no_grad() call returns;
  on beabbf1 every such call folded again (model 18: 0.137 ms a call instead of 0.020).
- A raw operator call with the default cache_folds=None that autograd records with a weight that
  requires grad still folds afresh (gradcheck perturbs weights through .data; test_autograd.py's
  gradchecks), and cache_folds=False never caches.
- Training in lockstep with the reference (SGD with momentum, Adam; an eval-mode forward with
  grad mode on between steps): every optimizer write is followed although the folds are cached.
- fusedops.checking_folds() / FUSEDOPS_CHECK_FOLDS=1 turn a stale fold (a .data write) into an
  error naming the operator, the weight's shape and the largest difference; without them nothing
  is checked and no fold is computed.
"""
import copy

import pytest
import torch

import fusedops
from fusedops.accuracy import tolerance_for
from fusedops_testing import ERROR_FACTOR, KEYS, make_input, make_pair, max_abs, max_abs_err

ops = torch.ops.fusedops
LINEAR = {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}
# Where a call folds its weights: models 98 and 18 on every device (the pooled Linear, the column
# sums), 39 and 62 on CUDA where the float32-accurate GEMM engines split W (3xFP16 on Hopper,
# 3xTF32 elsewhere: both take these sizes, 2^31 FLOP and N = 2048).
FOLDING_ARGS = {"98": (96, 160, 4, 1.5), "18": (96, 160), "39": (2048, 2048, (2048,)),
                "62": (2048, 2048, 64)}
# Model 98 at 200 rows: past the few-row routes, which multiply W's fp16 pair only where its fold
# outlives the call (not under grad mode, where the optimizer may write W after it: planner.cpp),
# so that a grad-mode call and a torch.no_grad() one run the same kernels.
FOLDING_BATCH = {"98": 200, "18": 24, "39": 256, "62": 256}


def misses():
    return ops.fold_cache_stats()["misses"]


def folding_cases():
    """(key, device) where a call folds; 39 and 62 fold nothing on the CPU."""
    cases = []
    for key in KEYS:
        for device in ("cpu", "cuda"):
            marks = [pytest.mark.cuda] if device == "cuda" else []
            if device == "cpu" and key in ("39", "62"):
                continue
            cases.append(pytest.param(key, device, id=f"{key}-{device}", marks=marks))
    return cases


def kernelbench_pair(key, device, dtype=torch.float32):
    """As KernelBench's eval_kernel_against_ref makes them: constructed under torch.no_grad()
    (parameters still require grad), moved, left in training mode."""
    with torch.no_grad():
        ref, new = make_pair(key, FOLDING_ARGS[key], device=device, dtype=dtype)
    assert new.training and all(p.requires_grad for p in new.parameters())
    return ref, new


def folding_input(key, device, dtype=torch.float32):
    return make_input((FOLDING_BATCH[key], FOLDING_ARGS[key][0]), "rand", dtype=dtype,
                      device=device)


@pytest.mark.parametrize("key,device", folding_cases())
def test_kernelbench_condition_folds_once(key, device):
    """100 calls with grad mode on: the first folds, the other 99 fold nothing, and each returns
    what a torch.no_grad() call returns (bit for bit: the same kernels on the same fold). Model
    39 in training mode updates its running statistics each call, as the reference does: its
    output depends only on the batch."""
    _, new = kernelbench_pair(key, device)
    x = folding_input(key, device)
    with torch.no_grad():
        expected = new(x)
    assert torch.is_grad_enabled()
    start = misses()
    outputs = [new(x) for _ in range(100)]
    assert misses() == start, (
        f"model {key}: {misses() - start} folds in 100 calls with unchanged weights under grad "
        "mode (KernelBench's condition); expected none after the no_grad call")
    for out in outputs:
        assert out.requires_grad, "the call was not recorded for autograd"
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("key,device", folding_cases())
def test_raw_op_default_folds_afresh_when_recorded_for_weight_gradients(key, device):
    """The raw operator's default (cache_folds=None): a call autograd records with a weight that
    requires grad folds every time (gradcheck's condition); with frozen weights, or under
    no_grad, it caches; cache_folds=True caches when recorded too."""
    _, new = kernelbench_pair(key, device)
    x = folding_input(key, device)
    linear = getattr(new, LINEAR[key])
    new.cache_folds = None
    before = misses()
    for _ in range(3):
        new(x)
    assert misses() - before == 3
    with torch.no_grad():
        new(x)
        before = misses()
        new(x)
        assert misses() == before
    new.cache_folds = True
    new(x)
    before = misses()
    new(x)
    assert misses() == before
    # Frozen weights: recorded (x requires grad) but nothing to train: cached.
    new.cache_folds = None
    new.requires_grad_(False)
    xg = x.clone().requires_grad_()
    new(xg)
    before = misses()
    assert new(xg).requires_grad
    assert misses() == before
    assert not linear.weight.requires_grad


@pytest.mark.parametrize("key,device", folding_cases())
def test_cache_folds_false_folds_every_call_under_grad(key, device):
    """What a training step pays: cache_folds=False folds on every call, the same result."""
    _, new = kernelbench_pair(key, device)
    x = folding_input(key, device)
    with torch.no_grad():
        expected = new(x)
    new.cache_folds = False
    before = misses()
    for _ in range(4):
        torch.testing.assert_close(new(x), expected, rtol=0, atol=0)
    assert misses() - before == 4


SMALL_ARGS = {"98": (13, 21, 4, 2.0), "18": (13, 21), "39": (13, 21, (21,)), "62": (13, 21, 3)}
SMALL_BATCH = 7


@pytest.mark.parametrize("optimizer", ["sgd-momentum", "adam"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("key", KEYS)
def test_training_lockstep_with_an_eval_forward_between_steps(key, dtype, optimizer, device):
    """5 steps of ModelNew and the reference side by side on the same batches (loss = mean of
    squares), each followed by an eval-mode forward with grad mode on (cached folds, a recorded
    call): losses, eval outputs and parameters agree at every step within the accuracy contract.
    float64: within its tolerance of the reference. float32: against the reference trained in
    float64 alongside, no further than a few times PyTorch's own float32 training (Adam's first
    steps move each weight by about lr times the sign of its gradient, so where a gradient entry
    is near zero any float32 rounding, PyTorch's own too, can flip a step)."""
    ref, new = make_pair(key, SMALL_ARGS[key], device=device, dtype=dtype)
    ref64 = copy.deepcopy(ref).double()
    models = (ref, new, ref64)
    if key == "39" and optimizer == "adam":
        # In training mode BatchNorm removes the Linear's bias (the batch mean) and the scale (the
        # batch variance, up to eps): their gradients are rounding noise, in the reference as in
        # ours, and Adam divides a gradient by its own RMS, moving them by noise alone (1e-10 in
        # float64 after five steps, 0.04 in float32 after one). Frozen in all three models.
        for model in models:
            model.gemm.bias.requires_grad_(False)
            model.scale.requires_grad_(False)
    make = {"sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.05)}[optimizer]
    optimizers = [make([p for p in m.parameters() if p.requires_grad]) for m in models]
    x_eval = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "rand", dtype=dtype, device=device)

    def agree(ours, theirs, exact, what):
        if dtype == torch.float64:
            tol = tolerance_for(dtype)
            torch.testing.assert_close(ours, theirs, rtol=tol.rtol, atol=tol.atol,
                                       msg=lambda m: f"{what}: {m}")
            return
        err, torch_err = max_abs_err(ours, exact), max_abs_err(theirs, exact)
        floor = tolerance_for(dtype).atol * max(1.0, max_abs(exact))
        assert err <= ERROR_FACTOR * torch_err + floor, (
            f"{what}: error against the float64 reference {err:.3e}, PyTorch's float32 "
            f"{torch_err:.3e} (allowed {ERROR_FACTOR} x that + {floor:.1e})")

    for step in range(5):
        x = make_input((SMALL_BATCH, SMALL_ARGS[key][0]), "randn", dtype=dtype, device=device)
        losses = []
        for model, opt in zip(models, optimizers):
            model.train()
            opt.zero_grad()
            loss = model(x.to(next(model.parameters()).dtype)).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        agree(losses[1], losses[0], losses[2], f"loss of step {step}")
        evals = []
        for model in models:
            model.eval()
            evals.append(model(x_eval.to(next(model.parameters()).dtype)))
        assert evals[1].requires_grad
        agree(evals[1], evals[0], evals[2], f"eval output after step {step}")
        states = [m.state_dict() for m in models]
        for name, ours in states[1].items():
            if ours.is_floating_point():
                agree(ours, states[0][name], states[2][name], f"{name} after step {step}")
            else:
                assert torch.equal(ours, states[0][name]), name


# --- the fold checker ------------------------------------------------------------------------

def stale_model(key, device):
    """A model whose fold is cached, then a .data write to its weight: the version counter does
    not see it, so the cache would return the old fold."""
    _, new = kernelbench_pair(key, device)
    x = folding_input(key, device)
    with torch.no_grad():
        before_write = new(x)
    getattr(new, LINEAR[key]).weight.data.mul_(-2.0)
    return new, x, before_write


@pytest.mark.parametrize("key,device", folding_cases())
def test_checking_folds_catches_a_data_write(key, device):
    new, x, _ = stale_model(key, device)
    weight = getattr(new, LINEAR[key]).weight
    shape = f"[{weight.shape[0]}, {weight.shape[1]}]"
    names = {"98": "matmul_avgpool_gelu_scale_max",
             "18": "matmul_sum_max_avgpool_logsumexp_logsumexp",
             "39": "gemm_scale_batchnorm", "62": "matmul_groupnorm_leakyrelu_sum"}
    with fusedops.checking_folds():
        with pytest.raises(RuntimeError) as raised:
            new(x)
    message = str(raised.value)
    assert f"stale weight fold in {names[key]}" in message, message
    assert shape in message, message
    assert "differs from a fresh fold by up to " in message, message
    largest = float(message.split("by up to ")[1].split(" ")[0])
    assert largest > 0, message


@pytest.mark.parametrize("key,device", folding_cases())
def test_without_checking_nothing_is_checked_or_computed(key, device):
    """The documented limit, unchanged: the stale fold is returned, no fold is computed."""
    new, x, before_write = stale_model(key, device)
    start = misses()
    with torch.no_grad():
        torch.testing.assert_close(new(x), before_write, rtol=0, atol=0)
    new(x)
    assert misses() == start


@pytest.mark.parametrize("key,device", folding_cases())
def test_checking_passes_fresh_folds_and_the_environment_turns_it_on(key, device):
    _, new = kernelbench_pair(key, device)
    x = folding_input(key, device)
    with torch.no_grad():
        expected = new(x)
    with fusedops.checking_folds():
        torch.testing.assert_close(new(x), expected, rtol=0, atol=0)  # a checked hit
        with fusedops.checking_folds():  # scopes nest
            new(x)
        new(x)
    getattr(new, LINEAR[key]).weight.data.add_(1.0)
    with fusedops.settings(FUSEDOPS_CHECK_FOLDS="1"):
        with pytest.raises(RuntimeError, match="stale weight fold"):
            new(x)
    with fusedops.settings(FUSEDOPS_CHECK_FOLDS="0"):
        new(x)  # off again: the stale fold, no error


def test_closing_a_fold_check_that_is_not_open_is_an_error():
    with pytest.raises(RuntimeError, match="none is open"):
        ops.fold_check(False)
