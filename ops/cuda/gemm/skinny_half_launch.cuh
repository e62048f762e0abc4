// The skinny-half engine's launch (skinny_half.h): the kernel of gemv_half_kernel.cuh with an
// epilogue E on blocks of the shape heuristics.h picks. The engine knows no epilogue: a file
// that fuses one calls launch_skinny with it (ops/cuda/epilogues/*_skinny.cu). E declares what
// it takes: kMaxRows (rows of x in the half form, whose tiles it reuses for its statistics: 16,
// or 32 for a plain store; the float32 form takes kSkinnyPairCapacity) and kMaxBlockRows (the
// rows of W a block may need to hold: a group of columns its reduction owns).
#pragma once

#include <ATen/ops/empty.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <atomic>
#include <cstddef>
#include <type_traits>

#include "cuda/gemm/gemv_half_kernel.cuh"
#include "cuda/gemm/heuristics.h"
#include "cuda/gemm/skinny_half.h"

namespace fusedops::cuda::gemm {

// The float32 form's tag: fp16 pairs, three products (gemv_half_kernel.cuh's kPair).
struct PairOf {};

// One instantiation of the kernel for an epilogue and a block shape (kWarps warps splitting
// K, kTiles 8-row tiles of x, kRowTiles 16-row tiles of W; kStaged: loads through shared
// memory), with what its launch needs.
template <typename T, int kWarps, int kTiles, int kRowTiles, typename Epilogue,
          bool kStaged = false>
struct SkinnyKernel {
  static constexpr bool kPair = std::is_same_v<T, PairOf>;
  using E = std::conditional_t<kPair, __half, T>;  // the element the MMAs take
  // Loads in flight per thread: (2 kRowTiles + kTiles) vectors per step, twice that in
  // float32; fewer steps as the block's rows grow, to stay within registers. Staged (the
  // float32 form's 64-row blocks, which have registers for no second step: heuristics.h's
  // skinny_pair_shape), the next step waits in a ring in shared memory.
  static constexpr int kUnroll = kPair ? (kRowTiles == 1 && kTiles == 1 ? 2 : 1)
                                       : kRowTiles == 1 ? 4 : kRowTiles == 2 ? 2 : 1;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kSmem = gemv_half_smem_bytes<kWarps, kTiles, kRowTiles, kPair, kStaged>();
  static constexpr auto kKernel =
      gemv_half_kernel<E, kWarps, kTiles, kRowTiles, kUnroll, kPair, kStaged, Epilogue>;
  static constexpr int kMaxDevices = 64;

  // The opt-in to more than 48 KiB of shared memory is a property of the function on a
  // device, set once per device. Setting it twice from racing threads is harmless. A kernel
  // within 48 KiB asks nothing (not even the device) on its launch path.
  static void prepare() {
    if constexpr (kSmem > 48 * 1024) {
      const int device = at::cuda::current_device();
      static std::atomic<bool> done[kMaxDevices] = {};
      if (device >= kMaxDevices || !done[device].load(std::memory_order_acquire)) {
        C10_CUDA_CHECK(
            cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
        if (device < kMaxDevices) done[device].store(true, std::memory_order_release);
      }
    }
  }

  // How many blocks can all be resident at once on the device (sm_count SMs): what a
  // grid-wide barrier allows. The occupancy is asked once per device (kept + 1: 0 = not yet).
  static int64_t resident_blocks(int device, int sm_count) {
    static std::atomic<int> per_sm_plus_one[kMaxDevices] = {};
    int per_sm = device < kMaxDevices ? per_sm_plus_one[device].load() - 1 : -1;
    if (per_sm < 0) {
      prepare();
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kThreads,
                                                                   kSmem));
      if (device < kMaxDevices) per_sm_plus_one[device].store(per_sm + 1);
    }
    return static_cast<int64_t>(per_sm) * sm_count;
  }
};

// grid: K slices and chunks of rows (heuristics.h's skinny_partials_shape and skinny_pair_shape;
// one of each unsplit; a chunk's blocks beside their group's in grid x: gemv_half_kernel.cuh);
// slice_k: the k of a slice (0: all of K). An epilogue that finishes the grid
// (FinishesGrid) is launched cooperatively: the runtime refuses a grid that cannot be resident
// at once (the caller sizes it by resident_blocks), where a plain launch would hang at the
// barrier; that refusal sets *refused where given, else it is an error.
template <typename T, int kWarps, int kTiles, int kRowTiles, typename Epilogue,
          bool kStaged = false>
