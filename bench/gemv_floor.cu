// The floor of a small-batch half-precision GEMM, counted on the GPU itself (issue 25): at m <= 64
// rows y = x W^T is a read of W, so this program times, around the kernel alone with CUDA events
// and L2 emptied before each call,
//   - an empty kernel (what the events and a launch cost),
//   - a plain read of W (16-byte loads, every SM busy: what a read of 128 MiB can take here),
//   - cuBLAS's fp16 GEMM (cublasGemmEx, float32 accumulation and output), and
//   - the skinny-half kernel (ops/cuda/gemm/gemv_half_kernel.cuh) as skinny_half.cu launches it
//     at m <= 16, and two shapes with more rows per block for 24-64 rows,
// at n = k = 8192 float16, with L2 emptied by writing 256 MiB (dirty lines the timed call pays to
// write back) and by reading them (clean lines). Each skinny result is checked against cuBLAS's.
// `./gemv_floor pair` times instead the kernel's float32 form (W's and x's fp16 pairs, three
// products: 256 MiB at n = k = 8192) in each block shape at 1-64 rows (above 32 also on chunks
// of x's rows), against a plain read of those bytes, each shape's y checked against the first's.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iops $(python3 -c "import torch.utils.cpp_extension as c; \
//     print(' '.join('-I' + p for p in c.include_paths()))") bench/gemv_floor.cu -lcublas \
//     -o gemv_floor && ./gemv_floor
// (c10's headers only: the kernel's epilogue headers use c10 macros; nothing links ATen.)
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/gemm/gemv_half_kernel.cuh"

namespace {

using fusedops::cuda::gemm::gemv_half_kernel;
using fusedops::cuda::gemm::gemv_half_smem_bytes;
using fusedops::cuda::gemm::StoreFloatY;

void check(cudaError_t e, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gemv_floor: CUDA error %s at line %d\n", cudaGetErrorString(e), line);
    std::exit(1);
  }
}
#define CHECK(call) check((call), __LINE__)

constexpr size_t kFlushBytes = size_t{256} << 20;  // five times the L2 of an H100 or H200

__global__ void read_words(const uint4* __restrict__ p, size_t count, int* sink) {
  uint32_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = 1;  // keeps the loads; never true for the data here
}

__global__ void empty_kernel() {}

struct Timer {
  bool read_flush = false;
  uint4* flush = nullptr;
  int* sink = nullptr;
  int sms = 0;

  template <typename F>
  float median_ms(F call, int reps = 60) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<float> ms;
    for (int i = 0; i < reps + 3; ++i) {
      if (read_flush) {
        read_words<<<sms * 8, 512>>>(flush, kFlushBytes / 16, sink);
      } else {
        CHECK(cudaMemsetAsync(flush, i, kFlushBytes));
      }
      CHECK(cudaEventRecord(start));
      call();
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, start, stop));
      if (i >= 3) ms.push_back(t);
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

template <int kWarps, int kTiles, int kRowTiles, int kUnroll>
void skinny(const __half* x, const __half* w, float* y, int m, int n, int k) {
  const auto kernel =
      gemv_half_kernel<__half, kWarps, kTiles, kRowTiles, kUnroll, false, false, StoreFloatY>;
  constexpr int smem = gemv_half_smem_bytes<kWarps, kTiles, kRowTiles>();
  if (smem > 48 * 1024) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  kernel<<<(n + 16 * kRowTiles - 1) / (16 * kRowTiles), 32 * kWarps, smem>>>(x, w, m, n, k, k, 1,
                                                                            StoreFloatY{y}, {});
  CHECK(cudaGetLastError());
}

