// bmm: out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N). The body is gemm_tile (gemm.cuh); the batch index
// is the grid's z dimension and offsets each operand by its (M*K, K*N, M*N) batch stride.
#include "gemm.cuh"
TR_BMM_KERNELS(TR_GEMM_ENTRY)
