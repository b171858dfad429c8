import re, sys, collections
def parse(path):
    ins = []
    for line in open(path):
        m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
        if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
    return ins
def opc(t):
    t = re.sub(r'^@!?U?P[T0-9]+\s+', '', t)
    return t.split()[0] if t else ''
KEYS = ['HGMMA', 'UTMALDG', 'UTMASTG', 'UTMAPF', 'LDGSTS', 'LDG', 'STG', 'LDS', 'LDSM', 'STS', 'STSM', 'BSSY', 'BAR', 'SYNCS', 'USETMAXREG', 'WARPGROUP', 'MUFU', 'BRA', 'WARPSYNC', 'LDGDEPBAR', 'DEPBAR', 'FENCE', 'ELECT', 'UBLKCP']
def count(ins):
    c = collections.Counter()
    for a, t in ins:
        o = opc(t)
        c[o] += 1
    return c
def summary(ins, label):
    c = count(ins)
    by = collections.Counter()
    for k, v in c.items():
        base = k.split('.')[0]
        if base in KEYS or k.startswith('HGMMA'):
            by[k] += v
    return by
def loops(ins):
    out = []
    for a, t in ins:
        m = re.search(r'\bBRA\b.*?`?\(?\.L_x_(\d+)|BRA\s+(?:.*?)0x([0-9a-f]+)', t)
        if 'BRA' in opc(t):
            m = re.search(r'0x([0-9a-f]+)', t.split('BRA',1)[1])
            if m:
                tgt = int(m.group(1), 16)
                if tgt <= a: out.append((tgt, a))
    return out
for path in (sys.argv[1:] if __name__ == "__main__" else []):
    ins = parse(path)
    print('=====', path, 'instructions', len(ins))
    print(' whole:', dict(sorted(summary(ins, path).items())))
    for lo, hi in loops(ins):
        body = [(a, t) for a, t in ins if lo <= a <= hi]
        s = summary(body, '')
        if any(k.startswith(('HGMMA', 'UTMALDG', 'LDGSTS', 'MUFU')) for k in s):
            print(f' loop {lo:#x}-{hi:#x} ({len(body)} instr):', dict(sorted(s.items())))
