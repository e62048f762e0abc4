// The native float16/bfloat16 GEMM on Hopper with an epilogue on its float32 accumulators in
// registers (a RegisterEpilogue, register_epilogue_sm90.cuh), so that y = x W^T is never
// written: the plain SM90 mainloop of sm90_gemm_types.cuh (TMA producer, 2 x 1 clusters,
// persistent) in its ping-pong form. The engine knows no epilogue: a file that fuses one
// instantiates register_epilogue_gemm with it (ops/cuda/epilogues/*_sm90.cu).
//
// Why ping-pong 128 x 128: the two consumer warp groups take alternate tiles, so one's epilogue
// (passes over its accumulators, shuffles, parameter loads, stores) runs while the other's
// mainloop keeps the tensor cores busy; it measured faster than the cooperative 128 x 256 tile
// (both warp groups on one tile, epilogue not overlapped) and than ping-pong 64 x 256
// (docs/PERFORMANCE.md). A register epilogue keeps no shared memory: the mainloop takes every
// stage it can. Included only by sm90 .cu files, with FUSEDOPS_SM90A.
#pragma once

#include "cuda/gemm/sm90_gemm_types.cuh"
#include "cutlass/epilogue/collective/detail.hpp"

namespace fusedops::cuda::gemm::sm90 {

using HalfTile = cute::Shape<cute::Int<kHalfTileM>, cute::Int<kHalfTileN>, cute::Int<kTileK>>;
using HalfSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// Runs Epi on the accumulators of x W^T; x (M, K) and W (N, K) in Element (cutlass::half_t or
// cutlass::bfloat16_t), K contiguous; the epilogue's output (M, N) row-major. `epilogue`: Epi's
// arguments but the output's stride, which the engine sets. `name` names the caller in errors.
template <class Epi, class Element>
void register_epilogue_gemm(const Fp16GemmShape& shape, const void* x, const void* w,
                            const typename Epi::Arguments& epilogue, cudaStream_t stream,
                            const char* name) {
  using Adapter = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epi>;
  using G = Gemm<PlainMainloop<HalfTile, Adapter, Element, HalfSchedule>, Adapter>;
  auto args = make_mainloop_arguments<G>(shape, x, w);
  args.epilogue = epilogue;
  args.epilogue.dD = typename G::GemmKernel::StrideD{int64_t(shape.n), cute::Int<1>{}, 0};
  run<G>(args, stream, name);
}

}  // namespace fusedops::cuda::gemm::sm90
