#include "common/fold_cache.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "fusedops/fusedops.h"  // the public API this file implements: FoldCacheStats, FoldCheckScope
#include "plan/settings.h"

#if FUSEDOPS_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace fusedops {
namespace fold_cache_detail {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

std::atomic<int64_t> g_weights{0};
std::atomic<int64_t> g_entries{0};
std::atomic<int64_t> g_bytes{0};
std::atomic<int64_t> g_misses{0};

bool cacheable(const at::Tensor& t) {
  // Tensors without storage (fake, functional, meta wrappers) have no stable data to key on.
  return t.defined() && t.has_storage() && t.device().type() != c10::DeviceType::Meta;
}

// What a source tensor was when its fold was computed.
struct SourceStamp {
  const c10::TensorImpl* impl = nullptr;
  // Secondary sources (the bias) are held weakly so that their TensorImpl's address cannot be
  // reused by a new tensor while this entry exists (a dead bias could otherwise be mistaken for
  // a new one with the same address, data pointer, shape and version). The primary source (the
  // weight) is the anchor's own tensor and is never held, or it could never die.
  std::optional<WeakImpl> weak;
  bool inference = false;
  uint32_t version = 0;
  const void* data = nullptr;
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;

  SourceStamp(const at::Tensor& t, bool primary)
      : impl(t.unsafeGetTensorImpl()),
        weak(primary ? std::nullopt : std::optional<WeakImpl>(WeakImpl(t.getIntrusivePtr()))),
        inference(t.is_inference()),
        // Inference tensors have no version counter (reading it throws).
        version(t.is_inference() ? 0 : t._version()),
        data(t.const_data_ptr()),
        sizes(t.sizes().vec()),
        strides(t.strides().vec()),
        dtype(t.scalar_type()),
        device(t.device()) {}

  bool still_matches(const at::Tensor& t) const {
    if (impl != t.unsafeGetTensorImpl() || t.is_inference() != inference) return false;
    if (!inference && version != t._version()) return false;
    return data == t.const_data_ptr() && t.sizes().equals(sizes) &&
           t.strides().equals(strides) && dtype == t.scalar_type() && device == t.device();
  }
};

int64_t bytes_of(const FoldTensors& tensors) {
  int64_t total = 0;
  for (const at::Tensor& t : tensors) {
    if (t.defined()) total += static_cast<int64_t>(t.storage().nbytes());
  }
  return total;
}

// Anchors that exist, for clear_fold_cache() and the stats. Touched only when an anchor is
// made or dies, and by clear_fold_cache(): never on a cache hit.
struct Registry {
  std::mutex mutex;
  std::vector<Anchor*> anchors;
};
Registry& registry() {
  static auto* r = new Registry();  // never destroyed: anchors may die during static teardown
  return *r;
}

// Attaching an anchor to a TensorImpl writes its metadata; a striped lock by address makes
// concurrent first calls on one weight attach exactly one, without a process-wide lock.
constexpr size_t kAttachStripes = 64;
std::mutex& attach_mutex(const c10::TensorImpl* impl) {
  static std::array<std::mutex, kAttachStripes> stripes;
  return stripes[(reinterpret_cast<uintptr_t>(impl) >> 4) % kAttachStripes];
}

// compute() runs holding its weight's lock; a lookup from inside it could attach an anchor
// (taking the registry lock) while clear_fold_cache() holds the registry lock and waits for
// that weight's lock. No fold is computed from another cached fold, and this flag makes sure.
thread_local bool t_computing = false;

#if FUSEDOPS_WITH_CUDA
// Streams an entry remembers having marked (recordStream); a reader beyond these is marked on
// every call, which is correct, only slower.
constexpr size_t kMaxReaderStreams = 8;

bool is_capturing(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream.stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}
#endif

}  // namespace

