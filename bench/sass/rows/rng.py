# count SASS ops of fn within [lo, hi) addresses (hex)
import sys, re, subprocess, collections
CUO=".venv/lib/python3.12/site-packages/triton/backends/nvidia/bin/cuobjdump"
cub, fn, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3],16), int(sys.argv[4],16)
sass = subprocess.run([CUO,"-sass","-fun",fn,cub],capture_output=True,text=True).stdout
c = collections.Counter()
for line in sass.splitlines():
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if m and lo <= int(m.group(1),16) < hi: c[m.group(3)] += 1
keys=[k for k in c if re.match(r"(LDG|STG|UTMA|LDS|STS|BSSY|BAR|SYNCS.ARRIVE|SYNCS.PHASECHK.TRANS64.TRYWAIT|MUFU|MEMBAR|NANOSLEEP|UBLKCP|SHFL)",k)]
print(f"{fn} [{lo:x},{hi:x}) n={sum(c.values())}:", ", ".join(f"{k}:{c[k]}" for k in sorted(keys)))
