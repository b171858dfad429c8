// matmul: out (M, N) = a (M, K) @ b (K, N). The body is gemm_tile (gemm.cuh), launched with grid z = 1.
#include "gemm.cuh"
TR_MATMUL_KERNELS(TR_GEMM_ENTRY)
