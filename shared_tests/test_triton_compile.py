"""Every Triton kernel variant the backend launches on the spec's sizes compiles for sm_90 (H200) to a
cubin and fits Hopper's shared memory — checked without a GPU (Triton ships ptxas).

The CPU interpreter runs the kernels' arithmetic but not the compiler, so this is the CI check of the
compiled path. It runs in a subprocess with TRITON_INTERPRET=0: this process may already have imported
the kernels in interpreter mode.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilerosetta.specs import OP_NAMES

PYTHON_DIR = Path(__file__).resolve().parents[1] / "python"


@pytest.fixture(scope="module")
def aot_report(request):
    from conftest import selected_backends

    if "triton" not in selected_backends(request.config):
        pytest.skip("triton not selected (--backend)")
    if importlib.util.find_spec("triton") is None:  # find, not import: importing first would break the interpreter
        pytest.skip("triton is not installed")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run([sys.executable, "-m", "tilerosetta.kernels.triton.aot_check", "--arch", "90"],
                          env=env, capture_output=True, text=True, timeout=1800)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"aot_check crashed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


@pytest.mark.parametrize("op", OP_NAMES)
def test_compiles_for_sm90(aot_report, op):
    compiled = [line for line in aot_report["ok"] if line.startswith(f"{op}/")]
    failed = [line for line in aot_report["fail"] if line.startswith(f"{op}/")]
    assert not failed, "\n".join(failed)
    assert compiled, f"no {op} kernel was compiled"
