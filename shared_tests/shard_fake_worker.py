"""The real `tilerosetta bench` command with one extra CPU backend, "killer", for the --gpus tests.

killer is torch's reference on CPU, except that on the (op, dtype) named by SHARD_TEST_KILL ("softmax:fp16", headline
input only) it kills its own process with SIGKILL, as a kernel fault that takes the driver down would: no Python
exception, no record, only the "start" line of that case left in the worker's file. Not collected by
pytest (no test_ prefix); run as `python shard_fake_worker.py bench ARGS`.
"""

from __future__ import annotations

import os
import signal
import sys

from tilerosetta.backends import torch_ref
from tilerosetta.backends.base import Backend
from tilerosetta.specs import dtype_name


class KillerBackend(Backend):
    name = "killer"
    language = "fake"
    device_type = "cpu"

    def available(self):
        return True, "fake backend for the shard tests"

    def _maybe_die(self, op, fn):
        def call(*args, **kw):
            # only on the headline input (|x| < 20): softmax's x30 logits case beside it runs normally
            if (os.environ.get("SHARD_TEST_KILL") == f"{op}:{dtype_name(args[0].dtype)}"
                    and float(args[0].abs().max()) < 20):
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kw)
        return call

    def implementations(self):
        return {"vector_add": self._maybe_die("vector_add", torch_ref.vector_add),
                "softmax": self._maybe_die("softmax", torch_ref.softmax)}


if __name__ == "__main__":
    from tilerosetta import backends, cli

    import bench_fakes  # beside this file

    backends._CACHE["killer"] = KillerBackend()  # get("killer") finds it before looking at the registry
    backends._CACHE["tunable"] = bench_fakes.TunableBackend()  # a config space, for `sweep --gpus`
    sys.exit(cli.main(sys.argv[1:]))
