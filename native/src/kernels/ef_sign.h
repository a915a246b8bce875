// Compression.ef_sign's passes over a gradient, on host float32 memory: the
// quantization into int8 with error feedback before the allreduce, and the
// decoding (plus the residual's correction) after it. In Python they were
// ten framework calls, several allocating, per gradient: the compression cost
// more than the bytes it saved on a 10 Gbit/s link (benchmarks/network.py).
#pragma once

#include <cstdint>

namespace fuseopt {
namespace kernels {

// residual = c = residual + gradient; step = max|c| / levels (NaN when c
// holds a non-finite value); values = kept = q = clamp(round(c / step),
// -levels, levels), rounding ties to even (0 everywhere when step is 0 or
// not finite); residual = c - q * step. Returns step.
float ef_sign_encode(const float* gradient, float* residual, int8_t* values, int8_t* kept,
                     int64_t count, int levels, int threads);

// After values and steps were summed over `ranks` ranks: mean = step_sum /
// ranks; residual -= kept * (mean - step), so that it holds what the others
// missed of this rank's c (they decode its q with the mean step); out =
// sum * (mean / ranks). out may be any float buffer apart from the others.
void ef_sign_decode(const int8_t* sum, const int8_t* kept, float* residual, float* out,
                    int64_t count, float step_sum, float step, int ranks, int threads);

}  // namespace kernels
}  // namespace fuseopt
