"""fusedops.CudaGraphs (issue 38): a model captured per batch size and replayed, as a server calls
it. Every graph's output is compared with the eager call of the same model on the same input
(torch.equal: the same kernels on the same bytes) and with the reference models run by PyTorch
(the accuracy contract, fusedops_testing); after each kind of weight update; on two streams and
from several threads; without allocating. CPU inputs run eagerly, and grad mode and training mode
are refused on every device (the CPU tests below run everywhere).
"""
from __future__ import annotations

import copy
import gc

import pytest
import torch
import torch.nn as nn

import fusedops
from fusedops_testing import (KEYS, assert_contract, busy_stream, make_input, make_pair,
                              run_threads, run_trio)

SMALL_ARGS = {"98": (64, 96, 6, 2.0), "18": (64, 96), "39": (64, 96, (96,)), "62": (64, 96, 8)}
# test_small_batch.py's sizes: edges of the small-batch kernels' tiles (out_features not a
# multiple of 16, in_features leaving a partial 256-wide round).
SIZES = {"98": (1032, 1000, 4, 2.0), "18": (1032, 1000), "39": (1032, 1000, (1000,)),
         "62": (1032, 1000, 8)}
LINEAR = {"98": "matmul", "18": "linear", "39": "gemm", "62": "fc"}
MAX_ROWS = 256


def models(key, args, *, device="cuda", dtype=torch.float32):
    ref, new = make_pair(key, args, device=device, dtype=dtype)
    return ref.eval(), new.eval()


def reference64(ref):
    return copy.deepcopy(ref).double()


def assert_equal(out, eager, what):
    assert out.shape == eager.shape and out.dtype == eager.dtype, (
        f"{what}: {tuple(out.shape)} {out.dtype}, eager {tuple(eager.shape)} {eager.dtype}")
    if not torch.equal(out, eager):
        diff = (out.double() - eager.double()).abs().max().item()
        raise AssertionError(f"{what}: the graph's output differs from the eager call's, by up "
                             f"to {diff:.3e}")


# ---- CPU: no graphs; the same refusals on every device ----------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_cpu_input_runs_the_model_eagerly(key):
    ref, new = models(key, SMALL_ARGS[key], device="cpu")
    graphs = fusedops.CudaGraphs(new)
    x = make_input((5, SMALL_ARGS[key][0]))
    with torch.no_grad():
        out = graphs(x)
        assert_equal(out, new(x), "cpu")
    _, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)
    assert (len(graphs), graphs.captures, graphs.captured_keys()) == (0, 0, [])


@pytest.mark.parametrize("key", KEYS)
def test_grad_mode_is_refused(key):
    _, new = models(key, SMALL_ARGS[key], device="cpu")
    graphs = fusedops.CudaGraphs(new)
    x = make_input((3, SMALL_ARGS[key][0]))
    with torch.enable_grad(), pytest.raises(
            RuntimeError, match=r"torch\.is_grad_enabled\(\) must be False \(a graph replays no "
                                r"autograd\), got True: call under torch\.no_grad\(\)"):
        graphs(x)
    with torch.inference_mode():
        assert_equal(graphs(x), new(x), "inference mode")


@pytest.mark.parametrize("key,module,name", [(k, "", f"ModelNew{k}") for k in KEYS]
                         + [("39", "bn", "bn"), ("62", "gn", "gn")])
def test_training_mode_is_refused(key, module, name):
    """Model 39's BatchNorm updates its running statistics in training mode: a graph would
    replay the eval-mode answer, or the statistics of the captured batch."""
    _, new = models(key, SMALL_ARGS[key], device="cpu")
    new.get_submodule(module).train()
    graphs = fusedops.CudaGraphs(new)
    with torch.no_grad(), pytest.raises(
            RuntimeError, match=rf"the model must be in eval mode .* but {name}\.training is "
                                rf"True: call model\.eval\(\)"):
        graphs(make_input((3, SMALL_ARGS[key][0])))


def test_arguments_are_checked():
    _, new = models("18", SMALL_ARGS["18"], device="cpu")
    with pytest.raises(ValueError, match=r"warmup must be an int >= 1 .*, got 0"):
        fusedops.CudaGraphs(new, warmup=0)
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module, got function"):
        fusedops.CudaGraphs(lambda x: x)
    with torch.no_grad(), pytest.raises(TypeError, match=r"x must be a torch\.Tensor, got list"):
        fusedops.CudaGraphs(new)([[1.0] * 64])
    assert "CudaGraphs" in fusedops.__all__


