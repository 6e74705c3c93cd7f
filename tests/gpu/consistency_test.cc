// GPU kernels against their CPU counterparts (tests/gpu/consistency.h): every kernel that
// exists on both, forward and gradient ops, on random inputs of several shapes and dtypes.
// Skipped (CTest SKIPPED) on a machine without a GPU.
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "kernels/cuda/gpu_device.h"
#include "tests/gpu/consistency.h"
#include "tests/skip.h"

namespace troupe::testing {

const skip_when no_gpu([]() -> std::optional<std::string> {
  if (kernels::gpu::device_count() == 0) return kernels::gpu::no_gpu_reason();
  return std::nullopt;
});

// One function per tests/gpu/*_cases.cc file.
void matmul_cases();
void batch_matmul_cases();
void cudnn_cases();
void cwise_cases();
void reduction_cases();
void training_cases();

TEST_CASE("GPU MatMul and BatchMatMul agree with the CPU", "[gpu][matmul]") {
  matmul_cases();
  batch_matmul_cases();
}
TEST_CASE("GPU convolutions, pooling, LRN and batch norm agree with the CPU", "[gpu][cudnn]") { cudnn_cases(); }
TEST_CASE("GPU element-wise kernels agree with the CPU", "[gpu][cwise]") { cwise_cases(); }
TEST_CASE("GPU reductions, softmax, cross-entropies, gathers agree with the CPU", "[gpu][reduction]") {
  reduction_cases();
}
TEST_CASE("GPU training updates (ResourceApply*, AssignAdd/Sub) agree with the CPU", "[gpu][training]") {
  training_cases();
}

}  // namespace troupe::testing
