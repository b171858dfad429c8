#!/usr/bin/env python3
"""The numbers the upstream reports quote, read from a cubin with cuobjdump (no GPU needed).

    python3 repro/sass_stats.py KERNEL.cubin [KERNEL2.cubin ...]

Per kernel function, one line: threads (EIATTR_REQNTID), the register cap (EIATTR_MAXREG_COUNT), registers,
local memory (spills), stack, shared memory, the count of each opcode family the reports discuss, and two load-order facts:
  ldg_batch  the most global loads (LDG) issued before an instruction reads one of their destination
             registers: 1 means every load is consumed before the next one issues (one load in flight
             per thread); a bounds-free elementwise kernel issues all its loads first.
  ldg_in_bssy the LDGs that sit inside a BSSY ... BSYNC region (a divergent branch region).
  wgmma_wait the depths of WARPGROUP.DEPBAR.LE gsb0 (0: wait for every wgmma; 1: one group left in flight,
             so the instructions after it overlap the newest wgmma: FA3's intra-warpgroup overlap).
  setmaxnreg the register counts warpgroups release / take (USETMAXREG: producer / consumer split).
  multicast  the TMA loads that fill every CTA of a cluster at once (.MULTICAST: clusters sharing A or B tiles).
  bar_ids    the named barriers (BAR.SYNC / BAR.ARV id other than 0); an id in a register (R..) is chosen
             per warpgroup: how warpgroups take turns (FA3's ping-pong of the consumer warpgroups).
  instr      static SASS instructions of the function.
cuobjdump: $CUOBJDUMP, else the copy beside tileiras or in Triton's wheel (tilerosetta.toolchain), else PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter

FAMILIES = ("LDG", "STG", "LDGSTS", "UTMALDG", "UTMASTG", "LDS", "STS", "HGMMA", "BAR.SYNC", "BSSY",
            "MUFU.EX2", "SYNCS.CCTL.IV", "SYNCS.PHASECHK", "WARPGROUP.DEPBAR", "STL", "LDL")
_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_REG = re.compile(r"\bR(\d+)\b")


def cuobjdump() -> str:
    if exe := os.environ.get("CUOBJDUMP"):
        return exe
    try:
        from tilerosetta import toolchain
        if (found := toolchain.binary_tool("cuobjdump")) is not None:
            return str(found)
    except ImportError:
        pass
    if found := shutil.which("cuobjdump"):
        return found
    raise SystemExit("cuobjdump not found: set CUOBJDUMP, or install the CUDA toolkit / triton")


def activate_tileiras() -> None:
    """Put the pinned tileiras first on PATH (tilerosetta.toolchain), when this checkout has it; else the
    caller's PATH must hold a tileiras of CUDA 13.3+ with its own ptxas (and CUDA_HOME unset)."""
    try:
        from tilerosetta import toolchain
    except ImportError:
        return
    toolchain.activate()


def _dump(flag: str, path: str) -> str:
    return subprocess.run([cuobjdump(), flag, path], capture_output=True, text=True, check=True).stdout


def _dest_regs(op: str, operands: str) -> set[int]:
    """Registers an LDG writes: its first operand, widened by the access size (.64: 2, .128: 4)."""
    m = _REG.search(operands.split(",")[0])
    if not m:
        return set()
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    return set(range(int(m.group(1)), int(m.group(1)) + width))