void launch_shape(const SkinnyOperands& ops, const Epilogue& epilogue, int slices = 1,
                  int chunks = 1, int64_t slice_k = 0, bool* refused = nullptr) {
  using K = SkinnyKernel<T, kWarps, kTiles, kRowTiles, Epilogue, kStaged>;
  using E = typename K::E;
  constexpr bool kPair = K::kPair;
  K::prepare();
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
  const dim3 grid(static_cast<unsigned>(tiles_of(n, 16 * kRowTiles) * chunks),
                  static_cast<unsigned>(slices));
  const E* xp = reinterpret_cast<const E*>(x.data_ptr());
  const E* wp = reinterpret_cast<const E*>(w.data_ptr());
  const int m32 = static_cast<int>(ops.x.size(0)), n32 = static_cast<int>(n);
  const int k32 = static_cast<int>(k), slice32 = static_cast<int>(slice_k > 0 ? slice_k : k);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if constexpr (FinishesGrid<Epilogue>::value) {
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(K::kThreads);
    config.dynamicSmemBytes = K::kSmem;
    config.stream = stream;
    config.attrs = &cooperative;
    config.numAttrs = 1;
    const cudaError_t launched = cudaLaunchKernelEx(&config, K::kKernel, xp, wp, m32, n32, k32,
                                                    slice32, chunks, epilogue, pair);
    // A share of the device smaller than the occupancy said (an MPS client's thread
    // percentage): nothing ran; the caller takes its two-kernel path.
    if (launched == cudaErrorCooperativeLaunchTooLarge && refused != nullptr) {
      (void)cudaGetLastError();
      *refused = true;
      return;
    }
    C10_CUDA_CHECK(launched);
  } else {
    K::kKernel<<<grid, K::kThreads, K::kSmem, stream>>>(xp, wp, m32, n32, k32, slice32, chunks,
                                                        epilogue, pair);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// A block's sums as a K-slice partial (gemv_half_kernel.cuh's apply_terms): slice blockIdx.y,
// rows chunk0 on. Consecutive threads take consecutive columns of y: coalesced stores. Then,
// given a Finish (not NoFinish), its finish<threads>() in every block once the whole grid's
// partials are written: the reader of the partials in the same launch.
struct NoFinish {};

template <typename Finish = NoFinish>
struct StorePartials {
  static constexpr bool kTerms = true;
  static constexpr bool kFinishesGrid = !std::is_same_v<Finish, NoFinish>;
  float* main;    // the main term's first slice (float16/bfloat16: the product's)
  float* cross;   // the cross terms' first slice (the float32 form), else null
  int64_t count;  // M * N: the stride between slices
  Finish then;

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply_terms(const float* main_tile, const float* cross_tile,
                                              int row0, int chunk0, int m, int n,
                                              int threads) const {
    const int64_t slice = blockIdx.y * count;
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows;
      if (row0 + r >= n || c >= m) continue;
      const int64_t at = slice + static_cast<int64_t>(chunk0 + c) * n + row0 + r;
      main[at] = main_tile[r * kCols + c];
      if (cross != nullptr) cross[at] = cross_tile[r * kCols + c];
    }
  }

  template <int kThreads>
  __device__ __forceinline__ void finish() const {
    then.template finish<kThreads>();
  }
};

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
    if (s.staged) return launch_shape<T, 8, 4, 4, Epilogue, true>(ops, epilogue, 1, s.chunks);
    return launch_shape<T, 8, 4, 4>(ops, epilogue, 1, s.chunks);
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

// skinny_partials (skinny_half.h), and with make (a callable from the partials' view to a
// Finish) the partials' reader in the same launch, on a grid the device holds at once (fewer
// K slices where needed: heuristics.h): false, launching nothing, where even one slice is too
// many blocks or the runtime refuses the cooperative launch (the caller then reads the
// partials itself).
template <typename Make = std::nullptr_t>
bool skinny_partials_then(const SkinnyOperands& ops, int sm_count, Partials3xFp16& out,
                          const Make& make = nullptr) {
  constexpr bool kFinish = !std::is_same_v<Make, std::nullptr_t>;
  const at::Tensor& x = ops.x;
  const bool pair = ops.is_pair();
  const int64_t m = x.size(0), n = ops.weight.size(0), kp = pair ? ops.pair.kp : x.size(1);
  TORCH_INTERNAL_ASSERT(m >= 1 && m <= INT32_MAX && n <= INT32_MAX && kp > 0 &&
                        (pair ? 2 * kp : kp) <= INT32_MAX && kp % 8 == 0);
  const int64_t count = m * n;
  bool launched = false;
  const auto with_tiles = [&](auto type, auto tiles) {
    using T = decltype(type);
    constexpr int kT = decltype(tiles)::value;
    int64_t resident = 0;  // the grid within what the device holds at once, or nothing
    if constexpr (kFinish) {
      using Store = StorePartials<std::invoke_result_t<Make, const Partials3xFp16View&>>;
      resident = SkinnyKernel<T, 8, kT, 1, Store>::resident_blocks(at::cuda::current_device(),
                                                                  sm_count);
    }
    const SkinnySlices shape = skinny_partials_shape(m, n, kp, sm_count, resident);
    if (kFinish && tiles_of(n, 16) * shape.slices * shape.chunks > resident) return;
    const int cross_slices = pair ? shape.slices : 0;
    out.partials =
        at::empty({cross_slices + shape.slices, m, n}, x.options().dtype(at::kFloat));
    out.guard = pair ? ops.pair.guard : at::Tensor();
    float* base = out.partials.data_ptr<float>();
    const float* alpha = nullptr;
    const float* beta = nullptr;
    if (pair) {
      const GuardLayout layout{m};
      const float* guard = reinterpret_cast<const float*>(ops.pair.guard.data_ptr<int>());
      alpha = guard + layout.alpha();
      beta = guard + layout.beta();
    }
    out.view = {base, cross_slices, shape.slices, n, count, alpha, beta};
    float* main = base + cross_slices * count;
    float* cross = pair ? base : nullptr;
    if constexpr (kFinish) {
      const StorePartials<std::invoke_result_t<Make, const Partials3xFp16View&>> store{
          main, cross, count, make(out.view)};
      bool refused = false;
      launch_shape<T, 8, kT, 1>(ops, store, shape.slices, shape.chunks, shape.slice_k, &refused);
      if (refused) return;
    } else {
      launch_shape<T, 8, kT, 1>(ops, StorePartials<>{main, cross, count, {}}, shape.slices,
                                shape.chunks, shape.slice_k);
    }
    launched = true;
  };
  with_kernel_type(ops, [&](auto t) {
    switch (skinny_tiles(m)) {
      case 1: return with_tiles(t, std::integral_constant<int, 1>{});
      case 2: return with_tiles(t, std::integral_constant<int, 2>{});
      default: return with_tiles(t, std::integral_constant<int, 4>{});
    }
  });
  return launched;
}

}  // namespace fusedops::cuda::gemm
