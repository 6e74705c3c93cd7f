// float32 convolutions through oneDNN (Debian's libdnnl, the library PyTorch's CPU
// convolutions use), on NHWC or NCHW images and HWIO filters as the Conv2D kernels hold
// them.
//
// One thread budget: every oneDNN call runs single-threaded (onednn.h) and the
// batch is split into one chunk per pool thread, each chunk a primitive of its own batch
// size. Weights are reordered once per call into the layout the primitive chose; a filter
// gradient is summed over the chunks.
//
// Each pass of each geometry runs on the fastest of up to four primitives, timed on the
// first call (a few runs of each, on dummy data): direct convolution on NHWC, on NCHW, or
// on the layouts oneDNN prefers (blocked ones such as nChw16c), each chunk's images
// reordered in and out where the caller's layout differs; and Winograd's F(4x4, 3x3)
// where oneDNN has it (3x3 windows at stride 1 on AVX-512), whose rounding differs
// slightly from the direct sum. Which one wins depends on the geometry and the processor.
// The choice is made once per process, so results are reproducible within a process;
// TROUPE_CONV_VARIANT=nhwc, nchw, preferred or winograd fixes it for every geometry (for
// reproducibility across processes and machines, and so that tests cover each path).
//
// Primitives are built once per geometry and pass, kept in a process-wide cache, and
// executed concurrently (scratchpads are per call). A geometry oneDNN has no primitive
// for yields `unimplemented`, and the caller falls back to im2col + gemm.
//
// Whether a convolution runs here or on im2col + gemm is the caller's measured choice
// (kernels/cpu/conv_kernels.cc); TROUPE_CONV fixes it (conv_path_setting()).
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

// The path of float32 convolutions: TROUPE_CONV=onednn, im2col or direct in the
// environment (read once) fixes one, so that a benchmark can compare them in one build and
// tests cover each; unset (or "tuned"), each geometry measures them. direct
// (kernels/cpu/direct_conv.h) has no input gradient, which is measured as if unset; where
// the processor cannot run it (no AVX-512F, or TROUPE_HIDE_AVX512), forcing it makes
// the forward pass and the filter gradient fail with failed_precondition. An unknown
// value is invalid_argument, naming the accepted ones.
enum class conv_path { tuned, onednn, im2col, direct };
const result<conv_path>& conv_path_setting();

// Whether oneDNN has Winograd convolutions on this processor (AVX-512 ones only; false
// under TROUPE_HIDE_AVX512). TROUPE_CONV_VARIANT=winograd where it has none makes every
// oneDNN convolution fail with failed_precondition instead of silently running another
// variant.
bool has_winograd();

// How the images (input, output and their gradients) are laid out in memory.
enum class image_layout { nhwc, nchw };

// Runs one pass of the convolution `g` (`out_c` output channels, images in `layout`) with
// the two operands of the pass's comment and writes its result, overwriting it (shapes
// for NHWC; NCHW images are [N,C,H,W]):
//   forward            a = input [N,H,W,C],  b = filter [KH,KW,C,OC], out = output [N,OH,OW,OC]
//   backward_data      a = filter,           b = out_backprop,        out = input gradient
//   backward_weights   a = input,            b = out_backprop,        out = filter gradient
// Returns unimplemented when oneDNN has no primitive for `g` (nothing was written), an
// internal error if oneDNN failed while running.
// REQUIRES: g.batch >= 1, every size positive.
status convolve(conv_pass pass, const window_geometry& g, std::int64_t out_c,
                image_layout layout, const float* a, const float* b, float* out,
                compute_pool& pool);

}  // namespace troupe::kernels::onednn
