// The 3xFP16 GEMM engine: float32-accurate y = x W^T at the fp16 tensor-core rate on Hopper.
//
// Each float32 operand v is scaled by a power of two (exact) so that its tensor's largest value
// sits in [2^14, 2^15), then split into two fp16 numbers: hi = fp16(v) and lo = fp16((v - hi) *
// 2^11), together 22 significant bits. Then
//   x W^T = 2^-(sx+sw) * (x_hi W_hi^T + 2^-11 (x_hi W_lo^T + x_lo W_hi^T)),
// computed as two fp16 GEMMs: the cross terms as one GEMM over 2K ([x_hi | x_lo] against
// [W_lo | W_hi]), and the main term x_hi W_hi^T with per-K-step promotion into float32 registers,
// whose epilogue adds the scaled cross terms (mainloop_3xfp16_sm90.h). Error at 1024 x 8192 x
// 8192: see docs/PERFORMANCE.md.
//
// Pieces, each named:
//   weight preparation  prepare_weight_3xfp16: scale + split of W, cached as ONE fold
//                       (FoldKind::kSplit3xFp16; the fp16 pair is one W's bytes), with W's range
//                       check done once there.
//   activation split    per call, on the GPU (scale from x's max, read on the GPU: no host sync).
//   range guard         rows of x the split cannot carry at float32 accuracy (inf/nan; a row
//                       whose largest value sits more than 2^26 below x's largest, so that its
//                       scaled values fall into fp16's subnormals; a row whose nonzero values
//                       span more than 2^30) are listed on the GPU and recomputed afterwards by
//                       an exact float32 kernel (fixup_rows). A weight
//                       that fails the same check (found once, when its fold is made) sends the
//                       whole GEMM to the exact cuBLAS path instead (linear_gemm.cu).
#pragma once

#include <ATen/core/Tensor.h>

namespace fusedops::cuda::gemm {

// Whether the engine can run y = x W^T for these float32 sizes on the current device: a
// Hopper GPU (sm_90) with this build's sm_90a kernels, N a multiple of 4 (16-byte output rows
// for the TMA store), sizes inside CUTLASS's 32-bit dimensions, and not during CUDA-graph
// capture when the weight's fold is not yet made (its range check reads a flag on the host).
bool can_run_3xfp16(int64_t m, int64_t n, int64_t k);

// y (M, N) float32 = x (M, K) W (N, K)^T. x and weight contiguous float32 on the current
// device; weight_key owns the cached fold. Returns false (y untouched) when the weight fails
// the range check: the caller then runs its exact path.
bool linear_nt_3xfp16(const at::Tensor& x, const at::Tensor& weight,
                      const at::Tensor& weight_key, bool cache_folds, at::Tensor& y);

}  // namespace fusedops::cuda::gemm
