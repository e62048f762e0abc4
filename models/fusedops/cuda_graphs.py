"""fusedops.CudaGraphs: a model's forward captured as a CUDA graph per input shape and replayed,
for servers whose small-batch calls cost more host time than GPU time (issue 38).

    graphs = fusedops.CudaGraphs(model.eval())
    with torch.no_grad():
        out = graphs(x)   # first call of a shape: warm up, capture, replay; later calls: replay

One graph per key: x's shape, dtype and device, the caller's current CUDA stream, inference mode
and the CUDA autocast dtype. A call copies x into the graph's static input, replays on the
current stream and returns a clone of the static output (`reuse_output=True`: the static output
itself, valid until the next call of this wrapper on that stream). CPU inputs run the model
eagerly. Grad mode and training mode are refused on every device: a graph replays no autograd,
no BatchNorm statistics update, no dropout draw.

Weights: each call compares every parameter and buffer of the model (identity, data pointer,
version counter) with those the graphs were captured with, and drops every graph when one
differs: in-place writes (`w.mul_()` under no_grad, optimizer steps), `load_state_dict`,
`param.data = t`, `module.weight = nn.Parameter(t)` are followed. What no version counter sees
is not: writes through `.data`, to the storage, from outside torch, and in-place writes to
inference tensors other than through the model's own `load_state_dict` (a post-hook clears the
graphs): call `clear()` after such a write, after `torch.ops.fusedops.clear_fold_cache()` (the
graphs read the folds cached at warm-up) and after a change of `fusedops.settings` (they replay
the routes of their capture). Change weights only when no replay is pending on the GPU
(synchronize the serving streams first, as an in-place write racing a call needs anyway): a
replay reads the folds of its capture, which the next capture's warm-up frees.

Streams and threads: graphs are per stream, so threads on their own streams replay in parallel;
each stream's graphs share one memory pool, and a lock per stream keeps a copy-in, replay and
clone-out together (two threads on one stream stay correct). Captures take a process-wide lock.
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import NamedTuple

import torch

# torch.cuda.graph synchronizes the device and empties the allocator's cache on entry, not to be
# done while another thread of the process captures. Captures are rare: one at a time.
_CAPTURE_LOCK = threading.Lock()


class GraphKey(NamedTuple):
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    stream: int                        # the caller's current stream, its cuda_stream handle
    inference_mode: bool
    autocast_dtype: torch.dtype | None  # None: CUDA autocast off


def _clear_after_load(wrapper_ref, module, incompatible_keys):
    wrapper = wrapper_ref()
    if wrapper is not None:
        wrapper.clear()


class _Entry:
    __slots__ = ("graph", "static_in", "static_out", "lock")

    def __init__(self, graph, static_in, static_out, lock):
        self.graph, self.static_in, self.static_out, self.lock = graph, static_in, static_out, lock


class CudaGraphs:
    """Captures `model` (a module whose forward takes one tensor and returns one tensor) per
    GraphKey and replays it. `warmup`: eager calls on a side stream before each capture (they
    make the folds the graph reads). `pool`: a torch.cuda.graph_pool_handle() for every graph,
    only for graphs all replayed on one stream; default: a pool per stream, new after clear().
    `captures` counts the captures made; len() the graphs held."""

    def __init__(self, model: torch.nn.Module, *, warmup: int = 1, pool=None,
                 reuse_output: bool = False):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"fusedops.CudaGraphs: model must be a torch.nn.Module, "
                            f"got {type(model).__name__}")
        if not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"fusedops.CudaGraphs: warmup must be an int >= 1 (the warm-up "
                             f"call makes the folds the graph replays), got {warmup!r}")
        self.model, self.warmup, self.reuse_output = model, warmup, reuse_output
        self.captures = 0
        self._pool = pool
        self._lock = threading.Lock()   # guards _graphs, _streams, _state, captures
        self._graphs: dict[tuple, _Entry] = {}
        self._streams: dict[int, tuple] = {}  # stream handle -> (pool, lock)
        self._state = None
        # The modules' own parameter and buffer dicts, walked at every call: model.modules() and
        # model.parameters() cost several times as much per call. A module added to the model
        # later is seen after clear().
        self._tensor_dicts = self._dicts_of(model)
        # Inference tensors have no version counter: a load_state_dict would go unseen. (A
        # scripted model takes no Python hooks: call clear() after loading into it.)
        if not isinstance(model, torch.jit.ScriptModule):
            handle = model.register_load_state_dict_post_hook(
                functools.partial(_clear_after_load, weakref.ref(self)))
            weakref.finalize(self, handle.remove)

    def __len__(self) -> int:
        return len(self._graphs)

    def captured_keys(self) -> list[GraphKey]:
        with self._lock:
            return [GraphKey(*key) for key in self._graphs]

    def clear(self) -> None:
        """Drops every graph and its memory pool; the next call of each key captures again."""
        with self._lock:
            self._graphs.clear()
            self._streams.clear()
            self._state = None
            self._tensor_dicts = self._dicts_of(self.model)

    @staticmethod
    def _dicts_of(model):
        return [(m, d) for m in model.modules() for d in (m._parameters, m._buffers)]

    def _weights_state(self) -> list:
        state = []
        for module, tensors in self._tensor_dicts:
            if module.training:
                self._refuse_training()
            for t in tensors.values():
                if t is not None:
                    state.append((id(t), t.data_ptr(), None if t.is_inference() else t._version))
        return state

    def _refuse_training(self):
        name = next(name for name, m in self.model.named_modules() if m.training)
        raise RuntimeError(
            f"fusedops.CudaGraphs: the model must be in eval mode (a graph replays no BatchNorm "
            f"statistics update and no dropout draw), but "
            f"{name or type(self.model).__name__}.training is True: call model.eval()")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"fusedops.CudaGraphs: x must be a torch.Tensor, "
                            f"got {type(x).__name__}")
        if torch.is_grad_enabled():
            raise RuntimeError("fusedops.CudaGraphs: torch.is_grad_enabled() must be False (a "
                               "graph replays no autograd), got True: call under "
                               "torch.no_grad() or torch.inference_mode()")
        state = self._weights_state()
        if x.device.type != "cuda":
            return self.model(x)
        # The raw stream handle: torch.cuda.current_stream() builds a Stream object per call.
        key = (x.shape, x.dtype, x.device, torch._C._cuda_getCurrentRawStream(x.get_device()),
               torch.is_inference_mode_enabled(),
               torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None)
        with self._lock:
            if state != self._state:
                self._graphs.clear()
                self._streams.clear()
                self._state = state
            entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(key, x, state)
        with entry.lock:  # the next copy-in on this stream must come after this clone
            entry.static_in.copy_(x)
            entry.graph.replay()  # on the current stream
            return entry.static_out if self.reuse_output else entry.static_out.clone()

    def _capture(self, key, x, state) -> _Entry:
        with _CAPTURE_LOCK:
            with self._lock:
                entry = self._graphs.get(key)
                if entry is not None:  # another thread on this stream captured it meanwhile
                    return entry
                if key[3] not in self._streams:
                    # A lock per pool, not per graph: a graph captured later may keep its output
                    # where an earlier one keeps its temporaries, so one graph's replay must not
                    # come between another's replay and clone.
                    pool = torch.cuda.graph_pool_handle() if self._pool is None else self._pool
                    self._streams[key[3]] = (pool, threading.Lock())
                pool, lock = self._streams[key[3]]
            caller = torch.cuda.current_stream(x.device)
            side = torch.cuda.Stream(device=x.device)
            static_in = x.detach().clone(memory_format=torch.contiguous_format)
            side.wait_stream(caller)
            # Autocast caches weight casts for its region: a graph that read the warm-up's cast
            # would read freed memory once the caller's autocast region ends.
            autocast = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"),
                                      enabled=key[5] is not None, cache_enabled=False)
            try:
                with torch.cuda.device(x.device), autocast:
                    with torch.cuda.stream(side):
                        for _ in range(self.warmup):
                            self.model(static_in)
                    graph = torch.cuda.CUDAGraph()
                    # thread_local: other threads' CUDA calls cannot invalidate this capture.
                    with torch.cuda.graph(graph, pool=pool, stream=side,
                                          capture_error_mode="thread_local"):
                        static_out = self.model(static_in)
            finally:
                caller.wait_stream(side)
            if not isinstance(static_out, torch.Tensor):
                raise TypeError(f"fusedops.CudaGraphs: the model must return one tensor, "
                                f"got {type(static_out).__name__}")
            entry = _Entry(graph, static_in, static_out, lock)
            with self._lock:
                self.captures += 1
                if self._state == state:  # else the weights changed meanwhile: use it once
                    self._graphs[key] = entry
            return entry
