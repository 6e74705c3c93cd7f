// float32 convolutions through oneDNN (Debian's libdnnl, the library PyTorch's CPU
// convolutions use), on NHWC images and HWIO filters as the Conv2D kernels hold them.
//
// One thread budget: every oneDNN call runs single-threaded (onednn.h) and the
// batch is split into one chunk per pool thread, each chunk a primitive of its own batch
// size. Weights are reordered once per call into the layout the primitive chose; a filter
// gradient is summed over the chunks.
//
// Primitives are built once per geometry and pass, kept in a process-wide cache, and
// executed concurrently (scratchpads are per call). A geometry oneDNN has no primitive
// for yields `unimplemented`, and the caller falls back to im2col + gemm.
//
// TROUPE_CONV=im2col in the environment turns this path off (read once), so that a
// benchmark can compare both paths in one build.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/spatial.h"

namespace troupe::kernels::onednn {

enum class conv_pass {
  forward,           // (input, filter) -> output
  backward_data,     // (filter, out_backprop) -> input gradient
  backward_weights,  // (input, out_backprop) -> filter gradient
};

// False when TROUPE_CONV=im2col asked for the fallback path.
bool conv_enabled();

// Runs one pass of the convolution `g` (NHWC input, `out_c` output channels) with the two
// operands of the pass's comment and writes its result, overwriting it:
//   forward            a = input [N,H,W,C],  b = filter [KH,KW,C,OC], out = output [N,OH,OW,OC]
//   backward_data      a = filter,           b = out_backprop,        out = input gradient
//   backward_weights   a = input,            b = out_backprop,        out = filter gradient
// Returns unimplemented when oneDNN has no primitive for `g` (nothing was written), an
// internal error if oneDNN failed while running.
// REQUIRES: g.batch >= 1, every size positive.
status convolve(conv_pass pass, const window_geometry& g, std::int64_t out_c, const float* a,
                const float* b, float* out, compute_pool& pool);

}  // namespace troupe::kernels::onednn