// The float32 form (kPair) on W's and x's fp16 pairs (rows 2k halves long): per-row scales 1
// and 2^-11, no guarded rows; x's rows in chunks of 8 kTiles (a group of W's rows read by its
// chunks together, as skinny_half_launch.cuh launches it).
template <int kWarps, int kTiles, int kRowTiles, int kUnroll, bool kStaged = false>
void skinny_pair(const __half* x, const __half* w, const float* alpha, const float* beta, float* y,
                 int m, int n, int k) {
  const int chunks = (m + 8 * kTiles - 1) / (8 * kTiles);
  const auto kernel =
      gemv_half_kernel<__half, kWarps, kTiles, kRowTiles, kUnroll, true, kStaged, StoreFloatY>;
  constexpr int smem = gemv_half_smem_bytes<kWarps, kTiles, kRowTiles, true, kStaged>();
  if (smem > 48 * 1024) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  fusedops::cuda::gemm::PairArgs pair;
  pair.alpha = alpha;
  pair.beta = beta;
  kernel<<<(n + 16 * kRowTiles - 1) / (16 * kRowTiles) * chunks, 32 * kWarps, smem>>>(
      x, w, m, n, k, k, chunks, StoreFloatY{y}, pair);
  CHECK(cudaGetLastError());
}

__half* random_halves(size_t count, float scale, unsigned seed) {
  std::vector<__half> host(count);
  std::srand(seed);
  for (auto& v : host) v = __float2half((std::rand() / float(RAND_MAX) - 0.5f) * scale);
  __half* device = nullptr;
  CHECK(cudaMalloc(&device, count * sizeof(__half)));
  CHECK(cudaMemcpy(device, host.data(), count * sizeof(__half), cudaMemcpyHostToDevice));
  return device;
}

}  // namespace

