// Which library float32 products run on, shared by the kernels that multiply raw matrices.
// MatMul measures OpenBLAS, Eigen and oneDNN's sgemm once per process
// (kernels/cpu/matmul_kernels.cc, TROUPE_GEMM overrides); the im2col convolutions follow
// its answer where they can (oneDNN or OpenBLAS: they have no Eigen path).
//
// Thread safety: may be called from any thread.
#pragma once

namespace troupe::kernels {

// True when MatMul's measurement (made on the first call, ~15 ms) chose oneDNN's sgemm
// for float32.
bool float_gemm_on_onednn();

}  // namespace troupe::kernels
