// A process-wide cache of tensors derived from weights (weight folds, split copies).
//
// Several operators precompute something from their weights before the per-call work: the
// pooled Linear of model 98, the column sums of model 18, the hi/lo split of a 3xTF32 GEMM.
// Redoing that every call would cost more than the call itself, so the result is cached
// against the exact source tensors. An entry is reused only while every source is the same
// live tensor (TensorImpl), with the same version counter (bumped by every in-place write:
// optimizer steps, load_state_dict, `with torch.no_grad(): w.mul_(2)`), data pointer, shape,
// strides, dtype and device. Anything else recomputes. Entries whose sources were freed are
// dropped on the next lookup. Writes that bypass the version counter (through `w.data`) are
// invisible to it, exactly as they are to autograd: call clear_fold_cache() after those.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fusedops {

class FoldCache {
 public:
  static FoldCache& instance();

  // Returns compute()'s result for (tag, param, sources), from the cache when still valid.
  // compute() runs under the cache's lock: it must not call back into the cache.
  std::vector<at::Tensor> get_or_compute(const std::string& tag,
                                         const std::vector<at::Tensor>& sources, int64_t param,
                                         const std::function<std::vector<at::Tensor>()>& compute);
  void clear();
  size_t size();
  // Lookups that recomputed (misses) since the process started: lets tests see that a
  // steady-state forward does not refold.
  int64_t misses();

 private:
  struct Entry;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
  int64_t misses_ = 0;
};

}  // namespace fusedops