def test_load_state_dict_clears_and_the_hook_goes_with_the_wrapper():
    """Inference tensors have no version counter: the wrapper's load_state_dict post-hook is
    what sees a load into them. It must not keep the wrapper alive, nor outlive it."""
    _, new = models("18", SMALL_ARGS["18"], device="cpu")
    hooks = len(new._load_state_dict_post_hooks)
    graphs = fusedops.CudaGraphs(new)
    cleared = []
    graphs.clear = lambda: cleared.append(True)
    new.load_state_dict(models("18", SMALL_ARGS["18"], device="cpu")[1].state_dict())
    assert cleared == [True]
    del graphs
    gc.collect()
    assert len(new._load_state_dict_post_hooks) == hooks


# ---- every batch size equals eager -------------------------------------------------------------

def _every_batch(key, args, dtype, batches):
    ref, new = models(key, args, dtype=dtype)
    ref64 = reference64(ref)
    graphs = fusedops.CudaGraphs(new)
    x = make_input((MAX_ROWS, args[0]), dtype=dtype, device="cuda")
    with torch.no_grad():
        expected64 = ref64(x.double())
        for b in batches:
            out = graphs(x[:b])
            assert_equal(out, new(x[:b]), f"batch {b}")
            try:
                assert_contract(out, ref(x[:b]), expected64[:b])
            except AssertionError as e:
                raise AssertionError(f"batch {b}: {e}") from None
        assert graphs.captures == len(graphs) == len(batches)
        # Replays with other values: the static input is refilled, nothing is captured again.
        x2 = make_input((MAX_ROWS, args[0]), dist="randn", dtype=dtype, device="cuda")
        for b in batches[::7] + batches[-1:]:
            assert_equal(graphs(x2[:b]), new(x2[:b]), f"batch {b}, second input")
    assert graphs.captures == len(batches)


@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_every_batch_1_to_256_equals_eager_float32(key):
    _every_batch(key, SIZES[key], torch.float32, list(range(1, MAX_ROWS + 1)))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("key", KEYS)
def test_half_batches_equal_eager(key, dtype):
    _every_batch(key, SIZES[key], dtype, [1, 2, 3, 16, 17, 32, 33, 100, 128, 256])


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS)
def test_spec_size_equals_eager(key):
    """docs/MODELS.md's default sizes (8192 x 8192 weights): the GEMM routes of large rows."""
    problem = fusedops.get_problem(key)
    _every_batch(key, problem.init_args, torch.float32, [1, 128])


@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_reference_model_is_captured_too(key):
    """Any module whose forward takes one tensor: the reference models (PyTorch's own ops)."""
    ref, _ = models(key, SIZES[key])
    graphs = fusedops.CudaGraphs(ref)
    with torch.no_grad():
        for b in (1, 17, 256):
            x = make_input((b, SIZES[key][0]), device="cuda")
            assert_equal(graphs(x), ref(x), f"reference, batch {b}")
    assert graphs.captures == 3


# ---- weight updates ------------------------------------------------------------------------

def _in_place(new, key):
    getattr(new, LINEAR[key]).weight.mul_(-0.5)


def _load_state_dict(new, key):
    new.load_state_dict(models(key, SMALL_ARGS[key])[1].state_dict())


def _new_parameter(new, key):
    linear = getattr(new, LINEAR[key])
    linear.weight = nn.Parameter(linear.weight.detach() * -0.5)


def _data_assignment(new, key):
    linear = getattr(new, LINEAR[key])
    linear.weight.data = linear.weight.detach() * -0.5


UPDATES = {"in_place": _in_place, "load_state_dict": _load_state_dict,
           "new_parameter": _new_parameter, "data_assignment": _data_assignment}


@pytest.mark.cuda
@pytest.mark.parametrize("update", list(UPDATES))
@pytest.mark.parametrize("key", KEYS)
def test_weight_update_recaptures(key, update):
    ref, new = models(key, SMALL_ARGS[key])
    graphs = fusedops.CudaGraphs(new)
    x = make_input((16, SMALL_ARGS[key][0]), device="cuda")
    with torch.no_grad():
        before = graphs(x)
        graphs(make_input((3, SMALL_ARGS[key][0]), device="cuda"))
        assert (graphs.captures, len(graphs)) == (2, 2)
        UPDATES[update](new, key)
        out = graphs(x)
        assert (graphs.captures, len(graphs)) == (3, 1), "no recapture after the update"
        assert_equal(out, new(x), f"after {update}")
        assert not torch.equal(out, before), f"{update} did not change the output: no test"
        ref.load_state_dict(new.state_dict())
    _, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)


