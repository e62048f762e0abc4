// The weight-fold cache's rules (ops/common/fold_cache.h) tested on its own, with a stand-in
// fold: what is reused and when, what is freed and when, threads, inference tensors, and a hit
// that allocates nothing. test_serving.py covers the same through the models and CUDA streams.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/fold_cache.h"
#include "fusedops/fusedops.h"  // the public API under test: fold_cache_stats, FoldCheckScope

// Every operator new in this test program is counted, so a test can tell whether a stretch of
// code allocated on the heap.
namespace {
std::atomic<int64_t> g_heap_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace fusedops::testing {
namespace {

// A stand-in fold with model 18's shape: column sums of w and the sum of b.
constexpr FoldKind kTestFold{"test: column sums"};
struct CountingFold {
  std::atomic<int> calls{0};
  FoldTensors operator()(const at::Tensor& w, const at::Tensor& b) {
    calls.fetch_add(1);
    return {w.sum(0), b.sum()};
  }
};

FoldTensors lookup(const at::Tensor& w, const at::Tensor& b, CountingFold& fold,
                   bool enabled = true, int64_t param = 0) {
  return fold_weights(kTestFold, param, {w, b}, enabled, [&] { return fold(w, b); });
}

TEST(FoldCache, ReusesWhileWeightsStayTheSame) {
  const at::Tensor w = at::randn({16, 8}, at::kDouble);
  const at::Tensor b = at::randn({16}, at::kDouble);
  CountingFold fold;
  const FoldTensors first = lookup(w, b, fold);
  const FoldTensors second = lookup(w, b, fold);
  EXPECT_EQ(fold.calls, 1);
  EXPECT_TRUE(first[0].is_same(second[0]));
  EXPECT_TRUE(at::allclose(second[0], w.sum(0)));
}

// cached_fold (a backward reading what its forward cached): the valid fold itself, and nothing
// where none was cached, where it went stale, under another parameter or while hits are
// checked; it computes and stores nothing, and attaches no anchor to a weight it finds bare.
TEST(FoldCache, CachedFoldFindsOnlyAValidFoldAndStoresNone) {
  at::Tensor w = at::randn({16, 8}, at::kDouble);
  const at::Tensor b = at::randn({16}, at::kDouble);
  const FoldCacheStats before = fold_cache_stats();
  EXPECT_FALSE(cached_fold(kTestFold, 0, {w, b}).has_value());
  EXPECT_EQ(fold_cache_stats().weights, before.weights);
  CountingFold fold;
  lookup(w, b, fold, /*enabled=*/false);
  EXPECT_FALSE(cached_fold(kTestFold, 0, {w, b}).has_value());
  const FoldTensors made = lookup(w, b, fold);
  const std::optional<FoldTensors> found = cached_fold(kTestFold, 0, {w, b});
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE((*found)[0].is_same(made[0]));
  EXPECT_TRUE((*found)[1].is_same(made[1]));
  EXPECT_FALSE(cached_fold(kTestFold, 1, {w, b}).has_value());
  {
    const FoldCheckScope checking;
    EXPECT_FALSE(cached_fold(kTestFold, 0, {w, b}).has_value());
  }
  EXPECT_EQ(fold.calls, 2);
  const FoldCacheStats held = fold_cache_stats();
  EXPECT_EQ(held.misses, before.misses + 2);
  w.add_(1);
  EXPECT_FALSE(cached_fold(kTestFold, 0, {w, b}).has_value());
  EXPECT_EQ(fold_cache_stats().entries, held.entries - 1);  // the stale fold freed
  EXPECT_EQ(fold.calls, 2);
}

TEST(FoldCache, InPlaceWriteOfEitherSourceRecomputes) {
  at::Tensor w = at::randn({16, 8}, at::kDouble);
  at::Tensor b = at::randn({16}, at::kDouble);
  CountingFold fold;
  lookup(w, b, fold);
  w.mul_(2);
  EXPECT_TRUE(at::allclose(lookup(w, b, fold)[0], w.sum(0)));
  b.add_(1);
  EXPECT_TRUE(at::allclose(lookup(w, b, fold)[1], b.sum()));
  EXPECT_EQ(fold.calls, 3);
}

// A weight that changes every step (training) refolds every step: its old fold is freed before
// the new one is computed, so that the two are never held together.
TEST(FoldCache, AStaleFoldIsFreedBeforeItsReplacementIsComputed) {
  at::Tensor w = at::randn({256, 128}, at::kDouble);
  const at::Tensor b = at::randn({256}, at::kDouble);
  CountingFold fold;
  const int64_t before = fold_cache_stats().bytes;
  lookup(w, b, fold);
  ASSERT_GT(fold_cache_stats().bytes, before);
  w.add_(1);
  int64_t held_while_refolding = -1;
  const FoldTensors refolded = fold_weights(kTestFold, 0, {w, b}, true, [&] {
    held_while_refolding = fold_cache_stats().bytes - before;
    return fold(w, b);
  });
  EXPECT_EQ(held_while_refolding, 0);
  EXPECT_TRUE(at::allclose(refolded[0], w.sum(0)));
  EXPECT_EQ(fold.calls, 2);
}

TEST(FoldCache, ADetachedAliasIsAnotherTensor) {
  const at::Tensor w = at::randn({16, 8}, at::kDouble);
  const at::Tensor b = at::randn({16}, at::kDouble);
  CountingFold fold;
  lookup(w, b, fold);
  lookup(w.detach(), b, fold);
  EXPECT_EQ(fold.calls, 2);
}

// A write through variable_data() (Python: `.data`) shares the storage and not the version
// counter: the cache returns the old fold (the documented limit) unless checking is on, when the
// hit is compared with a fresh fold and the difference named.
TEST(FoldCache, CheckingFindsAWriteNoVersionCounterSees) {
  const at::Tensor w = at::randn({16, 8}, at::kDouble);
  const at::Tensor b = at::randn({16}, at::kDouble);
  CountingFold fold;
  const at::Tensor before = lookup(w, b, fold)[0].clone();
  w.variable_data().mul_(2);
  EXPECT_TRUE(at::equal(lookup(w, b, fold)[0], before));  // stale, unchecked
  EXPECT_EQ(fold.calls, 1);
  {
    const OperatorCall call("test_operator", std::nullopt);
    const FoldCheckScope checking;
    try {
      lookup(w, b, fold);
      ADD_FAILURE() << "a stale fold passed the check";
    } catch (const c10::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("stale weight fold in test_operator: the cached test: column sums"),
                std::string::npos) << message;
      EXPECT_NE(message.find("of a weight of shape [16, 8]"), std::string::npos) << message;
      const double largest = (w.sum(0) - before).abs().max().item<double>();
      EXPECT_NE(message.find("by up to " + std::to_string(largest).substr(0, 4)),
                std::string::npos) << message;
    }
    EXPECT_EQ(fold.calls, 2);  // the check's fresh fold
  }
  EXPECT_FALSE(fold_check_enabled());
  lookup(w, b, fold);  // unchecked again: nothing computed
  EXPECT_EQ(fold.calls, 2);
  clear_fold_cache({w});
  const FoldCheckScope checking;
  EXPECT_TRUE(at::allclose(lookup(w, b, fold)[0], w.sum(0)));  // a miss: nothing to compare
  lookup(w, b, fold);                                            // a checked hit that agrees
  EXPECT_EQ(fold.calls, 4);
}

TEST(FoldCache, CallScopesNestAndRestore) {
  EXPECT_STREQ(OperatorCall::current(), "");
  EXPECT_FALSE(TrainingCall::active());
  {
    const OperatorCall outer("outer", std::nullopt);
    EXPECT_TRUE(outer.cache_folds());
    const TrainingCall training(true);
    {
      const OperatorCall inner("inner", false);
      EXPECT_FALSE(inner.cache_folds());
      EXPECT_STREQ(OperatorCall::current(), "inner");
      const TrainingCall not_training(false);
      EXPECT_FALSE(TrainingCall::active());
    }
    EXPECT_STREQ(OperatorCall::current(), "outer");
    EXPECT_TRUE(TrainingCall::active());
  }
  EXPECT_STREQ(OperatorCall::current(), "");
  EXPECT_FALSE(TrainingCall::active());
  EXPECT_THROW(set_fold_check(false), c10::Error);  // none open
}

TEST(FoldCache, DisabledNeverCachesNorReuses) {
  const at::Tensor w = at::randn({16, 8}, at::kDouble);
  const at::Tensor b = at::randn({16}, at::kDouble);
  CountingFold fold;
  const int64_t entries = fold_cache_stats().entries;
  lookup(w, b, fold, /*enabled=*/false);
  lookup(w, b, fold, /*enabled=*/false);
  EXPECT_EQ(fold.calls, 2);
  EXPECT_EQ(fold_cache_stats().entries, entries);
}

TEST(FoldCache, FoldsAreFreedWhenTheirWeightDies) {
  const FoldCacheStats before = fold_cache_stats();
  {
    const at::Tensor w = at::randn({64, 32});
    const at::Tensor b = at::randn({64});
    CountingFold fold;
    lookup(w, b, fold);
    const FoldCacheStats held = fold_cache_stats();
    EXPECT_EQ(held.entries, before.entries + 1);
    EXPECT_EQ(held.weights, before.weights + 1);
    EXPECT_GE(held.bytes, before.bytes + 32 * 4);
  }
  const FoldCacheStats after = fold_cache_stats();
  EXPECT_EQ(after.entries, before.entries);
  EXPECT_EQ(after.bytes, before.bytes);
  EXPECT_EQ(after.weights, before.weights);
}

TEST(FoldCache, ClearFreesEveryFoldNow) {
  const at::Tensor w = at::randn({16, 8});
  const at::Tensor b = at::randn({16});
  CountingFold fold;
  lookup(w, b, fold);
  clear_fold_cache();
  EXPECT_EQ(fold_cache_stats().entries, 0);
  EXPECT_EQ(fold_cache_stats().bytes, 0);
  lookup(w, b, fold);
  EXPECT_EQ(fold.calls, 2);
}

TEST(FoldCache, AWeightKeepsEveryFoldItServesInTurn) {
  // Issue 21: one weight shared by models of eight pool sizes (a fold each), called in turn.
  // With four folds a weight, every call missed.
  const at::Tensor w = at::randn({64, 32});
  const at::Tensor b = at::randn({64});
  CountingFold fold;
  for (int round = 0; round < 5; ++round) {
    for (int64_t param = 1; param <= 8; ++param) lookup(w, b, fold, true, param);
  }
  EXPECT_EQ(fold.calls, 8);
}

TEST(FoldCache, AWeightsFoldsAreBoundedInNumber) {
  const at::Tensor w = at::randn({16, 8});
  const at::Tensor b = at::randn({16});
  CountingFold fold;
  const int64_t entries = fold_cache_stats().entries;
  const auto folds = static_cast<int64_t>(kMaxFoldsPerWeight) + 3;
  for (int64_t param = 0; param < folds; ++param) lookup(w, b, fold, true, param);
  EXPECT_EQ(fold_cache_stats().entries, entries + static_cast<int64_t>(kMaxFoldsPerWeight));
  lookup(w, b, fold, true, folds - 1);  // the most recent one is still there
  EXPECT_EQ(fold.calls, folds);
  lookup(w, b, fold, true, 0);  // the least recently used one went first
  EXPECT_EQ(fold.calls, folds + 1);
}

TEST(FoldCache, AWeightsFoldsAreBoundedInBytes) {
  // Folds as large as the weight: at most kMaxFoldBytesPerWeightBytes of them stay.
  const at::Tensor w = at::randn({64, 32});
  const at::Tensor b = at::randn({64});
  const int64_t weight_bytes = w.numel() * static_cast<int64_t>(w.element_size());
  const int64_t bytes = fold_cache_stats().bytes;
  int calls = 0;
  auto large_fold = [&](int64_t param) {
    return fold_weights(kTestFold, param, {w, b}, true, [&] {
      ++calls;
      return FoldTensors{w * 2.0, at::Tensor()};
    });
  };
  for (int64_t param = 0; param < 10; ++param) large_fold(param);
  EXPECT_LE(fold_cache_stats().bytes - bytes, kMaxFoldBytesPerWeightBytes * weight_bytes);
  EXPECT_GE(fold_cache_stats().bytes - bytes, weight_bytes);
  large_fold(9);  // the newest fold is kept
  EXPECT_EQ(calls, 10);
}

TEST(FoldCache, AWeightSharedWithOtherBiasesKeepsOneFoldEach) {
  // Two models tying one weight, each with its own bias: neither evicts the other's fold.
  const at::Tensor w = at::randn({16, 8});
  const at::Tensor b1 = at::randn({16});
  const at::Tensor b2 = at::randn({16});
  CountingFold fold;
  for (int round = 0; round < 5; ++round) {
    EXPECT_TRUE(at::allclose(lookup(w, b1, fold)[1], b1.sum()));
    EXPECT_TRUE(at::allclose(lookup(w, b2, fold)[1], b2.sum()));
  }
  EXPECT_EQ(fold.calls, 2);
}

TEST(FoldCache, ClearingTheFoldsOfSomeWeightsKeepsTheOthers) {
  const at::Tensor w1 = at::randn({16, 8});
  const at::Tensor w2 = at::randn({16, 8});
  const at::Tensor b = at::randn({16});
  CountingFold fold;
  lookup(w1, b, fold);
  lookup(w2, b, fold);
  clear_fold_cache({w1});
  lookup(w1, b, fold);
  lookup(w2, b, fold);
  EXPECT_EQ(fold.calls, 3);
}

TEST(FoldCache, InferenceTensorsAreCachedByIdentity) {
  // Inference tensors have no version counter: an in-place write inside inference mode is not
  // seen (the documented rule), and clear_fold_cache() is the remedy.
  c10::InferenceMode inference;
  at::Tensor w = at::randn({16, 8});
  const at::Tensor b = at::randn({16});
  ASSERT_TRUE(w.is_inference());
  CountingFold fold;
  lookup(w, b, fold);
  lookup(w, b, fold);
  EXPECT_EQ(fold.calls, 1);
  w.mul_(2);
  lookup(w, b, fold);
  EXPECT_EQ(fold.calls, 1);
  clear_fold_cache();
  EXPECT_TRUE(at::allclose(lookup(w, b, fold)[0], w.sum(0)));
  EXPECT_EQ(fold.calls, 2);
}

TEST(FoldCache, AHitAllocatesNothing) {
  for (const bool inference : {false, true}) {
    SCOPED_TRACE(inference ? "inference tensors" : "ordinary tensors");
    std::optional<c10::InferenceMode> mode;
    if (inference) mode.emplace();
    const at::Tensor w = at::randn({16, 8});
    const at::Tensor b = at::randn({16});
    CountingFold fold;
    const int64_t at_miss = g_heap_allocations.load();
    lookup(w, b, fold);
    EXPECT_GT(g_heap_allocations.load() - at_miss, 0);  // the counter does see allocations
    const int64_t before = g_heap_allocations.load();
    for (int i = 0; i < 1000; ++i) lookup(w, b, fold);
    EXPECT_EQ(g_heap_allocations.load() - before, 0);
    EXPECT_EQ(fold.calls, 1);
  }
}

TEST(FoldCache, ConcurrentFirstLookupsComputeOnce) {
  const at::Tensor w = at::randn({256, 128});
  const at::Tensor b = at::randn({256});
  std::atomic<int> calls{0};
  std::mutex mutex;
  std::condition_variable start;
  bool go = false;
  std::vector<FoldTensors> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      {
        std::unique_lock<std::mutex> lock(mutex);
        start.wait(lock, [&] { return go; });
      }
      results[t] = fold_weights(kTestFold, 0, {w, b}, true, [&] {
        calls.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow fold
        return FoldTensors{w.sum(0), b.sum()};
      });
    });
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    go = true;
  }
  start.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls, 1);
  for (const auto& r : results) EXPECT_TRUE(r[0].is_same(results[0][0]));
}

