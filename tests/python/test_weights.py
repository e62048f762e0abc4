"""The output follows every change of the weights (in-place edits, optimizer steps,
load_state_dict, .to(), replaced Parameters), and a steady-state forward does not refold
(fold_cache_stats()["misses"] stays put) while an in-place change does refold.
test_serving.py covers threads, CUDA streams, inference mode and memory."""
import pytest
import torch

from fusedops_testing import KEYS, make_input, make_pair
from fusedops.accuracy import assert_within_tolerance, tolerance_for

SMALL_ARGS = {"98": (64, 96, 6, 2.0), "18": (64, 96), "39": (64, 96, (96,)), "62": (64, 96, 8)}
LINEAR = {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}


def misses():
    return torch.ops.fusedops.fold_cache_stats()["misses"]


def linear_of(model, key):
    return getattr(model, LINEAR[key])


def pair(key, device):
    ref, new = make_pair(key, SMALL_ARGS[key], device=device, dtype=torch.float64)
    # eval: model 39 then has no running-statistics side effect between forwards
    return ref.eval(), new.eval()


def assert_follows(ref, new, x):
    with torch.no_grad():
        assert_within_tolerance(new(x), ref(x), tolerance_for(torch.float64))


def x_for(key, device, batch=16):
    return make_input((batch, SMALL_ARGS[key][0]), "randn", dtype=torch.float64, device=device)


@pytest.mark.parametrize("key", KEYS)
def test_in_place_edits(key, device):
    ref, new = pair(key, device)
    x = x_for(key, device)
    assert_follows(ref, new, x)
    w = linear_of(ref, key).weight
    random_weight = torch.randn(w.shape, dtype=w.dtype, device=w.device)
    edits = [lambda m: linear_of(m, key).weight.mul_(2),
             lambda m: linear_of(m, key).bias.add_(0.25),
             lambda m: linear_of(m, key).weight[0].neg_(),
             lambda m: linear_of(m, key).weight[:, -1].zero_(),
             lambda m: linear_of(m, key).weight.copy_(random_weight)]
    if key == "39":
        edits += [lambda m: m.scale.mul_(-0.5), lambda m: m.bn.weight.add_(1.0),
                  lambda m: m.bn.bias.sub_(0.5), lambda m: m.bn.running_var.mul_(3.0),
                  lambda m: m.bn.running_mean.add_(1.0)]
    if key == "62":
        edits += [lambda m: m.gn.weight.mul_(-2.0), lambda m: m.gn.bias.add_(0.5)]
    for edit in edits:
        with torch.no_grad():
            edit(ref)
            edit(new)
        assert_follows(ref, new, x)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("key", KEYS)
def test_optimizer_steps(key, optimizer, device):
    ref, new = pair(key, device)
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.05)}[optimizer]
    opt_ref, opt_new = make(ref.parameters()), make(new.parameters())
    x = x_for(key, device)
    for _ in range(3):
        # The same gradient for both: this test is about following the optimizer's writes
        # (test_autograd.py compares the gradients themselves).
        for p_ref, p_new in zip(ref.parameters(), new.parameters()):
            g = torch.randn_like(p_ref)
            p_ref.grad = g.clone()
            p_new.grad = g.clone()
        opt_ref.step()
        opt_new.step()
        assert_follows(ref, new, x)


def load_other_weights(ref, new, key, device):
    """Both models load the state of a freshly drawn third, as a server's hot swap does."""
    other, _ = make_pair(key, SMALL_ARGS[key], device=device, dtype=torch.float64)
    state = other.state_dict()
    ref.load_state_dict(state, strict=True)
    new.load_state_dict(state, strict=True)


@pytest.mark.parametrize("key", KEYS)
def test_load_state_dict_is_followed(key, device):
    ref, new = pair(key, device)
    x = x_for(key, device)
    assert_follows(ref, new, x)
    load_other_weights(ref, new, key, device)
    assert_follows(ref, new, x)


@pytest.mark.parametrize("key", KEYS)
def test_to_dtype_is_followed(key, device):
    """.float() then .double(): new parameter tensors each time; the result follows."""
    ref, new = pair(key, device)
    x = x_for(key, device)
    assert_follows(ref, new, x)
    ref.float()
    new.float()
    with torch.no_grad():
        assert_within_tolerance(new(x.float()), ref(x.float()), tolerance_for(torch.float32))
    ref.double()
    new.double()
    assert_follows(ref, new, x)


@pytest.mark.parametrize("key", KEYS)
def test_replaced_parameter_is_followed(key, device):
    ref, new = pair(key, device)
    x = x_for(key, device)
    assert_follows(ref, new, x)
    w = torch.randn_like(linear_of(ref, key).weight)
    linear_of(ref, key).weight = torch.nn.Parameter(w.clone())
    linear_of(new, key).weight = torch.nn.Parameter(w.clone())
    assert_follows(ref, new, x)


class _Doubled(torch.nn.Module):
    def forward(self, w):
        return w * 2


@pytest.mark.parametrize("key", KEYS)
def test_parametrized_weight_is_followed(key, device):
    """A weight under torch.nn.utils.parametrize is a property computed on each read, no longer
    in the Linear's parameter table: ModelNew's forward, which reads parameters from nn.Module's
    tables (models/fusedops/model_new.py, _member), reads it through the property, and follows
    a write to the original."""
    ref, new = pair(key, device)
    x = x_for(key, device)
    for model in (ref, new):
        torch.nn.utils.parametrize.register_parametrization(linear_of(model, key), "weight",
                                                            _Doubled())
    assert_follows(ref, new, x)
    for model in (ref, new):
        with torch.no_grad():
            linear_of(model, key).parametrizations.weight.original.mul_(-0.5)
    assert_follows(ref, new, x)