struct Entry {
  const FoldKind* kind;
  int64_t param;
  std::vector<SourceStamp> sources;
  FoldTensors tensors;
  int64_t bytes = 0;
  uint64_t last_use = 0;
#if FUSEDOPS_WITH_CUDA
  // Set for folds on a CUDA device: the creator stream and an event recorded after the
  // fold's kernels on it.
  cudaEvent_t ready = nullptr;
  c10::StreamId creator = 0;
  c10::DeviceIndex device_index = -1;
  bool complete = false;  // the event was seen complete: no stream needs to wait any more
  std::array<c10::StreamId, kMaxReaderStreams> readers{};
  size_t reader_count = 0;
#endif

  Entry(const FoldKind* k, int64_t p, c10::ArrayRef<at::Tensor> src, FoldTensors made)
      : kind(k), param(p), tensors(std::move(made)), bytes(bytes_of(tensors)) {
    sources.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) sources.emplace_back(src[i], /*primary=*/i == 0);
    g_entries.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {
#if FUSEDOPS_WITH_CUDA
    if (ready != nullptr) {
      // Safe while work that records or waits on it is still queued: the driver releases the
      // event once that work is done.
      const c10::cuda::CUDAGuard guard(device_index);
      C10_CUDA_CHECK_WARN(cudaEventDestroy(ready));
    }
#endif
    g_entries.fetch_sub(1, std::memory_order_relaxed);
    g_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }

  // Whether this entry is the fold asked for: its kind and parameter, and the same secondary
  // source tensors (the bias). Whether it is still valid is matches().
  bool is_for(const FoldKind* k, int64_t p, c10::ArrayRef<at::Tensor> src) const {
    if (kind != k || param != p || src.size() != sources.size()) return false;
    for (size_t i = 1; i < src.size(); ++i) {
      if (sources[i].impl != src[i].unsafeGetTensorImpl()) return false;
    }
    return true;
  }

  bool matches(c10::ArrayRef<at::Tensor> src) const {
    if (src.size() != sources.size()) return false;
    for (size_t i = 0; i < src.size(); ++i) {
      if (!sources[i].still_matches(src[i])) return false;
    }
    return true;
  }

#if FUSEDOPS_WITH_CUDA
  bool on_cuda() const { return device_index >= 0; }

  // After compute() on the current stream: remember it and mark the fold's end.
  void record_creation(const at::Device& device) {
    device_index = device.index();
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_index);
    creator = stream.id();
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventRecord(ready, stream.stream()));
  }

  // Before the current stream's kernels read the fold (see the header's stream rule).
  void make_readable_on_current_stream() {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_index);
    if (stream.id() == creator) return;  // stream order already puts the fold first
    if (!complete) {
      if (is_capturing(stream)) {
        // A capturing stream may not query or plainly wait on an event recorded outside the
        // capture; an external-event wait becomes a node of the graph instead.
        C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), ready, cudaEventWaitExternal));
      } else {
        const cudaError_t status = cudaEventQuery(ready);
        if (status == cudaSuccess) {
          complete = true;
        } else if (status == cudaErrorNotReady) {
          (void)cudaGetLastError();  // not an error: clear it before a launch check sees it
          C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), ready, 0));
        } else {
          C10_CUDA_CHECK(status);
        }
      }
    }
    const auto known = readers.begin() + static_cast<std::ptrdiff_t>(reader_count);
    if (std::find(readers.begin(), known, stream.id()) != known) return;
    for (const at::Tensor& t : tensors) {
      if (t.defined()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
    if (reader_count < kMaxReaderStreams) readers[reader_count++] = stream.id();
  }
#endif
};

// A weight's folds; attached to the weight's TensorImpl and destroyed with it.
struct Anchor final : c10::BackendMeta {
  std::mutex mutex;
  std::vector<std::unique_ptr<Entry>> entries;  // within the bounds of fold_cache.h
  uint64_t uses = 0;                             // a clock for the least-recently-used entry

