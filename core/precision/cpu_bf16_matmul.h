#pragma once
// bf16 matrix products on CPUs without bf16 GEMM support.
//
// LibTorch multiplies bf16 matrices on the CPU through oneDNN only where the CPU has AVX-512
// (BW, VL and DQ, the check ATen makes before it takes that path) or ARM's bf16. Elsewhere (an
// AVX2-only x86 CPU, many cloud EPYC and older Xeon machines) it falls back to a scalar loop
// that is about 20x slower than the fp32 product of the same shape: a bf16 run is then far
// slower than fp32, the opposite of what the config asked for.
//
// On such CPUs, loading zt_core replaces the CPU kernels of aten::mm, addmm, bmm and baddbmm
// (and their out and in-place forms) for bf16 operands with: widen to contiguous fp32, multiply
// with LibTorch's fp32 GEMM, round to bf16 once (a product rounds the same whatever its operands'
// strides). That is what a bf16 GEMM computes (products summed
// in fp32, one rounding of the result); only the order of the fp32 sums differs, as it differs
// between LibTorch's own bf16 kernels. Every other dtype, and every CPU with native support,
// keeps LibTorch's kernel. ZT_CPU_BF16_MATMUL=torch keeps LibTorch's kernels everywhere.
namespace zt {

// True when this process multiplies CPU bf16 matrices through fp32 (see above).
bool cpu_bf16_matmul_through_fp32();

// True when this CPU has what LibTorch's bf16 GEMM needs (AVX-512 BW/VL/DQ, or ARM bf16).
bool cpu_has_native_bf16_matmul();

}  // namespace zt
