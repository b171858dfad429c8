// The GEMM body shared by matmul.cu and bmm.cu: out[z] (M, N) = a[z] (M, K) @ b[z] (K, N), with z the
// grid's third dimension (always 0 for matmul). Block (bx, by) accumulates its TM x TN output tile in
// fp32 over K in TK chunks with the tensor-core mma; K tails load as zeros, which add nothing. fp32
// inputs go to mma as fp32 (the compiler may use tf32; the spec allows tf32 tolerance for fp32).
#pragma once
#include "common.cuh"

template <typename T, int TM, int TN, int TK>
__tile__ void gemm_tile(T* a, T* b, T* out, int M, int N, int K) {
  long long z = ct::bid().z;
  ct::partition_view pa{ct::tensor_span{a + z * M * K, ct::extents{M, K}}, ct::shape<TM, TK>{}};
  ct::partition_view pb{ct::tensor_span{b + z * K * N, ct::extents{K, N}}, ct::shape<TK, TN>{}};
  ct::partition_view po{ct::tensor_span{out + z * M * N, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  unsigned bx = ct::bid().x, by = ct::bid().y;
  using Acc = tr::ftile<TM, TN>;
  Acc acc = ct::zeros<Acc>();
  int nk = tr::ceil_div(K, TK);
  for (int k = 0; k < nk; ++k) {
    acc = ct::mma(pa.load_masked(bx, k), pb.load_masked(k, by), acc);
  }
  po.store_masked(ct::element_cast<T>(acc), bx, by);
}

#define TR_GEMM_ENTRY(op, dt, CT, TM, TN, TK)                                                      \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN##_##TK(CT* a, CT* b, CT* out, int M,     \
                                                                 int N, int K) {                   \
    gemm_tile<CT, TM, TN, TK>(a, b, out, M, N, K);                                                 \
  }
