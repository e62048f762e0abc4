// The weight-fold cache: tensors derived from weights (model 98's pooled Linear, model 18's
// column sums, the GEMM engines' splits of W), computed once and reused while the weights stay the same.
//
// Why a cache: a fold reads all of W (268 MB at 8192 x 8192), which costs more than the fused
// call itself, so it must not be redone per call. Why it is built this way: servers load one
// model, run it from several threads each with its own CUDA stream, update or unload it while
// running (Triton's PyTorch backend, libtorch servers), and those are exactly the conditions in
// which a naive cache gives wrong answers or keeps memory. The rules:
//
// Ownership. A fold lives on its weight: the cache attaches a small anchor to the weight's
// TensorImpl (c10::BackendMeta, the TensorImpl's slot for per-tensor metadata), and the
// anchor owns that weight's folds. When the weight tensor dies (its model is freed, or
// `param.data = ...` replaces its data), the anchor dies with it and the folds are freed at that
// moment, on that thread, not at some later call. Detached aliases (`w.detach()`) are separate
// tensors with their own anchors. A weight keeps its folds, least recently used first out,
// within two bounds: their bytes at most kMaxFoldBytesPerWeightBytes times the weight's own
// bytes, and at most kMaxFoldsPerWeight of them. The bytes bound is what limits memory (the
// cache holds at most that multiple of the live weights, and nothing for dead ones); it is
// wide enough for every fold one weight serves at once (a model 98 weight shared by models of
// eight pool sizes holds W/k for each, at most 2.7 x W; a 3xTF32 split is 2 x W), so that
// such a weight never evicts a fold it is about to use again. fold_cache_stats() reports the
// entries and bytes.
//
// Validity. A fold is reused only while every source tensor is the same tensor with the same
// data pointer, sizes, strides, dtype and device and, for ordinary tensors, the same version
// counter (bumped by every in-place write: optimizer steps, load_state_dict, w.mul_(2)).
// A fold is keyed by its kind, its parameter and its secondary sources (the bias): weights
// shared by several models with other biases keep one fold each.
//
// When folds are cached at all (the one rule; a user's sentence in README): a call reuses its
// weights' folds while their version counters say the weights are unchanged, except that a raw
// operator call with the default cache_folds=None that autograd records with a weight that
// requires grad folds afresh; ModelNew passes cache_folds=True, and cache_folds=False never
// caches. Why the exception: torch.autograd.gradcheck perturbs its inputs through `.data`,
// which no version counter sees, and a raw op cannot know whether its caller does that. Why
// ModelNew caches anyway: it owns its weights, and what changes them in training (optimizer
// steps, load_state_dict, param.copy_(), `param.data = t`) is seen; KernelBench times it with
// grad mode on, weights fixed, where a fold per call read all of W again (issue 35). The
// Autograd kernels resolve the rule (autograd/backward_by_recompute.h, RecordedCall); the
// backend kernels take the resolved value, None meaning cache.
//
// Checking (a debugging aid for writes the cache cannot see, below): with FUSEDOPS_CHECK_FOLDS=1
// or inside a FoldCheckScope (fusedops.h; Python: `with fusedops.checking_folds():`), every cache hit is
// compared with a fresh fold, and a difference raises an error naming the operator, the fold,
// the weight's shape and the largest difference. Off, a hit costs one more atomic load.
//
// Writes no cache can see, because nothing about the tensor changes but its bytes (remedy:
// clear_fold_cache() after the write, or cache_folds=False on the model):
// - in-place writes to an inference tensor (made under torch.inference_mode /
//   c10::InferenceMode, as Triton loads its models), which has no version counter, made inside
//   inference mode (ModelNew's load_state_dict clears its own folds, models/fusedops);
// - writes through `tensor.data` (another tensor, with a version counter of its own; `detach()`
//   shares the weight's, so its writes are seen);
// - writes to the storage: `untyped_storage().copy_()`, `storage().fill_()`;
// - writes from outside torch: a host that memcpy's into data_ptr(), a numpy array aliasing the
//   weight, share_memory() weights written by another process.
//
// Threads. Lookups of different weights share no lock (a mutex per weight, and a striped lock
// only to attach an anchor); a steady-state hit allocates nothing and compares no strings.
// Concurrent first calls on one weight compute its fold once: the others wait for it.
//
// CUDA streams. A fold is computed on the stream current for the call that missed (its
// creator). The entry records an event after the fold's kernels; a call on any other stream
// makes its stream wait on that event before its own kernels read the fold (a GPU-side wait:
// the host never blocks), until the event is seen complete. The fold's memory is marked used
// by every stream that reads it (recordStream), so when the fold is freed (its weight died, it
// went stale, clear_fold_cache()) the caching allocator does not hand its memory out again
// until those streams' work is done. A fold missed during CUDA-graph capture is computed inside
// the graph and not cached (its values exist only when the graph replays). Captured graphs hold
// the fold's address: keep the model alive while its graph is in use, and capture again after
// changing the weights (a graph replays the fold it captured; a model with cache_folds=False
// captures the fold computation itself and follows in-place weight changes at its cost).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/intrusive_ptr.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>


