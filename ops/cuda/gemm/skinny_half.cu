#include "cuda/gemm/skinny_half.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <atomic>
#include <type_traits>

#include "cuda/gemm/epilogue_batchnorm_skinny.cuh"
#include "cuda/gemm/epilogue_groupnorm_skinny.cuh"
#include "cuda/gemm/gemv_half_kernel.cuh"

namespace fusedops::cuda::gemm {
namespace {

// The float32 form's tag: fp16 pairs, three products (gemv_half_kernel.cuh's kPair).
struct PairOf {};

// Warps a block of 16 rows of W gets. With few such blocks (model 98's pooled weight: 512
// rows, 32 blocks) eight warps an SM cannot keep enough loads in flight to read W at HBM
// speed, so the block grows to 16 or 32 warps splitting K further: aim for 16 warps per SM
// across the GPU.
int warps_for(int64_t blocks, int sm_count) {
  const int64_t want = static_cast<int64_t>(sm_count) * 16;
  if (blocks * 8 >= want) return 8;
  return blocks * 16 >= want ? 16 : 32;
}

template <typename T, int kWarps, int kTiles, int kRowTiles, typename Epilogue>
void launch(const SkinnyOperands& ops, const Epilogue& epilogue) {
  // Loads in flight per thread: (2 kRowTiles + kTiles) vectors per step, twice that in float32;
  // fewer steps as the block's rows grow, to stay within registers.
  constexpr bool kPair = std::is_same_v<T, PairOf>;
  using E = std::conditional_t<kPair, __half, T>;  // the element the MMAs take
  constexpr int kUnroll = kPair ? (kRowTiles == 1 && kTiles == 1 ? 2 : 1)
                                : kRowTiles == 1 ? 4 : kRowTiles == 2 ? 2 : 1;
  constexpr int smem = gemv_half_smem_bytes<kWarps, kTiles, kRowTiles, kPair>();
  const auto kernel = gemv_half_kernel<E, kWarps, kTiles, kRowTiles, kUnroll, kPair, Epilogue>;
  if constexpr (smem > 48 * 1024) {
    // The opt-in is a property of the function on a device, set once per device (groups of 128
    // channels; float32 with 32 warps: model 98's pooled weight). Setting it twice from racing
    // threads is harmless.
    constexpr int kMaxDevices = 64;
    static std::atomic<bool> done[kMaxDevices] = {};
    const int device = at::cuda::current_device();
    if (device >= kMaxDevices || !done[device].load(std::memory_order_acquire)) {
      C10_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      if (device < kMaxDevices) done[device].store(true, std::memory_order_release);
    }
  }
  const at::Tensor& x = kPair ? ops.pair.x_pair : ops.x;
  const at::Tensor& w = kPair ? ops.pair.w_pair : ops.weight;
  PairArgs pair;
  if constexpr (kPair) {
    const GuardLayout layout{ops.x.size(0)};
    const float* guard = reinterpret_cast<const float*>(ops.pair.guard.data_ptr<int>());
    pair = {guard + layout.alpha(), guard + layout.beta(), ops.x.data_ptr<float>(),
            ops.weight.data_ptr<float>(), static_cast<int>(ops.x.size(1))};
  }
  const int64_t n = ops.weight.size(0);
  const int64_t blocks = (n + 16 * kRowTiles - 1) / (16 * kRowTiles);
  kernel<<<static_cast<unsigned>(blocks), 32 * kWarps, smem, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const E*>(x.data_ptr()), reinterpret_cast<const E*>(w.data_ptr()),
      static_cast<int>(ops.x.size(0)), static_cast<int>(n),
      static_cast<int>(kPair ? ops.pair.kp : ops.x.size(1)), epilogue, pair);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void check_operands(const SkinnyOperands& ops) {
  const at::Tensor& x = ops.x;
  const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  TORCH_INTERNAL_ASSERT(x.size(0) >= 1 &&
                        x.size(0) <= (half ? kSkinnyHalfCapacity : kSkinnyPairCapacity) &&
                        x.size(1) > 0 &&
                        x.size(1) <= INT32_MAX && ops.weight.size(0) <= INT32_MAX &&
                        (half ? x.size(1) % 8 == 0
                              : x.scalar_type() == at::kFloat && ops.is_pair() &&
                                    2 * ops.pair.kp <= INT32_MAX));
}

// The kernel's element type: the half type, or PairOf for float32's fp16 pairs.
template <typename F>
void with_kernel_type(const SkinnyOperands& ops, const F& f) {
  const at::ScalarType t = ops.x.scalar_type();
  if (t == at::kHalf) {
    f(__half{});
  } else if (t == at::kBFloat16) {
    f(__nv_bfloat16{});
  } else {
    f(PairOf{});
  }
}

// The float32 form's shapes (kernel time at n = k = 8192, L2 emptied by a write, H100, against
// 0.0998 ms for a plain read of W's pair; bench/gemv_floor.cu pair): 1-8 rows 16-row blocks,
// two steps in flight (0.110-0.113 ms); 9-16 rows 32-row blocks (0.116, against 0.131 and
// 0.173 with 16-row blocks: x's re-reads through L2 halve); 17-32 rows 64-row blocks
// (0.123-0.126). Fewer rows a block where its blocks would leave most SMs idle (model 98's
// pooled weight). min_rows: a block's least rows (a group of channels).
template <typename Epilogue>
void launch_pair(const SkinnyOperands& ops, const Epilogue& epilogue, int sm_count,
                 int64_t min_rows) {
  const int64_t m = ops.x.size(0), n = ops.weight.size(0);
  if (m <= 8 && min_rows <= 16) {
    switch (warps_for((n + 15) / 16, sm_count)) {
      case 8: return launch<PairOf, 8, 1, 1>(ops, epilogue);
      case 16: return launch<PairOf, 16, 1, 1>(ops, epilogue);
      default: return launch<PairOf, 32, 1, 1>(ops, epilogue);
    }
  }
  if (m <= 8) return launch<PairOf, 8, 1, 2>(ops, epilogue);
  if (m <= 16 && (2 * ((n + 31) / 32) >= sm_count || min_rows > 16)) {
    return launch<PairOf, 8, 2, 2>(ops, epilogue);
  }
  if (m <= 16) {
    switch (warps_for((n + 15) / 16, sm_count)) {
      case 8: return launch<PairOf, 8, 2, 1>(ops, epilogue);
      case 16: return launch<PairOf, 16, 2, 1>(ops, epilogue);
      default: return launch<PairOf, 32, 2, 1>(ops, epilogue);
    }
  }
  launch<PairOf, 8, 4, 4>(ops, epilogue);  // the planner's rule: n / 64 fills half the SMs
}

// An epilogue over 16-row blocks: one 8-row tile of x up to 8 rows (half the MMAs and x
// loads: 0.0264 against 0.0282 ms for a model 98 call at 8 and 16 rows, H100), else two; the
// plain form (y) four at 17-32 rows.
// float32's fp16 pairs: launch_pair's shapes.
template <typename T, typename Epilogue>
void launch_16_rows(const SkinnyOperands& ops, const Epilogue& epilogue, int sm_count) {
  if constexpr (std::is_same_v<T, PairOf>) {
    launch_pair(ops, epilogue, sm_count, 16);
  } else {
    const auto tiles = [&](auto kTiles) {
      constexpr int kT = decltype(kTiles)::value;
      switch (warps_for((ops.weight.size(0) + 15) / 16, sm_count)) {
        case 8: return launch<T, 8, kT, 1>(ops, epilogue);
        case 16: return launch<T, 16, kT, 1>(ops, epilogue);
        default: return launch<T, 32, kT, 1>(ops, epilogue);
      }
    };
    if (ops.x.size(0) <= 8) {
      tiles(std::integral_constant<int, 1>{});
    } else if (ops.x.size(0) <= 16) {
      tiles(std::integral_constant<int, 2>{});
    } else if constexpr (std::is_same_v<Epilogue, StoreFloatY>) {
      tiles(std::integral_constant<int, 4>{});  // 17-32 rows: the plain form only (planner.cpp)
    } else {
      TORCH_INTERNAL_ASSERT(false, "fusedops: the skinny-half epilogues take at most ",
                            kSkinnyHalfFusedCapacity, " rows");
    }
  }
}

// The per-column vectors' and out's type P: x's dtype, or float32 (the autocast form, and
// float32 itself).
template <typename T, typename F>
void with_params_type(const at::Tensor& out, const F& f) {
  if constexpr (std::is_same_v<T, PairOf>) {
    f(float{});
  } else if (out.scalar_type() == at::kFloat) {
    f(float{});
  } else {
    f(T{});
  }
}

}  // namespace

bool skinny_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                     bool cache_folds, SkinnyOperands& out) {
  out.x = x;
  out.weight = weight;
  return x.scalar_type() != at::kFloat || split_pair(x, weight, weight_key, cache_folds, out.pair);
}