// `gemv_floor pair`: the float32 form's shapes against a read of W's pair (256 MiB), each
// shape's y checked against the first's.
int pair_main(Timer& timer) {
  constexpr int n = 8192, k = 8192, kMaxRows = 64;
  const __half* w = random_halves(size_t{n} * 2 * k, 0.02f, 1);
  const __half* x = random_halves(size_t{kMaxRows} * 2 * k, 1.f, 2);
  std::vector<float> host_alpha(kMaxRows, 1.f), host_beta(kMaxRows, 1.f / 2048);
  float *alpha = nullptr, *beta = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&alpha, sizeof(float) * kMaxRows));
  CHECK(cudaMalloc(&beta, sizeof(float) * kMaxRows));
  CHECK(cudaMemcpy(alpha, host_alpha.data(), sizeof(float) * kMaxRows, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(beta, host_beta.data(), sizeof(float) * kMaxRows, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&y, sizeof(float) * kMaxRows * n));
  const double w_bytes = 4.0 * n * k;
  const auto gbs = [&](float ms) { return w_bytes / (ms * 1e6); };
  std::printf("float32 form, n = k = %d (W's pair %.0f MiB), ms (GB/s of the pair)\n", n,
              w_bytes / (1 << 20));
  for (const bool read_flush : {false, true}) {
    timer.read_flush = read_flush;
    std::printf("== L2 emptied by %s 256 MiB\n", read_flush ? "reading" : "writing");
    const float read = timer.median_ms([&] {
      read_words<<<timer.sms * 16, 512>>>(reinterpret_cast<const uint4*>(w), w_bytes / 16,
                                          timer.sink);
    });
    std::printf("read of W's pair %.4f (%.0f)\n", read, gbs(read));
    for (const int m : {1, 4, 8, 12, 16, 24, 32, 48, 64}) {
      std::printf("m=%-3d", m);
      std::vector<float> first, got(static_cast<size_t>(m) * n);
      const auto run = [&](const char* name, auto launch) {
        const float t = timer.median_ms(launch);
        CHECK(cudaMemset(y, 0, sizeof(float) * got.size()));
        launch();
        CHECK(cudaMemcpy(got.data(), y, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
        bool same = true;
        if (first.empty()) first = got;
        for (size_t i = 0; i < got.size(); ++i) {
          same &= std::fabs(got[i] - first[i]) <= 1e-5f * (1.f + std::fabs(first[i]));
        }
        std::printf(" | %s %.4f (%.0f)%s", name, t, gbs(t), same ? "" : " DIFFERS");
      };
      const auto shapes = [&](auto tiles) {
        constexpr int kT = decltype(tiles)::value;
        run("16r x 8w u2", [&] { skinny_pair<8, kT, 1, 2>(x, w, alpha, beta, y, m, n, k); });
        run("16r x 8w u1", [&] { skinny_pair<8, kT, 1, 1>(x, w, alpha, beta, y, m, n, k); });
        run("32r x 8w u1", [&] { skinny_pair<8, kT, 2, 1>(x, w, alpha, beta, y, m, n, k); });
        // Sixteen warps' two sets of 32 x 64 sums (m > 32) are 256 KiB: more than a block's
        // shared memory on Hopper (227 KiB), a launch the driver refuses.
        if constexpr (gemv_half_smem_bytes<16, kT, 2, true>() <= 227 * 1024) {
          run("32r x 16w u1", [&] { skinny_pair<16, kT, 2, 1>(x, w, alpha, beta, y, m, n, k); });
        }
        if constexpr (kT <= 4) {
          run("32r x 8w u2", [&] { skinny_pair<8, kT, 2, 2>(x, w, alpha, beta, y, m, n, k); });
          run("64r x 8w u1", [&] { skinny_pair<8, kT, 4, 1>(x, w, alpha, beta, y, m, n, k); });
          // Staged: the loads through a two-step ring in shared memory (cp.async).
          run("32r x 8w staged",
              [&] { skinny_pair<8, kT, 2, 1, true>(x, w, alpha, beta, y, m, n, k); });
          run("64r x 8w staged",
              [&] { skinny_pair<8, kT, 4, 1, true>(x, w, alpha, beta, y, m, n, k); });
        }
      };
      if (m <= 8) shapes(std::integral_constant<int, 1>{});
      else if (m <= 16) shapes(std::integral_constant<int, 2>{});
      else if (m <= 32) shapes(std::integral_constant<int, 4>{});
      else shapes(std::integral_constant<int, 8>{});
      // More than 32 rows: chunks of x's rows (skinny_pair_shape: 64 rows of W a block, chunks
      // of 32 rows), and chunks of 16 on 32-row blocks.
      if (m > 32) {
        run("64r x 8w u1 chunks of 32",
            [&] { skinny_pair<8, 4, 4, 1>(x, w, alpha, beta, y, m, n, k); });
        run("32r x 8w u1 chunks of 16",
            [&] { skinny_pair<8, 2, 2, 1>(x, w, alpha, beta, y, m, n, k); });
        run("64r x 8w u1 chunks of 16",
            [&] { skinny_pair<8, 2, 4, 1>(x, w, alpha, beta, y, m, n, k); });
        run("64r x 8w staged chunks of 32",
            [&] { skinny_pair<8, 4, 4, 1, true>(x, w, alpha, beta, y, m, n, k); });
        run("32r x 8w staged chunks of 32",
            [&] { skinny_pair<8, 4, 2, 1, true>(x, w, alpha, beta, y, m, n, k); });
      }
      std::printf("\n");
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  constexpr int n = 8192, k = 8192, kMaxRows = 64;
  Timer timer;
  CHECK(cudaDeviceGetAttribute(&timer.sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaMalloc(&timer.flush, kFlushBytes));
  CHECK(cudaMalloc(&timer.sink, sizeof(int)));
  if (argc > 1 && std::string(argv[1]) == "pair") return pair_main(timer);
  const __half* w = random_halves(size_t{n} * k, 0.02f, 1);
  const __half* x = random_halves(size_t{kMaxRows} * k, 1.f, 2);
  float *y = nullptr, *y_ref = nullptr;
  CHECK(cudaMalloc(&y, sizeof(float) * kMaxRows * n));
  CHECK(cudaMalloc(&y_ref, sizeof(float) * kMaxRows * n));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  const double w_bytes = 2.0 * n * k;
  const auto gbs = [&](float ms) { return w_bytes / (ms * 1e6); };
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, n = k = %d float16 (W %.0f MiB), median of 60 calls, ms (GB/s of W)\n",
              prop.name, n, w_bytes / (1 << 20));
  for (const bool read_flush : {false, true}) {
    timer.read_flush = read_flush;
    std::printf("== L2 emptied by %s 256 MiB\n", read_flush ? "reading" : "writing");
    std::printf("empty kernel %.4f\n", timer.median_ms([] { empty_kernel<<<1, 32>>>(); }));
    const float read = timer.median_ms([&] {
      read_words<<<timer.sms * 16, 512>>>(reinterpret_cast<const uint4*>(w), w_bytes / 16,
                                          timer.sink);
    });
    std::printf("read of W    %.4f (%.0f)\n", read, gbs(read));
    for (const int m : {1, 8, 16, 17, 24, 32, 48, 64}) {
      const float one = 1.f, zero = 0.f;
      const auto cublas = [&] {
        cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16F, k, x,
                     CUDA_R_16F, k, &zero, y_ref, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
      };
      const float t_cublas = timer.median_ms(cublas);
      std::vector<float> ref(static_cast<size_t>(m) * n), got(static_cast<size_t>(m) * n);
      cublas();
      CHECK(cudaMemcpy(ref.data(), y_ref, sizeof(float) * ref.size(), cudaMemcpyDeviceToHost));
      std::printf("m=%-3d cuBLAS %.4f (%.0f) |", m, t_cublas, gbs(t_cublas));
      const auto run = [&](const char* name, auto launch) {
        const float t = timer.median_ms(launch);
        CHECK(cudaMemset(y, 0, sizeof(float) * got.size()));
        launch();
        CHECK(cudaMemcpy(got.data(), y, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
        double err = 0, scale = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          err = std::max(err, double(std::fabs(got[i] - ref[i])));
          scale = std::max(scale, double(std::fabs(ref[i])));
        }
        std::printf(" %s %.4f (%.0f)%s |", name, t, gbs(t), err > 1e-4 * scale ? " WRONG" : "");
      };
      // skinny_half.cu's choice at this n (512 blocks of 16 rows: 8 warps, 4 steps in flight).
      if (m <= 8) run("skinny", [&] { skinny<8, 1, 1, 4>(x, w, y, m, n, k); });
      else if (m <= 16) run("skinny", [&] { skinny<8, 2, 1, 4>(x, w, y, m, n, k); });
      // More rows of W per block, fewer re-reads of x through L2.
      if (m > 16 && m <= 32) {
        run("32r x 16w u1", [&] { skinny<16, 4, 2, 1>(x, w, y, m, n, k); });
        run("32r x 8w u2", [&] { skinny<8, 4, 2, 2>(x, w, y, m, n, k); });
        run("64r x 8w u1", [&] { skinny<8, 4, 4, 1>(x, w, y, m, n, k); });
        run("64r x 8w u2", [&] { skinny<8, 4, 4, 2>(x, w, y, m, n, k); });
        run("128r x 8w u1", [&] { skinny<8, 4, 8, 1>(x, w, y, m, n, k); });
      }
      if (m > 32) {
        run("32r x 8w u1", [&] { skinny<8, 8, 2, 1>(x, w, y, m, n, k); });
        run("32r x 8w u2", [&] { skinny<8, 8, 2, 2>(x, w, y, m, n, k); });
        run("64r x 8w u1", [&] { skinny<8, 8, 4, 1>(x, w, y, m, n, k); });
        run("64r x 4w u1", [&] { skinny<4, 8, 4, 1>(x, w, y, m, n, k); });
      }
      std::printf("\n");
    }
  }
  return 0;
}