// The stale fold is freed with the weight's lock released: concurrent lookups after a weight
// change still compute its new fold once, and all get that one.
TEST(FoldCache, ConcurrentLookupsAfterAChangeRefoldOnce) {
  at::Tensor w = at::randn({256, 128});
  const at::Tensor b = at::randn({256});
  std::atomic<int> calls{0};
  auto slow_fold = [&] {
    calls.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return FoldTensors{w.sum(0), b.sum()};
  };
  fold_weights(kTestFold, 0, {w, b}, true, slow_fold);
  w.add_(1);
  std::vector<FoldTensors> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back(
        [&, t] { results[t] = fold_weights(kTestFold, 0, {w, b}, true, slow_fold); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls, 2);
  for (const auto& r : results) {
    EXPECT_TRUE(r[0].is_same(results[0][0]));
    EXPECT_TRUE(at::allclose(r[0], w.sum(0)));
  }
}

TEST(FoldCache, AFoldCannotLookUpAnotherFold) {
  const at::Tensor w = at::randn({16, 8});
  const at::Tensor b = at::randn({16});
  const at::Tensor w2 = at::randn({16, 8});
  EXPECT_THROW(fold_weights(kTestFold, 0, {w, b}, true,
                            [&] {
                              CountingFold inner;
                              return lookup(w2, b, inner);
                            }),
               c10::Error);
  // The failed lookup left nothing half-done: the weight folds normally afterwards.
  CountingFold fold;
  EXPECT_TRUE(at::allclose(lookup(w, b, fold)[0], w.sum(0)));
}

}  // namespace
}  // namespace fusedops::testing