namespace fusedops {

// What a fold is. Each operator or GEMM engine that folds weights defines its kinds (one
// constant object each, next to the code that computes the fold: this file knows none of
// them); a fold of a weight is named by its kind's address and an integer parameter (the pool
// size, the K-chunk). The name is for messages.
struct FoldKind {
  const char* name;
};

inline constexpr size_t kMaxFoldTensors = 3;
// The bounds on one weight's folds (see Ownership above).
inline constexpr size_t kMaxFoldsPerWeight = 16;
inline constexpr int64_t kMaxFoldBytesPerWeightBytes = 4;

// A fold's tensors (unused slots undefined). A fixed array: a hit copies three handles and
// allocates nothing. A CUDA fold may hold a host tensor (pinned memory its kernels fill
// asynchronously, e.g. the 3xFP16 engine's verdict): the fold check compares its device tensors.
using FoldTensors = std::array<at::Tensor, kMaxFoldTensors>;

namespace fold_cache_detail {

struct Anchor;
struct Entry;

// One lookup: holds the weight's anchor locked from the lookup until the fold is stored, so that
// concurrent first calls compute it once. Members are declared so that destruction releases the
// lock before a replaced fold or the anchor itself can be freed (their destructors may take the
// registry lock).
class Slot {
 public:
  Slot(const FoldKind& kind, int64_t param, c10::ArrayRef<at::Tensor> sources);
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot();

  // The valid cached fold, made readable on the current stream; nullptr on a miss.
  const FoldTensors* hit();
  // Stores a freshly computed fold (when it can be cached) and returns it.
  FoldTensors store(FoldTensors made);
  // After a hit: throws when `fresh` differs from the cached fold (see "Checking").
  void verify(const FoldTensors& fresh) const;
  // A lookup that stores nothing (cached_fold below).
  static std::optional<FoldTensors> cached(const FoldKind& kind, int64_t param,
                                           c10::ArrayRef<at::Tensor> sources);

 private:
  // attach: give the weight an anchor where it has none (false: find one only).
  Slot(const FoldKind& kind, int64_t param, c10::ArrayRef<at::Tensor> sources, bool attach);

  const FoldKind* kind_;
  int64_t param_;
  c10::ArrayRef<at::Tensor> sources_;
  c10::intrusive_ptr<Anchor> anchor_;  // null: not cacheable, compute every time
  // Folds evicted for room, freed after the lock is released.
  std::vector<std::unique_ptr<Entry>> retired_;
  std::unique_lock<std::mutex> lock_;
  Entry* entry_ = nullptr;
};

// Marks the calling thread as computing a fold (see fold_cache.cpp's t_computing).
struct ComputeScope {
  ComputeScope();
  ~ComputeScope();
  bool outer;
};

template <typename Compute>
FoldTensors compute_fold(Compute&& compute) {
  ComputeScope scope;
  return compute();
}

}  // namespace fold_cache_detail

// The operator a backend kernel runs, for the messages of the code below it (thread-local: set
// for the duration of the kernel, nested kernels restore the outer name), and its resolved
// cache_folds: None (no Autograd kernel resolved it, or it resolved to caching) caches.
class OperatorCall {
 public:
  OperatorCall(const char* op, std::optional<bool> cache_folds);
  OperatorCall(const OperatorCall&) = delete;
  OperatorCall& operator=(const OperatorCall&) = delete;
  ~OperatorCall();
  bool cache_folds() const { return cache_folds_; }
  static const char* current();  // "" outside an operator

 private:
  const char* outer_;
  bool cache_folds_;
};

// A call that autograd records with a weight that requires grad: a training step or a gradient
// check. Set by the Autograd kernels around the call they record (grad mode is off inside the
// forward they run, so nothing below them can tell such a call from a torch.no_grad() one);
// read by the planner, for which such a call's folds last one call whether cached or not (the
// optimizer writes the weights after it) and whose results must follow the reference's GEMM
// (training parity).
class TrainingCall {
 public:
  explicit TrainingCall(bool trains);
  TrainingCall(const TrainingCall&) = delete;
  TrainingCall& operator=(const TrainingCall&) = delete;
  ~TrainingCall();
  static bool active();

 private:
  bool outer_;
};

// Opens (true) or closes (false) one fold check scope (FoldCheckScope, fusedops.h): the Python
// context manager's two halves.
void set_fold_check(bool open);
// Whether hits are checked now: FUSEDOPS_CHECK_FOLDS=1 or an open scope.
bool fold_check_enabled();

// Returns compute()'s fold of `sources` (sources[0] is the weight that owns it), from the cache
// while still valid. With enabled == false (a model's cache_folds=False) nothing is cached or
// reused. compute() runs on the calling thread, on the current stream, holding the weight's
// lock: it must not look up folds itself.
template <typename Compute>
FoldTensors fold_weights(const FoldKind& kind, int64_t param, c10::ArrayRef<at::Tensor> sources,
                         bool enabled, Compute&& compute) {
  if (!enabled) {
    fold_cache_detail::Slot uncached(kind, param, {});
    return uncached.store(fold_cache_detail::compute_fold(compute));
  }
  fold_cache_detail::Slot slot(kind, param, sources);
  // Read at every lookup, so that the settings' first read (which parses them) falls on the
  // weight's first call, a miss that allocates anyway: a hit allocates nothing.
  const bool check = fold_check_enabled();
  if (const FoldTensors* cached = slot.hit()) {
    if (check) slot.verify(fold_cache_detail::compute_fold(compute));
    return *cached;
  }
  return slot.store(fold_cache_detail::compute_fold(compute));
}

// The fold of `sources` that fold_weights cached, where one is valid now (made readable on the
// current stream, as a hit is), else none; it computes and stores nothing, and with hits being
// checked (see "Checking") it finds none, so that the caller folds afresh. For a backward that
// reads what its forward cached (model 98's pooled Linear: autograd/) and folds again where
// its forward did not cache.
inline std::optional<FoldTensors> cached_fold(const FoldKind& kind, int64_t param,
                                              c10::ArrayRef<at::Tensor> sources) {
  if (fold_check_enabled()) return std::nullopt;
  return fold_cache_detail::Slot::cached(kind, param, sources);
}

}  // namespace fusedops