  Anchor() {
    entries.reserve(kMaxFoldsPerWeight);
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().anchors.push_back(this);
    g_weights.fetch_add(1, std::memory_order_relaxed);
  }
  ~Anchor() override {
    {
      std::lock_guard<std::mutex> lock(registry().mutex);
      auto& all = registry().anchors;
      all.erase(std::find(all.begin(), all.end(), this));
    }
    g_weights.fetch_sub(1, std::memory_order_relaxed);
    // entries (and their tensors) are freed now, with no lock held.
  }

  // A detached alias or a shallow copy of the weight gets no anchor: it is another tensor,
  // whose folds (if any) are its own.
  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    return {};
  }

  Entry* find(const FoldKind* kind, int64_t param, c10::ArrayRef<at::Tensor> sources) {
    for (auto& e : entries) {
      if (e->is_for(kind, param, sources)) return e.get();
    }
    return nullptr;
  }

  int64_t bytes() const {
    int64_t total = 0;
    for (const auto& e : entries) total += e->bytes;
    return total;
  }

  // Moves the least recently used entry out (to be freed once the lock is released).
  std::unique_ptr<Entry> take_least_recently_used() {
    const auto oldest = std::min_element(
        entries.begin(), entries.end(),
        [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    std::unique_ptr<Entry> taken = std::move(*oldest);
    entries.erase(oldest);
    return taken;
  }
};

namespace {

// The anchor of t's TensorImpl, attached on first use where `attach` (a lookup that will not
// store needs none); null when there is none to find, or when another library already keeps
// its own metadata there (then nothing is cached for t).
c10::intrusive_ptr<Anchor> anchor_of(const at::Tensor& t, bool attach) {
  TORCH_INTERNAL_ASSERT(!t_computing, "fusedops: a weight fold looked up another fold");
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  std::lock_guard<std::mutex> lock(attach_mutex(impl));
  c10::intrusive_ptr<c10::BackendMeta> meta = impl->get_backend_meta_intrusive_ptr();
  if (meta) {
    if (auto* anchor = dynamic_cast<Anchor*>(meta.get())) {
      return c10::intrusive_ptr<Anchor>::reclaim_copy(anchor);
    }
    return {};
  }
  if (!attach) return {};
  auto anchor = c10::make_intrusive<Anchor>();
  impl->set_backend_meta(anchor);
  return anchor;
}

}  // namespace

Slot::Slot(const FoldKind& kind, int64_t param, c10::ArrayRef<at::Tensor> sources)
    : Slot(kind, param, sources, /*attach=*/true) {}

Slot::Slot(const FoldKind& kind, int64_t param, c10::ArrayRef<at::Tensor> sources, bool attach)
    : kind_(&kind), param_(param), sources_(sources) {
  if (sources.empty() || !std::all_of(sources.begin(), sources.end(), cacheable)) return;
  anchor_ = anchor_of(sources[0], attach);
  if (!anchor_) return;
  lock_ = std::unique_lock<std::mutex>(anchor_->mutex);
  entry_ = anchor_->find(&kind, param, sources);
}

Slot::~Slot() = default;

ComputeScope::ComputeScope() : outer(t_computing) { t_computing = true; }
ComputeScope::~ComputeScope() { t_computing = outer; }

const FoldTensors* Slot::hit() {
  while (entry_ != nullptr && !entry_->matches(sources_)) {
    // Stale (the weights changed): freed before its replacement is computed, so that a weight's
    // old and new folds are never live together (a training step changes W every step, and a
    // 3xFP16 pair is W's size: holding both doubled what the refold held). Freed with the
    // weight's lock released (a fold's tensor may anchor folds of its own, whose destructor
    // takes the registry lock, which clear_fold_cache() takes before a weight's); streams still
    // reading it keep its memory (recordStream). Another thread may store the new fold
    // meanwhile: the lookup is made again.
    auto& entries = anchor_->entries;
    const auto it = std::find_if(entries.begin(), entries.end(),
                                 [&](const auto& e) { return e.get() == entry_; });
    std::unique_ptr<Entry> stale = std::move(*it);
    entries.erase(it);
    lock_.unlock();
    stale.reset();
    lock_.lock();
    entry_ = anchor_->find(kind_, param_, sources_);
  }
  if (entry_ == nullptr) return nullptr;
  entry_->last_use = ++anchor_->uses;
#if FUSEDOPS_WITH_CUDA
  if (entry_->on_cuda()) entry_->make_readable_on_current_stream();
#endif
  return &entry_->tensors;
}

FoldTensors Slot::store(FoldTensors made) {
  g_misses.fetch_add(1, std::memory_order_relaxed);
  if (!anchor_) return made;
#if FUSEDOPS_WITH_CUDA
  // A fold made while a graph is being captured holds its values only once the graph replays.
  if (sources_[0].is_cuda() &&
      is_capturing(c10::cuda::getCurrentCUDAStream(sources_[0].device().index()))) {
    return made;
  }
#endif
  auto& entries = anchor_->entries;
  // Room for the new fold within the weight's bounds, least recently used out first. The new
  // fold itself is always kept (one fold is at most twice its weight's size).
  const at::Tensor& weight = sources_[0];
  const int64_t budget = kMaxFoldBytesPerWeightBytes *
                         static_cast<int64_t>(weight.numel() * weight.element_size());
  const int64_t needed = bytes_of(made);
  int64_t held = anchor_->bytes();
  while (!entries.empty() &&
         (entries.size() >= kMaxFoldsPerWeight || held + needed > budget)) {
    retired_.push_back(anchor_->take_least_recently_used());
    held -= retired_.back()->bytes;
  }
  auto entry = std::make_unique<Entry>(kind_, param_, sources_, std::move(made));
  entry->last_use = ++anchor_->uses;
#if FUSEDOPS_WITH_CUDA
  if (sources_[0].is_cuda()) entry->record_creation(sources_[0].device());
#endif
  entries.push_back(std::move(entry));
  return entries.back()->tensors;
}

void Slot::verify(const FoldTensors& fresh) const {
  if (entry_ == nullptr) return;
#if FUSEDOPS_WITH_CUDA
  // Comparing reads the result on the host, which a capturing stream does not allow.
  if (entry_->on_cuda() &&
      is_capturing(c10::cuda::getCurrentCUDAStream(entry_->device_index))) {
    return;
  }
#endif
  for (size_t i = 0; i < kMaxFoldTensors; ++i) {
    const at::Tensor& cached = entry_->tensors[i];
    // A host mirror of a CUDA fold's values is filled asynchronously (fold_cache.h): a fresh
    // one may not hold them yet; the device tensors it mirrors are compared.
    if (!cached.defined() || (sources_[0].is_cuda() && cached.is_cpu())) continue;
    const at::Tensor& made = fresh[i];
    const bool same = made.defined() && made.sizes().equals(cached.sizes()) &&
                      made.scalar_type() == cached.scalar_type() &&
                      at::isclose(made, cached, /*rtol=*/0, /*atol=*/0, /*equal_nan=*/true)
                          .all()
                          .item<bool>();
    if (same) continue;
    const at::Tensor& weight = sources_[0];
    double largest = std::numeric_limits<double>::quiet_NaN();
    if (made.defined() && made.sizes().equals(cached.sizes())) {
      largest = (made.to(at::kDouble) - cached.to(at::kDouble)).abs().nan_to_num(
                    std::numeric_limits<double>::infinity()).max().item<double>();
    }
    const char* op = OperatorCall::current();
    TORCH_CHECK(false, "fusedops: stale weight fold in ", *op != '\0' ? op : "a fusedops operator",
                ": the cached ", kind_->name, " (param ", param_, ") of a weight of shape ",
                weight.sizes(), " (", weight.scalar_type(), ", ", weight.device(),
                ") differs from a fresh fold by up to ", largest,
                " (tensor ", i, " of the fold): the weight was written where its version counter "
                "does not see it (through .data, its storage, numpy or a host copy); call "
                "clear_fold_cache() after such a write, or use cache_folds=False "
                "(FUSEDOPS_CHECK_FOLDS / fusedops.checking_folds() found this)");
  }
}

std::optional<FoldTensors> Slot::cached(const FoldKind& kind, int64_t param,
                                        c10::ArrayRef<at::Tensor> sources) {
  Slot slot(kind, param, sources, /*attach=*/false);
  if (const FoldTensors* hit = slot.hit()) return *hit;
  return std::nullopt;
}

namespace {
thread_local const char* t_operator = "";
thread_local bool t_training = false;
std::atomic<int64_t> g_check_scopes{0};
}  // namespace

}  // namespace fold_cache_detail

