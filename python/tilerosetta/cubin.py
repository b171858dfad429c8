"""Reading a cubin with cuobjdump: per kernel function its registers, spills, shared memory, threads per
block, an occupancy estimate and the SASS instruction mix. Used by `tilerosetta inspect`.

cuobjdump comes from `toolchain.binary_tool` (the pinned trio's folder, else the copy in Triton's wheel).
Nothing here needs a GPU.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tilerosetta import toolchain

# Per-SM limits used for the occupancy estimate (CUDA C Programming Guide, compute capabilities table):
# registers, shared memory usable by blocks, resident warps, resident blocks. 1 KB of shared memory is
# reserved per block by the driver on sm_80 and later.
SM_LIMITS = {
    "sm_80": {"regs": 65536, "smem": 167936, "warps": 64, "blocks": 32},
    "sm_90": {"regs": 65536, "smem": 233472, "warps": 64, "blocks": 32},
    "sm_100": {"regs": 65536, "smem": 233472, "warps": 64, "blocks": 32},
    "sm_120": {"regs": 65536, "smem": 101376, "warps": 48, "blocks": 32},
}
SMEM_RESERVED_PER_BLOCK = 1024
REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256


@dataclass
class Kernel:
    name: str
    regs: int = 0
    stack: int = 0
    local: int = 0  # bytes of local memory per thread: spills (and local arrays)
    shared: int = 0  # static shared memory per block, bytes
    threads: int | None = None  # EIATTR_REQNTID (cuTile, CUDA Tile C++) or the launcher's num_warps * 32
    max_regs: int | None = None  # EIATTR_MAXREG_COUNT, when the compiler recorded a cap
    mix: Counter = field(default_factory=Counter)  # full opcode (with modifiers) -> count

    @property
    def spill_stores(self) -> int:
        return sum(n for op, n in self.mix.items() if op.startswith("STL"))

    @property
    def spill_loads(self) -> int:
        return sum(n for op, n in self.mix.items() if op.startswith("LDL"))

    def occupancy(self, arch: str) -> tuple[int, str] | None:
        """(resident blocks per SM, the limiting resource), or None without a thread count."""
        lim = SM_LIMITS.get(arch)
        if lim is None or not self.threads:
            return None
        warps = -(-self.threads // 32)
        per_warp = -(-max(self.regs, 1) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        limits = {"registers": lim["regs"] // (per_warp * warps), "warps": lim["warps"] // warps,
                  "shared memory": lim["smem"] // (self.shared + SMEM_RESERVED_PER_BLOCK),
                  "blocks": lim["blocks"]}
        by = min(limits, key=limits.get)
        return limits[by], by


def cuobjdump() -> Path:
    exe = toolchain.binary_tool("cuobjdump")
    if exe is None:
        raise RuntimeError("cuobjdump not found: not beside tileiras (.toolchain/nvidia/cu13/bin), not in the "
                           "triton wheel (triton/backends/nvidia/bin), not on PATH: run `make setup`")
    return exe


def _run(*args: str, cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([str(cuobjdump()), *args, f.name], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"cuobjdump {' '.join(args)} failed: {res.stderr.strip()[:500]}")
    return res.stdout


_RESOURCE = re.compile(r"^\s*Function (\S+):\s*$")
_FIELD = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")
_SASS_FUNC = re.compile(r"^\s*Function : (\S+)\s*$")
_SASS_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def parse_resources(text: str) -> dict[str, Kernel]:
    kernels, current = {}, None
    for line in text.splitlines():
        if m := _RESOURCE.match(line):
            current = kernels.setdefault(m.group(1), Kernel(m.group(1)))
        elif current is not None and (fields := dict(_FIELD.findall(line))):
            current.regs = int(fields.get("REG", 0))
            current.stack = int(fields.get("STACK", 0))
            current.shared = int(fields.get("SHARED", 0))
            current.local = int(fields.get("LOCAL", 0))
            current = None
    return kernels


def parse_elf_attrs(text: str) -> dict[str, dict[str, list[int]]]:
    """Function -> {EIATTR name: values} from the `.nv.info.<function>` sections of `cuobjdump -elf`."""
    out, current, attr = {}, None, None
    for line in text.splitlines():
        if line.startswith(".nv.info."):
            current, attr = out.setdefault(line[len(".nv.info."):].strip(), {}), None
        elif line.startswith("."):
            current, attr = None, None
        elif current is not None and "Attribute:" in line:
            attr = line.split("Attribute:")[1].strip()
        elif current is not None and attr and "Value:" in line:
            current[attr] = [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", line.split("Value:")[1])]
            attr = None
    return out


def parse_sass(text: str) -> dict[str, Counter]:
    mix, current = {}, None
    for line in text.splitlines():
        if m := _SASS_FUNC.match(line):
            current = mix.setdefault(m.group(1), Counter())
        elif current is not None and (m := _SASS_INSTR.match(line)):
            current[m.group(1)] += 1
    return mix


def analyse(cubin: bytes) -> list[Kernel]:
    """Every kernel function of the cubin with its resources and instruction mix."""
    if cubin[:4] != b"\x7fELF":
        raise ValueError(f"not a cubin (an ELF file): starts {cubin[:8]!r}")
    kernels = parse_resources(_run("--dump-resource-usage", cubin=cubin))
    attrs = parse_elf_attrs(_run("-elf", cubin=cubin))
    for name, counts in parse_sass(_run("-sass", cubin=cubin)).items():
        kernels.setdefault(name, Kernel(name)).mix = counts
    for name, k in kernels.items():
        a = attrs.get(name, {})
        if "EIATTR_REQNTID" in a:
            x, y, z = (a["EIATTR_REQNTID"] + [1, 1, 1])[:3]
            k.threads = x * y * z
        if a.get("EIATTR_MAXREG_COUNT"):
            k.max_regs = a["EIATTR_MAXREG_COUNT"][0]
    return list(kernels.values())
