# compressed instruction sequence: memory/sync/branch ops in order, runs of others collapsed to a count
import sys, re, subprocess
CUO=".venv/lib/python3.12/site-packages/triton/backends/nvidia/bin/cuobjdump"
cub, fn = sys.argv[1], sys.argv[2]
sass = subprocess.run([CUO,"-sass","-fun",fn,cub],capture_output=True,text=True).stdout
keep = re.compile(r"(LDG|STG|UTMA|LDGSTS|STS|LDS|BSSY|BSYNC|BAR|SYNCS|BRA|EXIT|MEMBAR|FENCE|DEPBAR|UBLKCP|LDSM|STSM|WARPSYNC|ELECT|USETMAXREG|REDUX|ATOMS)")
out=[]; n=0; mufu=0
for line in sass.splitlines():
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?)([A-Z0-9_.]+)([^;]*);", line)
    if not m: continue
    op = m.group(3)
    if keep.match(op):
        if n: out.append(f"[{n}{' ex2:'+str(mufu) if mufu else ''}]"); n=0; mufu=0
        args = m.group(4).strip()
        out.append(f"{m.group(1)} {m.group(2)}{op} {args[:60]}")
    else:
        n += 1; mufu += op.startswith("MUFU.EX2")
if n: out.append(f"[{n}]")
print("\n".join(out))
