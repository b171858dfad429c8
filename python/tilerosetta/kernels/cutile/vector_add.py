"""vector_add: out = a + b over a 1-D array of any length.

One block per TILE-element chunk. The last chunk may run past N: the load pads (values unused) and
`ct.store` drops out-of-range elements, so no explicit mask is needed.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_elementwise


@ct.kernel
def vector_add_kernel(a, b, out, TILE: ct.Constant[int]):
    i = ct.bid(0)
    x = ct.load(a, (i,), (TILE,), padding_mode=ct.PaddingMode.ZERO)
    y = ct.load(b, (i,), (TILE,), padding_mode=ct.PaddingMode.ZERO)
    # Add in the storage dtype, as torch does for same-dtype tensors.
    ct.store(out, (i,), x + y)


def prepare(a, b, out, cfg):
    tile, grid = plan_elementwise(a.shape[0], cfg)
    return [Launch(vector_add_kernel, grid, (a, b, out, tile))]