def sass_facts(sass: str) -> dict[str, dict]:
    out, cur = {}, None
    for line in sass.splitlines():
        if m := _FUNC.match(line):
            cur = out.setdefault(m.group(1), {"mix": Counter(), "ldg_batch": 0, "ldg_in_bssy": 0,
                                              "_pending": set(), "_batch": 0, "_bssy": 0,
                                              "wgmma_wait": set(), "setmaxnreg": set(), "bar_ids": set()})
            continue
        if cur is None or not (m := _INSTR.match(line)):
            continue
        op, operands = m.group(2), m.group(3)
        cur["mix"][op] += 1
        if op.startswith("WARPGROUP.DEPBAR") and (d := re.search(r"gsb0,\s*0x(\w+)", operands)):
            cur["wgmma_wait"].add(int(d.group(1), 16))  # how many wgmma groups it leaves in flight
        if op.startswith("USETMAXREG") and (r := re.search(r"0x(\w+)\s*$", operands)):
            cur["setmaxnreg"].add(int(r.group(1), 16))
        if op.startswith(("BAR.SYNC", "BAR.ARV")) and (b := re.match(r"\s*(R\d+|0x\w+)", operands)):
            if b.group(1) not in ("0x0", "0x00"):
                cur["bar_ids"].add(b.group(1) if b.group(1).startswith("R") else str(int(b.group(1), 16)))
        parts = operands.split(",")
        # a store reads every operand; anything else writes its first operand and reads the rest
        reads = parts if op.startswith(("ST", "RED", "BAR", "BRA", "BSSY", "BSYNC")) else parts[1:]
        srcs = set(int(r) for r in _REG.findall(",".join(reads)))
        if cur["_pending"] & srcs:  # a load's result is read: the batch of loads in flight ends here
            cur["ldg_batch"] = max(cur["ldg_batch"], cur["_batch"])
            cur["_pending"], cur["_batch"] = set(), 0
        if op.startswith("BSSY"):
            cur["_bssy"] += 1
        elif op.startswith("BSYNC"):
            cur["_bssy"] = max(0, cur["_bssy"] - 1)
        elif op.startswith("LDG") and not op.startswith("LDGSTS") and not op.startswith("LDGDEPBAR"):
            cur["_pending"] |= _dest_regs(op, operands)
            cur["_batch"] += 1
            cur["ldg_in_bssy"] += cur["_bssy"] > 0
    for f in out.values():
        f["ldg_batch"] = max(f["ldg_batch"], f.pop("_batch"))
        del f["_pending"], f["_bssy"]
    return out


def stats(path: str) -> dict[str, dict]:
    """Kernel name -> {threads, REG, LOCAL, SHARED, STACK, <family>: count, ldg_batch, ldg_in_bssy}."""
    res = {}
    for name, fields in re.findall(r"Function (\S+):\s*\n\s*(REG:.*)", _dump("--dump-resource-usage", path)):
        res[name] = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", fields)}
    elf = _dump("-elf", path)
    for section in re.split(r"\n(?=\.)", elf):  # one ELF section per chunk
        if not (m := re.match(r"\.nv\.info\.(\S+)", section)):
            continue
        for attr, key in (("EIATTR_REQNTID", "threads"), ("EIATTR_MAXREG_COUNT", "MAXREG")):
            if t := re.search(attr + r"[\s\S]*?Value:\s*(0x[0-9a-f]+)", section):
                res.setdefault(m.group(1), {})[key] = int(t.group(1), 16)
    for name, f in sass_facts(_dump("-sass", path)).items():
        row = res.setdefault(name, {})
        for fam in FAMILIES:
            row[fam] = sum(n for op, n in f["mix"].items() if op == fam or op.startswith(fam + "."))
        row["ldg_batch"], row["ldg_in_bssy"] = f["ldg_batch"], f["ldg_in_bssy"]
        row["instr"] = sum(f["mix"].values())
        row["multicast"] = sum(n for op, n in f["mix"].items() if ".MULTICAST" in op)  # TMA loads to a cluster
        for key in ("wgmma_wait", "setmaxnreg"):
            if f[key]:
                row[key] = "/".join(map(str, sorted(f[key])))
        if f["bar_ids"]:  # register ids (per warpgroup) as "R", numbered ones in order
            row["bar_ids"] = "/".join(sorted({"R" if i.startswith("R") else i for i in f["bar_ids"]}))
    return res


def line(name: str, row: dict) -> str:
    keys = ["threads", "MAXREG", "REG", "LOCAL", "STACK", "SHARED", "instr", *FAMILIES, "multicast", "wgmma_wait",
            "setmaxnreg", "bar_ids", "ldg_batch", "ldg_in_bssy"]
    return name + " " + " ".join(f"{k}={row[k]}" for k in keys if k in row and (row[k] or k in
                                                                                 ("REG", "LOCAL", "ldg_batch")))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        for name, row in stats(p).items():
            print(line(name, row))
