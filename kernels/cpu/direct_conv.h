// float32 Conv2D and Conv2DBackpropFilter computed directly on NHWC images and HWIO
// filters with AVX-512: no patch matrix, no transposes, no reorders.
//
// Filter row r = (kh, kw, ci) of the HWIO filter is the r-th row of a [KH*KW*C, OC]
// matrix. For an output pixel (n, oh, ow) it meets the input value
//   x[n, oh*stride_h - pad_top + kh*dilation_h, ow*stride_w - pad_left + kw*dilation_w, ci]
// (zero in the padding), which for a fixed (n, oh) and row sits at a fixed offset plus
// ow * stride_w * C in the NHWC image. So both passes are register-blocked outer
// products over a strided input row:
//
//   forward           a tile of up to 14 output pixels of one image row times up to 64
//                     output channels is held in vector registers while the filter rows
//                     stream past: each step loads one filter row's slice of channels and
//                     broadcasts the tile's input values for that row;
//   filter gradient   a tile of up to 14 filter rows times up to 64 output channels is
//                     held in registers while the output pixels of a group of image rows
//                     (about 512 KiB of out_backprop and input, kept in the L2 cache while
//                     every tile passes over them) stream past: each step loads one
//                     pixel's out_backprop channels and broadcasts the tile's input values
//                     for that pixel.
//
// With few input channels and a wide stride (AlexNet's first layer: 3 channels, stride 4)
// this skips the NHWC <-> NCHW transposes and reorders oneDNN needs there, and runs at
// 85-90% of the FMA peak (on this project's AVX-512 Xeon: forward 17.6 ms against oneDNN's
// 18.3, filter gradient 18.9 against 19.9 on NCHW, where oneDNN needs no transpose). With
// many channels oneDNN's blocked kernels win by 1.3-3x. Which one runs is measured per
// geometry by the caller (conv_kernels.cc), against oneDNN and im2col + gemm.
//
// Results are deterministic: each output sums its products in a fixed order whatever the
// thread count (forward: over kh, kw, ci; filter gradient: over n, oh, ow).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/spatial.h"

namespace troupe::kernels::direct_conv {

// True when the processor runs AVX-512F (checked once). The kernels below must not be
// called otherwise.
bool available();

// output [N, OH, OW, OC] = conv(input [N, H, W, C], filter [KH, KW, C, OC]), overwritten.
// REQUIRES: available(); every size of g positive; out_c >= 1.
void forward(const window_geometry& g, std::int64_t out_c, const float* input, const float* filter, float* output,
             compute_pool& pool);

// filter_grad [KH, KW, C, OC] = the gradient of the forward pass's filter, for input
// [N, H, W, C] and out_backprop [N, OH, OW, OC]; overwritten.
// REQUIRES: as forward.
void backprop_filter(const window_geometry& g, std::int64_t out_c, const float* input, const float* out_backprop,
                     float* filter_grad, compute_pool& pool);

}  // namespace troupe::kernels::direct_conv
