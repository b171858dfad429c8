// CUDA Tile C++: the K loop of a GEMM is software-pipelined only when written as ct::irange, and the
// TMA producer waits for each of its own loads unless the pointers are __restrict__.
// out (M, N) = a (M, K) @ b (K, N), bf16 in, fp32 accumulate, one 128x256 tile per block, 8 worker warps.
// Build one variant (IRANGE, RESTRICT each 0 or 1) for sm_90 on any machine, no GPU needed:
//   nvcc -tilecubin --tile-only -std=c++20 -arch=sm_90 -DIRANGE=1 -DRESTRICT=1 gemm_kloop.cu -o k.cubin
//   nvcc -tilebc    --tile-only -std=c++20 -arch=sm_90 -DIRANGE=0 -DRESTRICT=0 gemm_kloop.cu -o k.tilebc
//   tileirdisasm k.tilebc            # `loop iter_values(...)` (while form) vs `for %i in (0 to %n, step 1)`
//   cuobjdump -sass k.cubin          # HGMMA count, WARPGROUP.DEPBAR.LE gsb0 depth, LDS/STS, SYNCS.CCTL.IV
#include <cuda_tile.h>
#include <cuda_bf16.h>

namespace ct = cuda::tiles;

#if RESTRICT
#define PTR __nv_bfloat16* __restrict__
#else
#define PTR __nv_bfloat16*
#endif

constexpr int TM = 128, TN = 256, TK = 64;

extern "C" [[cutile::hint(0, num_worker_warps_per_cta = 8)]] __tile_global__ void gemm(PTR a, PTR b, PTR out,
                                                                                        int M, int N, int K) {
  // The caller guarantees 16-byte aligned bases and rows of a multiple of 8 elements (TMA-eligible).
  a = ct::assume_aligned<16>(a), b = ct::assume_aligned<16>(b), out = ct::assume_aligned<16>(out);
  K = ct::assume_divisible<8>(K), N = ct::assume_divisible<8>(N);
  ct::partition_view pa{ct::tensor_span{a, ct::extents{M, K}}, ct::shape<TM, TK>{}};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{K, N}}, ct::shape<TK, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  int tiles_n = (N + TN - 1) / TN;
  int pm = ct::bid().x / tiles_n, pn = ct::bid().x % tiles_n;
  auto acc = ct::zeros<ct::tile<float, ct::shape<TM, TN>>>();
  int nk = (K + TK - 1) / TK;
#if IRANGE
  for (int k : ct::irange(0, nk)) {
#else
  for (int k = 0; k < nk; ++k) {
#endif
    acc = ct::mma(pa.load_masked(pm, k), pb.load_masked(k, pn), acc);
  }
  po.store_masked(ct::element_cast<__nv_bfloat16>(acc), pm, pn);
}