void skinny_half_linear(const SkinnyOperands& ops, at::Tensor& y, int sm_count) {
  check_operands(ops);
  const StoreFloatY store{y.data_ptr<float>()};
  with_kernel_type(ops, [&](auto t) {
    using T = decltype(t);
    launch_16_rows<T>(ops, store, sm_count);
  });
}

void skinny_half_groupnorm(const SkinnyOperands& ops, const at::Tensor& bias, int64_t group_size,
                           const at::Tensor& gamma, const at::Tensor& beta, double eps,
                           double negative_slope, at::Tensor& out, int sm_count) {
  check_operands(ops);
  TORCH_INTERNAL_ASSERT(ops.is_pair() || ops.x.size(0) <= kSkinnyHalfFusedCapacity);
  TORCH_INTERNAL_ASSERT(skinny_half_group_ok(group_size, ops.is_pair()) &&
                        ops.weight.size(0) % group_size == 0);
  const epilogues::GroupNormLeakyReluSum<float> chain{static_cast<float>(eps),
                                                      static_cast<float>(negative_slope)};
  with_kernel_type(ops, [&](auto t) {
    using T = decltype(t);
    const auto run = [&](auto p) {
      using P = decltype(p);
      const SkinnyGroupNormStore<P> store{
          reinterpret_cast<const P*>(bias.data_ptr()), reinterpret_cast<const P*>(gamma.data_ptr()),
          reinterpret_cast<const P*>(beta.data_ptr()), reinterpret_cast<P*>(out.data_ptr()), chain,
          static_cast<int>(group_size)};
      if constexpr (std::is_same_v<T, PairOf>) {
        return launch_pair(ops, store, sm_count, group_size);  // whole groups a block
      } else {
        // A block is one group: 16 x kRowTiles rows of W, for up to 16 rows of x.
        switch (group_size) {
          case 16: return launch_16_rows<T>(ops, store, sm_count);
          case 32: return launch<T, 8, 2, 2>(ops, store);
          case 64: return launch<T, 8, 2, 4>(ops, store);
          default: return launch<T, 8, 2, 8>(ops, store);
        }
      }
    };
    with_params_type<T>(out, run);
  });
}

