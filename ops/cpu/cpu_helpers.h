// Helpers shared by the CPU kernels in this folder.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "common/numerics.h"

namespace fusedops::cpu {

// ATen's own at::internal::GRAIN_SIZE: below about this many elements a task costs more to
// hand to another thread than to run.
constexpr int64_t kElementsPerTask = 32768;

// The at::parallel_for grain for a loop whose every index touches `elements_per_index`
// elements.
inline int64_t grain_for(int64_t elements_per_index) {
  return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, elements_per_index));
}

// The Linear output x W^T + b in the accumulation dtype acc, a fresh contiguous (batch, out)
// buffer the caller may write over: with `eager` as the reference writes it (common/numerics.h),
// else computed in acc.
inline at::Tensor linear_in(at::ScalarType acc, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, bool eager) {
  at::Tensor y = eager ? linear_as_the_reference_writes_it(x, weight, bias).to(acc)
                       : at::addmm(bias.to(acc), x.to(acc), weight.to(acc).t());
  return y.is_contiguous() ? y : y.contiguous();
}

// The weight folds of models 98 and 18 reassociate sums, which is exact for finite values but
// not for inf and NaN (inf * w_a + inf * w_b with mixed signs is NaN unfolded, +-inf folded).
// So their kernels finish each row from the fold where its result is finite, and recompute the
// other rows unfolded, the reference's way: rows_not_finished, then linear_of_rows.

// Runs finish_row(i) for every i in [0, count) (in parallel, `grain` indices a task) and
// returns, in order, the rows for which it returned false.
template <typename F>
std::vector<int64_t> rows_not_finished(int64_t count, int64_t grain, const F& finish_row) {
  std::vector<char> unfinished(count, 0);
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) unfinished[i] = !finish_row(i);
  });
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < count; ++i) {
    if (unfinished[i]) rows.push_back(i);
  }
  return rows;
}

// The unfolded Linear, x[rows] W^T + b, in x_acc's (the accumulation) dtype: (rows, out).
// Plain loops, not a BLAS call: a BLAS kernel's handling of inf/NaN depends on its blocking
// (seen to differ between machines for the same call), plain IEEE arithmetic does not.
inline at::Tensor linear_of_rows(const at::Tensor& x_acc, const at::Tensor& weight,
                                 const at::Tensor& bias, const std::vector<int64_t>& rows) {
  const at::ScalarType acc = x_acc.scalar_type();
  const at::Tensor w = weight.to(acc).contiguous();
  const at::Tensor b = bias.to(acc).contiguous();
  const int64_t count = static_cast<int64_t>(rows.size());
  const int64_t out_features = w.size(0), in_features = w.size(1);
  at::Tensor y = at::empty({count, out_features}, x_acc.options());
  AT_DISPATCH_FLOATING_TYPES(acc, "linear_of_rows", [&] {
    const scalar_t* xp = x_acc.const_data_ptr<scalar_t>();
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    const scalar_t* bp = b.const_data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, count * out_features, grain_for(in_features), [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        const int64_t q = e / out_features, j = e % out_features;
        const scalar_t* xr = xp + rows[q] * in_features;
        const scalar_t* wr = wp + j * in_features;
        double dot = 0.0;
        for (int64_t c = 0; c < in_features; ++c) {
          dot += static_cast<double>(xr[c]) * static_cast<double>(wr[c]);
        }
        yp[e] = static_cast<scalar_t>(dot + static_cast<double>(bp[j]));
      }
    });
  });
  return y;
}

}  // namespace fusedops::cpu