@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_inference_mode_model_follows_load_state_dict(key):
    """Loaded as Triton loads it (inference tensors: no version counter), the load is seen
    through the wrapper's load_state_dict post-hook."""
    with torch.inference_mode():
        _, new = models(key, SMALL_ARGS[key])
        graphs = fusedops.CudaGraphs(new)
        x = make_input((16, SMALL_ARGS[key][0]), device="cuda")
        before = graphs(x)
        new.load_state_dict(models(key, SMALL_ARGS[key])[1].state_dict())
        out = graphs(x)
        assert graphs.captures == 2
        assert_equal(out, new(x), "after load_state_dict")
        assert not torch.equal(out, before)


@pytest.mark.cuda
@pytest.mark.parametrize("key", ["98", "18"])
def test_clear_after_a_write_no_counter_sees(key):
    """A write through .data bumps no version counter: neither the fold cache nor the wrapper
    sees it (docs/GUIDE.md). clear_fold_cache() and clear() are the remedy."""
    ref, new = models(key, SMALL_ARGS[key])
    graphs = fusedops.CudaGraphs(new)
    x = make_input((16, SMALL_ARGS[key][0]), device="cuda")
    with torch.no_grad():
        graphs(x)
        getattr(new, LINEAR[key]).weight.data.mul_(-0.5)
        torch.ops.fusedops.clear_fold_cache()
        graphs.clear()
        assert len(graphs) == 0
        out = graphs(x)
        assert graphs.captures == 2
        assert_equal(out, new(x), "after clear()")
        ref.load_state_dict(new.state_dict())
    _, expected, expected64, _ = run_trio(ref, new, x)
    assert_contract(out, expected, expected64)


# ---- streams and threads -------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_two_streams_interleaved(key):
    """Captured first (a capture synchronizes the device), then replayed with s1 busy, so that
    its replays run after s2's: had the streams shared a graph, s2's copy-ins would overwrite
    the input of s1's pending replays of the same shape."""
    _, new = models(key, SIZES[key])
    graphs = fusedops.CudaGraphs(new)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    inputs = [make_input((b, SIZES[key][0]), device="cuda") for b in (8, 8, 8, 8, 33, 33, 8, 8)]
    with torch.no_grad():
        expected = [new(x) for x in inputs]
        for stream in (s1, s2):
            with torch.cuda.stream(stream):
                for b in (8, 33):
                    graphs(make_input((b, SIZES[key][0]), device="cuda"))
        torch.cuda.synchronize()
        keep = busy_stream(s1)
        outputs = []
        for i, x in enumerate(inputs):
            with torch.cuda.stream((s1, s2)[i % 2]):
                outputs.append(graphs(x))
    torch.cuda.synchronize()
    del keep
    for i, (out, eager) in enumerate(zip(outputs, expected)):
        assert_equal(out, eager, f"call {i} on s{i % 2 + 1}")
    assert {k.stream for k in graphs.captured_keys()} == {s1.cuda_stream, s2.cuda_stream}
    assert graphs.captures == 4  # two shapes on each stream


