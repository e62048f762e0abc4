// The skinny-half engine's launch (skinny_half.h): the kernel of gemv_half_kernel.cuh with an
// epilogue E on blocks of the shape heuristics.h picks. The engine knows no epilogue: a file
// that fuses one calls launch_skinny with it (ops/cuda/epilogues/*_skinny.cu). E declares what
// it takes: kMaxRows (rows of x in the half form, whose tiles it reuses for its statistics: 16,
// or 32 for a plain store; the float32 form takes kSkinnyPairCapacity) and kMaxBlockRows (the
// rows of W a block may need to hold: a group of columns its reduction owns).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <atomic>
#include <type_traits>

#include "cuda/gemm/gemv_half_kernel.cuh"
#include "cuda/gemm/heuristics.h"
#include "cuda/gemm/skinny_half.h"

namespace fusedops::cuda::gemm {

// The float32 form's tag: fp16 pairs, three products (gemv_half_kernel.cuh's kPair).
struct PairOf {};

// grid: K slices and chunks of rows (heuristics.h's skinny_partials_shape; one of each
// unsplit); slice_k: the k of a slice (0: all of K).
template <typename T, int kWarps, int kTiles, int kRowTiles, typename Epilogue>
void launch_shape(const SkinnyOperands& ops, const Epilogue& epilogue, int slices = 1,
                  int chunks = 1, int64_t slice_k = 0) {
  // Loads in flight per thread: (2 kRowTiles + kTiles) vectors per step, twice that in float32;
  // fewer steps as the block's rows grow, to stay within registers.
  constexpr bool kPair = std::is_same_v<T, PairOf>;
  using E = std::conditional_t<kPair, __half, T>;  // the element the MMAs take
  constexpr int kUnroll = kPair ? (kRowTiles == 1 && kTiles == 1 ? 2 : 1)
                                : kRowTiles == 1 ? 4 : kRowTiles == 2 ? 2 : 1;
  constexpr int smem = gemv_half_smem_bytes<kWarps, kTiles, kRowTiles, kPair>();
  const auto kernel = gemv_half_kernel<E, kWarps, kTiles, kRowTiles, kUnroll, kPair, Epilogue>;
  if constexpr (smem > 48 * 1024) {
    // The opt-in is a property of the function on a device, set once per device. Setting it
    // twice from racing threads is harmless.
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
  const int64_t k = kPair ? ops.pair.kp : ops.x.size(1);
  const dim3 grid(static_cast<unsigned>(tiles_of(n, 16 * kRowTiles)), static_cast<unsigned>(slices),
                  static_cast<unsigned>(chunks));
  kernel<<<grid, 32 * kWarps, smem, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const E*>(x.data_ptr()), reinterpret_cast<const E*>(w.data_ptr()),
      static_cast<int>(ops.x.size(0)), static_cast<int>(n), static_cast<int>(k),
      static_cast<int>(slice_k > 0 ? slice_k : k), epilogue, pair);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The operands the planner's rules promise (skinny_half.h); max_rows: the epilogue's kMaxRows.
inline void check_skinny_operands(const SkinnyOperands& ops, int64_t max_rows) {
  const at::Tensor& x = ops.x;
  const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  TORCH_INTERNAL_ASSERT(x.size(0) >= 1 &&
                        x.size(0) <= (half ? std::min(max_rows, kSkinnyHalfCapacity)
                                           : kSkinnyPairCapacity) &&
                        x.size(1) > 0 && x.size(1) <= INT32_MAX &&
                        ops.weight.size(0) <= INT32_MAX &&
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

// The type P of an epilogue's per-column vectors and output: x's dtype, or float32 (the
// autocast form, and float32 itself).
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

// One call: heuristics.h's shape for the sizes, as the instantiation that has it. block_rows:
// the rows of W a block must hold (16 where the epilogue needs no group).
template <typename T, typename Epilogue>
void launch_skinny(const SkinnyOperands& ops, const Epilogue& epilogue, int sm_count,
                   int block_rows) {
  constexpr bool kPair = std::is_same_v<T, PairOf>;
  const int64_t m = ops.x.size(0), n = ops.weight.size(0);
  TORCH_INTERNAL_ASSERT((kPair || m <= Epilogue::kMaxRows) &&
                        block_rows <= Epilogue::kMaxBlockRows);
  const SkinnyShape s = kPair ? skinny_pair_shape(m, n, sm_count, block_rows)
                              : skinny_half_shape(m, n, sm_count, block_rows);
  const auto any_warps = [&](auto tiles) {
    constexpr int kT = decltype(tiles)::value;
    switch (s.warps) {
      case 8: return launch_shape<T, 8, kT, 1>(ops, epilogue);
      case 16: return launch_shape<T, 16, kT, 1>(ops, epilogue);
      default: return launch_shape<T, 32, kT, 1>(ops, epilogue);
    }
  };
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  if constexpr (kPair) {
    if (s.row_tiles == 1) return s.tiles == 1 ? any_warps(One{}) : any_warps(Two{});
    if (s.tiles == 1) return launch_shape<T, 8, 1, 2>(ops, epilogue);
    if (s.tiles == 2) return launch_shape<T, 8, 2, 2>(ops, epilogue);
    return launch_shape<T, 8, 4, 4>(ops, epilogue);
  } else {
    if constexpr (Epilogue::kMaxBlockRows > 16) {
      switch (s.row_tiles) {
        case 1: break;
        case 2: return launch_shape<T, 8, 2, 2>(ops, epilogue);
        case 4: return launch_shape<T, 8, 2, 4>(ops, epilogue);
        default: return launch_shape<T, 8, 2, 8>(ops, epilogue);
      }
    }
    if (s.tiles == 1) return any_warps(One{});
    if (s.tiles == 2) return any_warps(Two{});
    if constexpr (Epilogue::kMaxRows > 16) {
      return any_warps(std::integral_constant<int, 4>{});
    }
  }
}

}  // namespace fusedops::cuda::gemm
