"""bmm: out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N), the matmul kernel with the batch on program axis 1."""

from tilerosetta.errors import TileRosettaError
from tilerosetta.kernels.triton.matmul import launch_batched


def launch(a, b, out, cfg):
    bt, m, k = a.shape
    if bt > 65535:  # CUDA's limit on the second grid axis
        raise TileRosettaError("bmm", "triton", "a", f"batch Bt={bt} exceeds the 65535 programs of grid axis 1")
    launch_batched(a, b, out, bt, m, out.shape[2], k, cfg)
