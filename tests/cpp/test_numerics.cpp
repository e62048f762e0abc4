// The numerics argument through the public C++ API: "eager" rounds a bfloat16/float16 model's
// intermediates where the reference's ATen chain writes them, so the result meets the
// reduced-precision bar against that chain run in the same dtype; bad values throw with the
// argument's name, the expected values and the given one; the default is "accurate".
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <fusedops/fusedops.h>

#include <string>
#include <vector>

#include "reference.h"

namespace fusedops::testing {
namespace {

std::vector<c10::Device> devices() {
  std::vector<c10::Device> all{c10::kCPU};
  if (at::hasCUDA()) all.emplace_back(c10::kCUDA);
  return all;
}

struct Linear {
  at::Tensor x, w, b;
};

Linear random_linear(int64_t batch, int64_t in, int64_t out, at::ScalarType dtype,
                     c10::Device device) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  // nn.Linear's initialization: uniform in +-1/sqrt(in_features).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  return {at::rand({batch, in}).to(options), ((at::rand({out, in}) * 2 - 1) * bound).to(options),
          ((at::rand({out}) * 2 - 1) * bound).to(options)};
}

TEST(Numerics, EagerMatchesTheReferenceChainInItsDtype) {
  at::manual_seed(21);
  for (const c10::Device device : devices()) {
    for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " on " + device.str());
      const Linear l = random_linear(48, 200, 160, dtype, device);
      const Tolerance tol = tolerance_for(dtype);
      EXPECT_TRUE(AllClose(fusedops::matmul_avgpool_gelu_scale_max(l.x, l.w, l.b, 8, 2.0, true,
                                                                   "eager"),
                           reference98(l.x, l.w, l.b, 8, 2.0), tol));
      EXPECT_TRUE(AllClose(fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(l.x, l.w, l.b,
                                                                                true, "eager"),
                           reference18(l.x, l.w, l.b), tol));
      const auto options = l.x.options();
      const at::Tensor gamma = at::rand({160}).add(0.5).to(options);
      const at::Tensor beta = at::randn({160}).mul(0.5).to(options);
      EXPECT_TRUE(AllClose(fusedops::matmul_groupnorm_leakyrelu_sum(l.x, l.w, l.b, 10, gamma,
                                                                    beta, 1e-5, 0.01, true,
                                                                    "eager"),
                           reference62(l.x, l.w, l.b, 10, gamma, beta, 1e-5, 0.01), tol));
      const at::Tensor scale = at::randn({160}).to(options);
      at::Tensor mean = at::zeros({160}, options), var = at::ones({160}, options);
      at::Tensor count = at::zeros({}, options.dtype(at::kLong));
      at::Tensor ref_mean = mean.clone(), ref_var = var.clone(), ref_count = count.clone();
      const at::Tensor out = fusedops::gemm_scale_batchnorm(l.x, l.w, l.b, scale, gamma, beta,
                                                            mean, var, count, true, 0.1, 1e-5,
                                                            true, "eager");
      // ATen's CPU batch_norm for bfloat16 is itself farther than 1e-2 from the exact
      // normalization of its input (tests/python/test_numerics.py has the measurement): there
      // the chain keeps every rounding up to batch_norm's input and normalizes in float32.
      const bool cpu_bfloat16 = device.is_cpu() && dtype == at::kBFloat16;
      at::Tensor expected;
      if (cpu_bfloat16) {
        at::Tensor mean32 = ref_mean.to(at::kFloat), var32 = ref_var.to(at::kFloat);
        const at::Tensor z = at::linear(l.x, l.w, l.b) * scale;
        expected = at::batch_norm(z.to(at::kFloat), gamma.to(at::kFloat), beta.to(at::kFloat),
                                  mean32, var32, true, 0.1, 1e-5, /*cudnn_enabled=*/false)
                       .to(dtype);
        ref_mean.copy_(mean32);
        ref_var.copy_(var32);
      } else {
        expected = reference39(l.x, l.w, l.b, scale, gamma, beta, ref_mean, ref_var, ref_count,
                               true, 0.1, 1e-5);
      }
      EXPECT_TRUE(AllClose(out, expected, tol));
      EXPECT_TRUE(AllClose(mean, ref_mean, tol));
      EXPECT_TRUE(AllClose(var, ref_var, tol));
    }
  }
}

TEST(Numerics, DefaultIsAccurate) {
  at::manual_seed(22);
  const Linear l = random_linear(16, 64, 48, at::kBFloat16, c10::kCPU);
  EXPECT_TRUE(at::equal(fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(l.x, l.w, l.b),
                        fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(l.x, l.w, l.b, true,
                                                                             "accurate")));
}

TEST(Numerics, BadValueNamesTheArgumentAndTheChoices) {
  const Linear l = random_linear(4, 8, 6, at::kFloat, c10::kCPU);
  try {
    fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(l.x, l.w, l.b, true, "fast");
    FAIL() << "numerics=\"fast\" was accepted";
  } catch (const c10::ValueError& e) {
    EXPECT_NE(std::string(e.what_without_backtrace())
                  .find("matmul_sum_max_avgpool_logsumexp_logsumexp: numerics must be "
                        "\"accurate\" or \"eager\", got \"fast\""),
              std::string::npos)
        << e.what_without_backtrace();
  }
}

}  // namespace
}  // namespace fusedops::testing