OperatorCall::OperatorCall(const char* op, std::optional<bool> cache_folds)
    : outer_(fold_cache_detail::t_operator), cache_folds_(cache_folds.value_or(true)) {
  fold_cache_detail::t_operator = op;
}
OperatorCall::~OperatorCall() { fold_cache_detail::t_operator = outer_; }
const char* OperatorCall::current() { return fold_cache_detail::t_operator; }

TrainingCall::TrainingCall(bool trains) : outer_(fold_cache_detail::t_training) {
  fold_cache_detail::t_training = trains;
}
TrainingCall::~TrainingCall() { fold_cache_detail::t_training = outer_; }
bool TrainingCall::active() { return fold_cache_detail::t_training; }

void set_fold_check(bool open) {
  using fold_cache_detail::g_check_scopes;
  if (open) {
    g_check_scopes.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  int64_t n = g_check_scopes.load(std::memory_order_relaxed);
  do {
    TORCH_CHECK(n > 0, "fusedops: set_fold_check(false) closes a fold check scope, but none is "
                       "open");
  } while (!g_check_scopes.compare_exchange_weak(n, n - 1, std::memory_order_relaxed));
}

FoldCheckScope::FoldCheckScope() { set_fold_check(true); }
FoldCheckScope::~FoldCheckScope() { set_fold_check(false); }

bool fold_check_enabled() {
  return fold_cache_detail::g_check_scopes.load(std::memory_order_relaxed) > 0 ||
         plan::settings().check_folds;
}

FoldCacheStats fold_cache_stats() {
  using namespace fold_cache_detail;
  FoldCacheStats stats;
  stats.weights = g_weights.load(std::memory_order_relaxed);
  stats.entries = g_entries.load(std::memory_order_relaxed);
  stats.bytes = g_bytes.load(std::memory_order_relaxed);
  stats.misses = g_misses.load(std::memory_order_relaxed);
  return stats;
}

void clear_fold_cache(at::TensorList weights) {
  using namespace fold_cache_detail;
  std::vector<std::unique_ptr<Entry>> dropped;  // freed after the locks, as below
  for (const at::Tensor& weight : weights) {
    if (!weight.defined()) continue;
    const c10::intrusive_ptr<c10::BackendMeta> meta =
        weight.unsafeGetTensorImpl()->get_backend_meta_intrusive_ptr();
    auto* anchor = dynamic_cast<Anchor*>(meta.get());
    if (anchor == nullptr) continue;
    std::lock_guard<std::mutex> anchor_lock(anchor->mutex);
    for (auto& e : anchor->entries) dropped.push_back(std::move(e));
    anchor->entries.clear();
  }
}

void clear_fold_cache() {
  using namespace fold_cache_detail;
  // Moved out under the locks, freed after them: freeing a fold may free a tensor that has an
  // anchor of its own, whose destructor takes the registry lock.
  std::vector<std::unique_ptr<Entry>> dropped;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (Anchor* anchor : registry().anchors) {
      std::lock_guard<std::mutex> anchor_lock(anchor->mutex);
      for (auto& e : anchor->entries) dropped.push_back(std::move(e));
      anchor->entries.clear();
    }
  }
}

}  // namespace fusedops
