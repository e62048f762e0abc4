// Loads every model of an exported repository with libtorch alone (no Python in this process)
// and checks it against the reference model's saved output; and checks that misuse becomes a
// message. The repository comes from $FUSEDOPS_MODEL_REPOSITORY: ctest exports one at the
// small sizes before these tests run (app/tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "app_error.h"
#include "exported_model.h"
#include "fusedops/fusedops.h"
#include "model_repository.h"
#include "tensor_io.h"

namespace fs = std::filesystem;
using namespace fusedops_app;

namespace {

const char* const kProblems[] = {"98", "18", "39", "62"};

fs::path model_repository() {
  const char* path = std::getenv("FUSEDOPS_MODEL_REPOSITORY");
  if (path == nullptr || *path == '\0') {
    ADD_FAILURE() << "FUSEDOPS_MODEL_REPOSITORY is not set: run through ctest, or export a "
                     "repository (python -m scripted.export --sizes small --output DIR) and "
                     "point it there";
    return {};
  }
  return path;
}

RepositoryModel find_problem(const std::string& problem) {
  const std::string prefix = "fusedops_" + problem + "_";
  for (const RepositoryModel& model : find_repository_models(model_repository())) {
    if (model.name.rfind(prefix, 0) == 0) {
      return model;
    }
  }
  throw std::runtime_error("no " + prefix + "* model in " + model_repository().string());
}

// Expects statement to throw UsageError whose message contains every one of needles.
template <typename Statement>
void expect_usage_error(Statement statement, std::initializer_list<std::string> needles) {
  try {
    statement();
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message: " << e.what() << "\nshould contain: " << needle;
    }
  }
}

class ExportedModelTest : public ::testing::TestWithParam<const char*> {};

}  // namespace

TEST(ModelRepository, HoldsTheFourModels) {
  const auto models = find_repository_models(model_repository());
  ASSERT_EQ(models.size(), 4u);
  for (const RepositoryModel& model : models) {
    EXPECT_TRUE(fs::is_regular_file(model.model_file)) << model.model_file;
    EXPECT_TRUE(fs::is_regular_file(model.model_file.parent_path().parent_path() /
                                    "config.pbtxt"))
        << model.name;
  }
}

TEST_P(ExportedModelTest, MatchesTheReferenceOutputOnCpu) {
  const RepositoryModel model = find_problem(GetParam());
  const ReferenceCheck check = check_against_reference(model, c10::Device(c10::kCPU));
  EXPECT_TRUE(check.comparison.passed()) << model.name << ": "
                                         << check.comparison.describe(check.tolerance);
}

TEST_P(ExportedModelTest, MatchesTheReferenceOutputOnCuda) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const RepositoryModel model = find_problem(GetParam());
  const ReferenceCheck check = check_against_reference(model, c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(check.comparison.passed()) << model.name << ": "
                                         << check.comparison.describe(check.tolerance);
}

TEST_P(ExportedModelTest, MetadataDescribesTheModel) {
  const RepositoryModel model = find_problem(GetParam());
  const ExportedModel exported = ExportedModel::load(model.model_file, c10::Device(c10::kCPU));
  ASSERT_TRUE(exported.metadata().has_value());
  const ModelMetadata& metadata = *exported.metadata();
  EXPECT_EQ(metadata.problem, GetParam());
  EXPECT_EQ(metadata.model_name, model.name);
  EXPECT_EQ(metadata.fusedops_version, fusedops::version());
  EXPECT_EQ(metadata.mode, "eval");
  EXPECT_EQ(metadata.input.shape.size(), 2u);
  EXPECT_EQ(metadata.input.dtype, at::kFloat);

  const at::Tensor input = load_tensor_file(model.sample_input);
  EXPECT_EQ(input.sizes().vec(), metadata.input.shape);
  const at::Tensor reference = load_tensor_file(model.reference_output);
  EXPECT_EQ(reference.sizes().vec(), metadata.output.shape);
}

TEST_P(ExportedModelTest, RejectsAnInputOfAnotherWidthOrDtype) {
  const RepositoryModel model = find_problem(GetParam());
  ExportedModel exported = ExportedModel::load(model.model_file, c10::Device(c10::kCPU));
  const int64_t width = exported.metadata()->input.shape[1];
  const std::string expected = "expected [B, " + std::to_string(width) + "] float32";

  expect_usage_error([&] { exported.forward(at::rand({4, width + 1})); },
                     {expected, "got [4, " + std::to_string(width + 1) + "] float32"});
  expect_usage_error([&] { exported.forward(at::rand({4, width}, at::kDouble)); },
                     {expected, "float64"});
  expect_usage_error([&] { exported.forward(at::rand({width})); }, {expected, "got ["});
  // Any batch is fine.
  EXPECT_EQ(exported.forward(at::rand({3, width})).size(0), 3);
}

INSTANTIATE_TEST_SUITE_P(FourProblems, ExportedModelTest, ::testing::ValuesIn(kProblems),
                         [](const auto& info) { return std::string("problem_") + info.param; });

TEST(ExportedModelErrors, MissingFileIsAMessage) {
  expect_usage_error(
      [] { ExportedModel::load("/nonexistent/model.pt", c10::Device(c10::kCPU)); },
      {"model file not found: /nonexistent/model.pt"});
}

TEST(ExportedModelErrors, CorruptFileIsAMessage) {
  const fs::path corrupt = fs::temp_directory_path() / "fusedops_test_corrupt_model.pt";
  std::ofstream(corrupt) << "this is not a TorchScript archive";
  expect_usage_error([&] { ExportedModel::load(corrupt, c10::Device(c10::kCPU)); },
                     {"cannot load " + corrupt.string() + " as a TorchScript model"});
  fs::remove(corrupt);
}

TEST(ExportedModelErrors, EveryFusedopsOperatorIsRegistered) {
  // The schemas come from libfusedops' static initializers (TORCH_LIBRARY), not from any
  // symbol a host calls: the library being loaded is what makes them exist.
  const auto operators = registered_fusedops_operators();
  for (const char* op : {"fusedops::matmul_avgpool_gelu_scale_max",
                         "fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp",
                         "fusedops::gemm_scale_batchnorm",
                         "fusedops::matmul_groupnorm_leakyrelu_sum"}) {
    EXPECT_NE(std::find(operators.begin(), operators.end(), op), operators.end()) << op;
  }
}
