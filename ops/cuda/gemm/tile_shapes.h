// The tile shapes of our SM90 GEMM kernels, as plain constants: the kernels are built from
// them (sm90_*.cu) and the planner (plan/planner.cpp) counts output tiles with them, so this
// header includes nothing CUDA and compiles in every build.
#pragma once

namespace fusedops::cuda::gemm {

// The 3xFP16 engine (why these: sm90_gemm_types.cuh): the promoted GEMMs' 128 x 128 output
// tile, the cross GEMM's twice as wide one, a 64-wide K step (K is padded to whole steps).
inline constexpr int kTileM = 128;
inline constexpr int kTileK = 64;
inline constexpr int kPromotedTileN = 128;
inline constexpr int kCrossTileN = 256;

// The native float16/bfloat16 GEMM with a fused epilogue (why ping-pong 128 x 128:
// sm90_half_gemm.cu); a GroupNorm group must fit inside one tile row.
inline constexpr int kHalfTileM = 128;
inline constexpr int kHalfTileN = 128;

}  // namespace fusedops::cuda::gemm
