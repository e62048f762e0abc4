// Every shape an engine picks for a call, in one place: the SM90 kernels' tiles, the 3xFP16
// engine's split-K slices and the weight-streaming kernels' block shapes, each a plain function
// of the sizes and the SM count (plan::DeviceFacts). The planner names routes with them (a
// split-K route where the slices say so) and the engines launch with them, so the two cannot
// disagree. CUDA-free: it compiles in every build, and tests/cpp/test_planner.cpp reads it.
#pragma once

#include <cstdint>

namespace fusedops::cuda::gemm {

inline constexpr int64_t tiles_of(int64_t size, int64_t tile) { return (size + tile - 1) / tile; }

// The 3xFP16 engine (why these: sm90_gemm_types.cuh): the promoted GEMMs' 128 x 128 output
// tile, the cross GEMM's twice as wide one, a 64-wide K step (K is padded to whole steps).
inline constexpr int kTileM = 128;
inline constexpr int kTileK = 64;
inline constexpr int kPromotedTileN = 128;
inline constexpr int kCrossTileN = 256;
inline constexpr int64_t padded_k(int64_t k) { return tiles_of(k, kTileK) * kTileK; }

// The native float16/bfloat16 GEMM with a register epilogue (why ping-pong 128 x 128:
// sm90_register_gemm.cuh); a column-moments epilogue runs on the cooperative 128 x 256 tile,
// whose 256 threads meet over a tile's columns.
inline constexpr int kHalfTileM = 128;
inline constexpr int kHalfTileN = 128;
inline constexpr int kMomentsTileN = kCrossTileN;

// Split-K: where the output tiles cannot give every SM one of a pair, K is cut into slices
// (batches of the same GEMM) summed afterwards, each a whole number of K steps and at least 8
// of them (the pipeline fills before a slice ends). 1: data-parallel tiles, no split.
inline int split_k_slices(int64_t m, int64_t n, int64_t k, int64_t tile_n, int sm_count) {
  const int64_t tiles = tiles_of(m, kTileM) * tiles_of(n, tile_n);
  if (2 * tiles >= sm_count) return 1;
  const int64_t steps = k / kTileK;
  int best = 1;
  for (int64_t s = 2; s <= sm_count / tiles && steps / s >= 8; ++s) {
    if (steps % s == 0) best = static_cast<int>(s);
  }
  return best;
}

// The 3xFP16 engine's forms (gemm_3xfp16.h): the products it sums. Three: float32-accurate.
// Two, x_hi (W_hi + W_lo): x rounded as TF32 rounds it, W carried to 22 bits. One, x_hi W_hi:
// each operand rounded as TF32 rounds it.
enum class Products { kThree, kTwo, kOne };

// The width of the cross GEMM's K in units of kp: [x_hi | x_lo] against [W_lo | W_hi] (three
// products), x_hi against W_lo (two), none (one).
inline constexpr int64_t cross_k_units(Products p) {
  return p == Products::kThree ? 2 : p == Products::kTwo ? 1 : 0;
}

// The 3xFP16 engine's slices for one call: the cross GEMM's over its K (cross_k_units) and the
// main term's over kp. Writing y, the unsplit one-product GEMM runs the wider tile
// (scaled_gemm_sm90); as K-slice partials for an epilogue (`partials`), the promoted one.
struct Fp16Slices {
  int cross = 0, main = 1;
  bool split() const { return cross > 1 || main > 1; }
};
inline Fp16Slices fp16_engine_slices(int64_t m, int64_t n, int64_t k, Products products,
                                     bool partials, int sm_count) {
  const int64_t kp = padded_k(k);
  const bool one = products == Products::kOne;
  Fp16Slices s;
  s.cross = one ? 0 : split_k_slices(m, n, cross_k_units(products) * kp, kCrossTileN, sm_count);
  s.main = split_k_slices(m, n, kp, one && !partials ? kCrossTileN : kPromotedTileN, sm_count);
  return s;
}

// The weight-streaming tensor-core kernel (gemv_half_kernel.cuh): a block of `warps` warps owns
// 16 x row_tiles rows of W and `tiles` 8-row tiles of x, of one of `chunks` chunks of x's rows;
// `staged`: its loads through a ring in shared memory (the kernel's kStaged).
struct SkinnyShape {
  int warps, tiles, row_tiles;
  int chunks = 1;
  bool staged = false;
};

// Warps for a block of 16 rows of W: with few such blocks (a narrow W) eight warps an SM cannot
// keep enough loads in flight to read W at HBM speed, so the block grows to 16 or 32 warps
// splitting K further: aim for 16 warps per SM across the GPU.
inline int skinny_warps(int64_t blocks, int sm_count) {
  const int64_t want = static_cast<int64_t>(sm_count) * 16;
  if (blocks * 8 >= want) return 8;
  return blocks * 16 >= want ? 16 : 32;
}

// The 8-row tiles of x a block of the half kernel takes for m rows: one up to 8 rows (half the
// MMAs and x loads), two up to 16, four beyond (32 rows; a row reduction's partials take more
// rows as chunks of 32).
inline int skinny_tiles(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : 4; }

// float16/bfloat16 operands, m rows of x; block_rows: the rows of W a block must hold (a group
// of columns an epilogue reduces; 16 where it needs none); x's tiles as skinny_tiles says.
inline SkinnyShape skinny_half_shape(int64_t m, int64_t n, int sm_count, int block_rows) {
  if (block_rows > 16) return {8, 2, block_rows / 16};
  return {skinny_warps(tiles_of(n, 16), sm_count), skinny_tiles(m), 1};
}

// float32 as fp16 pairs (three products: twice the accumulators, so fewer rows a block):
// 1-8 rows 16-row blocks; 9-16 rows 32-row blocks (x's re-reads through L2 halve) unless they
// would leave most SMs idle (a narrow W); 17-32 rows 64-row blocks (the planner's rule: N / 64
// fills half the SMs); more rows the same blocks on chunks of 32 rows of x, a group of W's rows
// read once from HBM by its chunks together (more tiles a block would not fit its registers).
// From 25 rows the 64-row blocks stage their loads (on an H200, 39 and 62 at 8192 x 8192: a
// call at 25-32 rows 2-7% faster, at 17 8% slower; the kernel at 64 rows of x 0.189 -> 0.140
// ms: docs/PERFORMANCE.md, "Session of 2026-12-01 (third)"). block_rows as above.
inline SkinnyShape skinny_pair_shape(int64_t m, int64_t n, int sm_count, int block_rows) {
  if (m <= 8 && block_rows <= 16) return {skinny_warps(tiles_of(n, 16), sm_count), 1, 1};
  if (m <= 8) return {8, 1, 2};
  if (m <= 16 && (2 * tiles_of(n, 32) >= sm_count || block_rows > 16)) return {8, 2, 2};
  if (m <= 16) return {skinny_warps(tiles_of(n, 16), sm_count), 2, 1};
  return {8, 4, 4, static_cast<int>(tiles_of(m, 32)), m > 24};
}

// The weight-streaming kernel writing K-slice partials for a row-reduction epilogue, which
// sums the slices itself (skinny_half.h, skinny_partials): a narrow W (a pooled weight) gives
// too few 16-row blocks to read W at HBM speed, so K is cut into slices (grid y) until the GPU
// holds two 8-warp blocks an SM (more slices cut W's read time further but lengthen the
// reduction, which reads every slice), each slice at least one round of a block's warps (256 k
// of a row); more rows of x than a block's tiles take chunks of 8 `tiles` rows (grid z), each
// reading W again (from L2). kp: K as the kernel reads it (the float32 form's padded K).
// max_blocks (0: none): a grid that must be resident at once (a reader of the partials in the
// same launch, after a grid-wide barrier) takes fewer slices, each longer, to stay within it.
struct SkinnySlices {
  int slices, chunks;
  int64_t slice_k;  // k a slice reads: a multiple of 256, the last slice the rest
};
inline SkinnySlices skinny_partials_shape(int64_t m, int64_t n, int64_t kp, int sm_count,
                                          int64_t max_blocks = 0) {
  constexpr int64_t kRound = 256;  // 8 warps x 32 k
  const int64_t chunks = tiles_of(m, 8 * skinny_tiles(m));
  const int64_t blocks = tiles_of(n, 16) * chunks;
  const int64_t rounds = tiles_of(kp, kRound);
  const int64_t want = tiles_of(2 * static_cast<int64_t>(sm_count), blocks);
  int64_t slices = want < 1 ? 1 : want > rounds ? rounds : want;
  if (max_blocks > 0 && slices * blocks > max_blocks) {
    slices = max_blocks / blocks < 1 ? 1 : max_blocks / blocks;
  }
  const int64_t slice_k = tiles_of(rounds, slices) * kRound;
  return {static_cast<int>(tiles_of(kp, slice_k)), static_cast<int>(chunks), slice_k};
}

// The float32 skinny kernel (skinny.cu): the warps of a block that split K, the fewest that
// give every SM two blocks (kRowsPerBlock rows of W a block without a split).
inline int skinny_f32_split(int64_t n, int64_t rows_per_block, int sm_count) {
  for (int split : {1, 2, 4}) {
    if (tiles_of(n, rows_per_block / split) >= 2 * static_cast<int64_t>(sm_count)) return split;
  }
  return 8;
}

}  // namespace fusedops::cuda::gemm
