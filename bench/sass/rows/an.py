# usage: an.py cubin funcname  -> one-line summary of resources and SASS instruction counts
import sys, subprocess, re, collections
CUO=".venv/lib/python3.12/site-packages/triton/backends/nvidia/bin/cuobjdump"
cub, fn = sys.argv[1], sys.argv[2]
res = subprocess.run([CUO,"--dump-resource-usage",cub],capture_output=True,text=True).stdout
m = re.search(r"Function %s:\n\s*(REG:.*)" % re.escape(fn), res)
resline = m.group(1) if m else "?"
elf = subprocess.run([CUO,"-elf",cub],capture_output=True,text=True).stdout
# find the .nv.info.<fn> section and the REQNTID / MAXNTID / occupancy attrs
lines = elf.splitlines()
sec = None
if ".nv.info."+fn in lines:
    i = lines.index(".nv.info."+fn) + 1; j = i
    while j < len(lines) and not re.match(r"^\.\w", lines[j]): j += 1
    class _S: pass
    sec = _S(); body_txt = "\n".join(lines[i:j]); sec.group = lambda k, t=body_txt: t
attrs = {}
if sec:
    body = sec.group(1)
    for a in ("EIATTR_REQNTID","EIATTR_MAXNTID","EIATTR_MAXREG_COUNT","EIATTR_NUM_BARRIERS","EIATTR_NUM_MBARRIERS"):
        mm = re.search(a + r"\n\s*Format:.*?\n\s*Value:\s*(.*?)\n", body)
        if mm: attrs[a]=" ".join(mm.group(1).split())
sass = subprocess.run([CUO,"-sass","-fun",fn,cub],capture_output=True,text=True).stdout
ops = collections.Counter()
for line in sass.splitlines():
    mm = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if mm: ops[mm.group(2)] += 1
keys = [k for k in ops if re.match(r"(LDG|STG|UTMA|UBLKCP|LDGSTS|LDS|STS|BSSY|BAR|SYNCS|UTMACCTL|LDSM|STSM|BRA|EXIT|RED|ATOM|SHFL|MUFU|WARPSYNC|LDC|CCTL|FENCE|MEMBAR|ULDC|DEPBAR|ARRIVES|LDGDEPBAR)", k)]
tot = sum(ops.values())
print(fn, "|", resline, "|", attrs, "| ninstr", tot)
print("   ", ", ".join(f"{k}:{ops[k]}" for k in sorted(keys)))