@pytest.mark.cuda
@pytest.mark.parametrize("own_stream", [True, False], ids=["stream_each", "one_stream"])
@pytest.mark.parametrize("key", KEYS)
def test_threads(key, own_stream):
    """Threads with a stream each (a server's workers), and threads sharing the default stream
    (one graph: the per-stream lock keeps each copy-in, replay and clone together)."""
    count, calls = 4, 12
    _, new = models(key, SIZES[key])
    graphs = fusedops.CudaGraphs(new)
    inputs = [[make_input((b, SIZES[key][0]), device="cuda") for b in (5, 64, 5) * (calls // 3)]
              for _ in range(count)]
    with torch.no_grad():
        expected = [[new(x) for x in xs] for xs in inputs]
    streams = [torch.cuda.Stream() if own_stream else torch.cuda.current_stream()
               for _ in range(count)]
    torch.cuda.synchronize()
    outputs = [[None] * calls for _ in range(count)]

    def work(t):
        with torch.no_grad(), torch.cuda.stream(streams[t]):
            for i, x in enumerate(inputs[t]):
                outputs[t][i] = graphs(x)
        streams[t].synchronize()

    run_threads(count, work)
    for t in range(count):
        for i in range(calls):
            assert_equal(outputs[t][i], expected[t][i], f"thread {t}, call {i}")
    assert graphs.captures == 2 * (count if own_stream else 1)


# ---- outputs and memory ----------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_reuse_output_and_fresh_outputs(key):
    _, new = models(key, SMALL_ARGS[key])
    reuse = fusedops.CudaGraphs(new, reuse_output=True)
    fresh = fusedops.CudaGraphs(new)
    x1, x2, x3 = (make_input((b, SMALL_ARGS[key][0]), device="cuda") for b in (7, 7, 9))
    with torch.no_grad():
        a = reuse(x1)
        b = reuse(x2)
        assert a is b, "reuse_output=True: the same shape returns the static output"
        assert_equal(b, new(x2), "reused output")
        assert reuse(x3) is not a
        p1, p2 = fresh(x1), fresh(x2)
        assert p1 is not p2 and p1.data_ptr() != p2.data_ptr()
        assert_equal(p1, new(x1), "the first output after the second call")
        assert_equal(p2, new(x2), "the second output")


@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_replay_allocates_nothing(key):
    _, new = models(key, SIZES[key])
    reuse = fusedops.CudaGraphs(new, reuse_output=True)
    fresh = fusedops.CudaGraphs(new)
    x = make_input((24, SIZES[key][0]), device="cuda")
    with torch.no_grad():
        reuse(x), fresh(x)  # captures
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # processes the captures' side-stream frees
        allocated = torch.cuda.memory_allocated()
        blocks = torch.cuda.memory_stats()["allocation.all.current"]
        for _ in range(5):
            reuse(x)
        torch.cuda.synchronize()
        # Not equality: torch frees blocks of its own lazily (on the H200 two blocks of ~2 MiB
        # went during the replays even after empty_cache()); a replay must not add any.
        now = (torch.cuda.memory_allocated(), torch.cuda.memory_stats()["allocation.all.current"])
        assert now[0] <= allocated and now[1] <= blocks, (
            f"a replay with reuse_output=True allocated: {now} after, {(allocated, blocks)} before")
        allocated, blocks = now
        out = fresh(x)
        assert torch.cuda.memory_stats()["allocation.all.current"] == blocks + 1, (
            "a replay allocated more than its returned clone")
        del out
        assert torch.cuda.memory_allocated() == allocated


# ---- keys: autocast, inference mode ------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("key", KEYS)
def test_autocast_regions(key):
    """A graph captured in one autocast region replays in the next, equal to the eager call
    (captured with autocast's cast cache off: a graph holding a cast cached by the warm-up would
    read it after the region that cached it had freed it); autocast off is another key."""
    _, new = models(key, SIZES[key])
    graphs = fusedops.CudaGraphs(new)
    x1, x2 = (make_input((16, SIZES[key][0]), device="cuda") for _ in range(2))
    with torch.no_grad():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out1, eager1 = graphs(x1), new(x1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out2, eager2 = graphs(x2), new(x2)
        assert graphs.captures == 1
        assert_equal(out1, eager1, "first autocast region")
        assert_equal(out2, eager2, "second autocast region")
        assert_equal(graphs(x2), new(x2), "autocast off")
    assert graphs.captures == 2
    assert [k.autocast_dtype for k in graphs.captured_keys()] == [torch.bfloat16, None]


@pytest.mark.cuda
def test_inference_mode_is_a_key_and_non_tensor_outputs_are_refused():
    _, new = models("62", SMALL_ARGS["62"])
    graphs = fusedops.CudaGraphs(new)
    x = make_input((4, SMALL_ARGS["62"][0]), device="cuda")
    with torch.no_grad():
        assert_equal(graphs(x), new(x), "no_grad")
    with torch.inference_mode():
        assert_equal(graphs(x), new(x), "inference mode")
    assert [k.inference_mode for k in graphs.captured_keys()] == [False, True]

    class Pair(nn.Module):
        def forward(self, x):
            return x * 2, x

    with torch.no_grad(), pytest.raises(TypeError, match=r"must return one tensor, got tuple"):
        fusedops.CudaGraphs(Pair().eval())(x)