void skinny_half_batchnorm_eval(const SkinnyOperands& ops, const at::Tensor& bias,
                                const at::Tensor& scale, const at::Tensor& gamma,
                                const at::Tensor& beta, const at::Tensor& running_mean,
                                const at::Tensor& running_var, double eps, at::Tensor& out,
                                int sm_count) {
  check_operands(ops);
  TORCH_INTERNAL_ASSERT(ops.is_pair() || ops.x.size(0) <= kSkinnyHalfFusedCapacity);
  TORCH_INTERNAL_ASSERT(scale.dim() == 1 && scale.size(0) == ops.weight.size(0));
  with_kernel_type(ops, [&](auto t) {
    using T = decltype(t);
    with_params_type<T>(out, [&](auto p) {
      using P = decltype(p);
      const auto ptr = [](const at::Tensor& v) { return reinterpret_cast<const P*>(v.data_ptr()); };
      const SkinnyBatchNormEvalStore<P> store{
          ptr(bias), ptr(scale), scale.stride(0), ptr(gamma), ptr(beta), ptr(running_mean),
          ptr(running_var), reinterpret_cast<P*>(out.data_ptr()), eps};
      launch_16_rows<T>(ops, store, sm_count);
    });
  });
}

}  // namespace fusedops::cuda::gemm
