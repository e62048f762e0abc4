#include "cuda/gemm/skinny_half.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "cuda/gemm/epilogue_batchnorm_skinny.cuh"
#include "cuda/gemm/epilogue_groupnorm_skinny.cuh"
#include "cuda/gemm/gemv_half_kernel.cuh"

namespace fusedops::cuda::gemm {
namespace {

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
void launch(const at::Tensor& x, const at::Tensor& weight, const Epilogue& epilogue) {
  // Loads in flight per thread: 2 kRowTiles + kTiles vectors per step; fewer steps as the
  // block's rows grow, to stay within registers.
  constexpr int kUnroll = kRowTiles == 1 ? 4 : kRowTiles == 2 ? 2 : 1;
  constexpr int smem = gemv_half_smem_bytes<kWarps, kTiles, kRowTiles>();
  const auto kernel = gemv_half_kernel<T, kWarps, kTiles, kRowTiles, kUnroll, Epilogue>;
  if constexpr (smem > 48 * 1024) {
    // The opt-in is a property of the function on the current device: set on every call (only
    // groups of 128 channels get here).
    C10_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  const int64_t blocks = (weight.size(0) + 16 * kRowTiles - 1) / (16 * kRowTiles);
  kernel<<<static_cast<unsigned>(blocks), 32 * kWarps, smem, at::cuda::getCurrentCUDAStream()>>>(
          reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<const T*>(weight.data_ptr()),
          static_cast<int>(x.size(0)), static_cast<int>(weight.size(0)),
          static_cast<int>(x.size(1)), epilogue);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void check_operands(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_INTERNAL_ASSERT(x.size(0) >= 1 && x.size(0) <= kSkinnyHalfCapacity && x.size(1) > 0 &&
                        x.size(1) % 8 == 0 && x.size(1) <= INT32_MAX &&
                        weight.size(0) <= INT32_MAX &&
                        (x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16));
}

template <typename F>
void with_half_type(at::ScalarType t, const F& f) {
  if (t == at::kHalf) {
    f(__half{});
  } else {
    f(__nv_bfloat16{});
  }
}

// An epilogue over 16-row blocks: one 8-row tile of x up to 8 rows (half the MMAs and x
// loads: 0.0264 against 0.0282 ms for a model 98 call at 8 and 16 rows, H100), else two.
template <typename T, typename Epilogue>
void launch_16_rows(const at::Tensor& x, const at::Tensor& weight, const Epilogue& epilogue,
                    int sm_count) {
  const auto tiles = [&](auto kTiles) {
    constexpr int kT = decltype(kTiles)::value;
    switch (warps_for((weight.size(0) + 15) / 16, sm_count)) {
      case 8: return launch<T, 8, kT, 1>(x, weight, epilogue);
      case 16: return launch<T, 16, kT, 1>(x, weight, epilogue);
      default: return launch<T, 32, kT, 1>(x, weight, epilogue);
    }
  };
  if (x.size(0) <= 8) {
    tiles(std::integral_constant<int, 1>{});
  } else {
    tiles(std::integral_constant<int, 2>{});
  }
}

// The per-column vectors' and out's type P: x's dtype, or float32 (the autocast form).
template <typename T, typename F>
void with_params_type(const at::Tensor& out, const F& f) {
  if (out.scalar_type() == at::kFloat) {
    f(float{});
  } else {
    f(T{});
  }
}

}  // namespace

void skinny_half_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y,
                        int sm_count) {
  check_operands(x, weight);
  const StoreFloatY store{y.data_ptr<float>()};
  with_half_type(x.scalar_type(), [&](auto t) {
    using T = decltype(t);
    launch_16_rows<T>(x, weight, store, sm_count);
  });
}

void skinny_half_groupnorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t group_size, const at::Tensor& gamma, const at::Tensor& beta,
                           double eps, double negative_slope, at::Tensor& out, int sm_count) {
  check_operands(x, weight);
  TORCH_INTERNAL_ASSERT(skinny_half_group_ok(group_size) && weight.size(0) % group_size == 0);
  const epilogues::GroupNormLeakyReluSum<float> chain{static_cast<float>(eps),
                                                      static_cast<float>(negative_slope)};
  with_half_type(x.scalar_type(), [&](auto t) {
    using T = decltype(t);
    const auto run = [&](auto p) {
      using P = decltype(p);
      const SkinnyGroupNormStore<P> store{
          reinterpret_cast<const P*>(bias.data_ptr()), reinterpret_cast<const P*>(gamma.data_ptr()),
          reinterpret_cast<const P*>(beta.data_ptr()), reinterpret_cast<P*>(out.data_ptr()), chain};
      // A block is one group: 16 x kRowTiles rows of W, for up to 16 rows of x.
      switch (group_size) {
        case 16: return launch_16_rows<T>(x, weight, store, sm_count);
        case 32: return launch<T, 8, 2, 2>(x, weight, store);
        case 64: return launch<T, 8, 2, 4>(x, weight, store);
        default: return launch<T, 8, 2, 8>(x, weight, store);
      }
    };
    with_params_type<T>(out, run);
  });
}

void skinny_half_batchnorm_eval(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& scale,
                                const at::Tensor& gamma, const at::Tensor& beta,
                                const at::Tensor& running_mean, const at::Tensor& running_var,
                                double eps, at::Tensor& out, int sm_count) {
  check_operands(x, weight);
  TORCH_INTERNAL_ASSERT(scale.dim() == 1 && scale.size(0) == weight.size(0));
  with_half_type(x.scalar_type(), [&](auto t) {
    using T = decltype(t);
    with_params_type<T>(out, [&](auto p) {
      using P = decltype(p);
      const auto ptr = [](const at::Tensor& v) { return reinterpret_cast<const P*>(v.data_ptr()); };
      const SkinnyBatchNormEvalStore<P> store{
          ptr(bias), ptr(scale), scale.stride(0), ptr(gamma), ptr(beta), ptr(running_mean),
          ptr(running_var), reinterpret_cast<P*>(out.data_ptr()), eps};
      launch_16_rows<T>(x, weight, store, sm_count);
    });
  });
}

}  // namespace fusedops::cuda::gemm
