import re, sys, collections
sys.path.insert(0, __import__('os').path.dirname(__file__)); from ana import parse, opc
path, lo, hi = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
ins = [(a, t) for a, t in parse(path) if lo <= a <= hi]
KEY = ('HGMMA', 'WARPGROUP', 'SYNCS', 'BAR', 'BRA', 'USETMAXREG', 'UTMALDG', 'UTMASTG', 'BSSY', 'BSYNC', 'LDGSTS', 'LDGDEPBAR', 'DEPBAR', 'FENCE', 'WARPSYNC', 'LDS', 'STS', 'LDSM', 'STSM', 'LDG', 'STG', 'ARRIVES')
acc = collections.Counter()
def flush():
    if acc:
        tot = sum(acc.values()); top = ', '.join(f'{k} {v}' for k, v in acc.most_common(6))
        print(f'      [{tot} ALU: {top}]')
    acc.clear()
prev = None
for a, t in ins:
    o = opc(t); key = o.split('.')[0]
    if key in KEY:
        if key == 'HGMMA' and prev and prev[0] == o and 'gsb0' not in t:
            prev[1] += 1; continue
        flush()
        if key == 'HGMMA':
            if prev and prev[1] > 1: print(f'      (previous HGMMA x{prev[1]})')
            prev = [o, 1]
        print(f'{a:#06x} {t[:140]}')
    else:
        acc['EX2' if o.startswith('MUFU.EX2') else o.split('.')[0]] += 1
flush()
