"""bmm: out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N), the matmul kernel with the batch folded into its one
program axis (so any Bt works)."""

from tilerosetta.kernels.triton.matmul import prepare_batched


def prepare(a, b, out, cfg):
    bt, m, k = a.shape
    return prepare_batched(a, b, out, bt, m, out.shape[2], k, cfg)