@pytest.mark.parametrize("key", KEYS)
def test_data_write_then_clear_fold_cache(key, device):
    """Writes through .data bypass the version counter (as for autograd); clear_fold_cache()
    is the documented way to make them visible."""
    ref, new = pair(key, device)
    x = x_for(key, device)
    assert_follows(ref, new, x)
    linear_of(ref, key).weight.data.mul_(3.0)
    linear_of(new, key).weight.data.mul_(3.0)
    torch.ops.fusedops.clear_fold_cache()
    assert_follows(ref, new, x)


@pytest.mark.parametrize("key", KEYS)
def test_many_models_alive_and_recycled(key, device):
    """Several models of one shape alive at once each get their own fold, and models created
    after others were freed (memory and TensorImpl addresses may be reused) never see a stale
    fold."""
    pairs = [pair(key, device) for _ in range(3)]
    x = x_for(key, device)
    for _ in range(2):
        for ref, new in pairs:
            assert_follows(ref, new, x)
    for _ in range(6):
        del pairs[0]
        pairs.append(pair(key, device))
        for ref, new in pairs:
            assert_follows(ref, new, x)


@pytest.mark.parametrize("key,mode", [(k, "eval") for k in KEYS] + [("39", "train")])
def test_steady_state_forward_does_not_refold(key, mode, device):
    _, new = pair(key, device)
    new.train(mode == "train")
    x = x_for(key, device)
    with torch.no_grad():
        new(x)  # the first forward may fold
        start = misses()
        for _ in range(5):
            new(x)
        new(x_for(key, device, batch=7))  # another batch size: the fold is per weight
    assert misses() == start, "a forward with unchanged weights recomputed a fold"


@pytest.mark.parametrize("key", ["98", "18"])
def test_in_place_change_refolds(key, device):
    """Models 98 and 18 fold their weights (docs/MODELS.md): an in-place change must refold
    once, and the next forward is steady again."""
    ref, new = pair(key, device)
    x = x_for(key, device)
    with torch.no_grad():
        new(x)
        start = misses()
        linear_of(new, key).weight.mul_(2)
        linear_of(ref, key).weight.mul_(2)
        out = new(x)
        after_change = misses()
        new(x)
        after_steady = misses()
        assert_within_tolerance(out, ref(x), tolerance_for(torch.float64))
    assert after_change > start, "an in-place weight change did not refold"
    assert after_steady == after_change


@pytest.mark.parametrize("key", KEYS)
def test_inference_mode_weights(key, device):
    """A model built under inference_mode holds inference tensors, which carry no version
    counter: their folds are cached by identity, so an in-place change made inside inference
    mode is followed after clear_fold_cache() (the documented remedy), and a model with
    cache_folds=False follows it at once."""
    with torch.inference_mode():
        ref, new = pair(key, device)
        assert linear_of(new, key).weight.is_inference()
        x = x_for(key, device)
        assert_follows(ref, new, x)
        for m in (ref, new):
            linear_of(m, key).weight.mul_(2)
            linear_of(m, key).bias.sub_(1)
        torch.ops.fusedops.clear_fold_cache()
        assert_follows(ref, new, x)
        new.cache_folds = False
        for m in (ref, new):
            linear_of(m, key).weight.mul_(-0.5)
        assert_follows(ref, new, x)


# --- issue 21: writes the fold cache missed ----------------------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_load_state_dict_inside_inference_mode_is_followed(key, device):
    """A model built and used under inference_mode holds inference tensors: load_state_dict
    writes them in place, which no version counter records (they have none), and the first
    call's folds were returned ever after (model 18 off by 11 to 41, model 98 by 13)."""
    with torch.inference_mode():
        ref, new = pair(key, device)
        x = x_for(key, device)
        assert_follows(ref, new, x)
        load_other_weights(ref, new, key, device)
        assert linear_of(new, key).weight.is_inference()
        assert_follows(ref, new, x)


@pytest.mark.parametrize("key", ["98", "18"])
def test_storage_write_then_clear_fold_cache_of_the_weight(key, device):
    """A write through the storage is invisible to every cache (docs/GUIDE.md: "Writes no version
    counter sees"); clearing the folds of that weight alone is the remedy."""
    ref, new = pair(key, device)
    x = x_for(key, device)
    assert_follows(ref, new, x)
    for m in (ref, new):
        w = linear_of(m, key).weight
        w.untyped_storage().copy_((w * -2.0).untyped_storage())
    torch.ops.fusedops.clear_fold_cache([linear_of(new, key).weight])
    assert_follows(ref, new, x)


def test_one_weight_serving_eight_pool_sizes_does_not_refold(device):
    """Model 98's fold depends on the pool size: eight models tying one Linear, called in turn,
    need eight folds of one weight (with four folds a weight, 98% of calls missed)."""
    linear = torch.nn.Linear(64, 96, dtype=torch.float64, device=device)
    pairs = []
    for k in range(1, 9):
        ref, new = make_pair("98", (64, 96, k, 2.0), device=device, dtype=torch.float64)
        ref.matmul, new.matmul = linear, linear
        pairs.append((ref.eval(), new.eval()))
    x = x_for("98", device)
    with torch.no_grad():
        for ref, new in pairs:  # the first call of each pool size folds
            assert_within_tolerance(new(x), ref(x), tolerance_for(torch.float64))
        start = misses()
        for _ in range(3):
            for ref, new in pairs:
                assert_within_tolerance(new(x), ref(x), tolerance_for(torch.float64))
    assert misses() == start, "a pool size's fold was evicted by another's"
