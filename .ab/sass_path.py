# Crude in-order issue model of one warp along one path of the SASS: from address `start` to
# address `end`, conditional branches decided by `take` (address -> True/False; default not
# taken), printing each branch met. Issue 1 instruction a clock; MUFU holds the XU XU clocks
# (a warp instruction on 4 lanes a sub-partition: 8); each instruction waits for its source
# registers (MUFU 18 clocks, other 5: rough); VOTE/SHFL 10.
import sys, re
f, start, end = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
take = {int(a, 16): v == 't' for a, v in (x.split('=') for x in sys.argv[4:])}
XU = 8
code = {}
order = []
for l in open(f).read().splitlines():
    m = re.match(r'\s*/\*([0-9a-f]+)\*/\s+(.*?);', l)
    if m:
        a = int(m.group(1), 16); code[a] = m.group(2).strip(); order.append(a)
idx = {a: i for i, a in enumerate(order)}
trace = []
i = idx[start]; t = 0; xu = 0; ready = {}; n = 0; nm = 0; last_m = 0; seen = 0
while True:
    a = order[i]; ins = code[a]
    if a == end: break
    seen += 1
    if seen > 20000: print('loop?'); break
    toks = ins.replace(',', ' ').split()
    pred = toks[0] if toks[0].startswith('@') else None
    if pred: toks = toks[1:]
    op = toks[0]
    if op.startswith('BRA'):
        tgt = int(toks[-1], 16) if toks[-1].startswith('0x') else None
        if pred is None and tgt is not None: i = idx[tgt]; continue
        d = take.get(a, False)
        print(f'  branch {a:#x} {pred} -> {tgt:#x}: {"taken" if d else "not taken"}')
        if d: i = idx[tgt]; continue
        i += 1; continue
    regs = [x.strip('-|') for x in toks[1:] if re.fullmatch(r'-?\|?R\d+(\.reuse)?\|?', x)]
    regs = [r.replace('.reuse', '') for r in regs]
    dst, srcs = (regs[0], regs[1:]) if regs else (None, [])
    if op.startswith(('STS', 'STG', 'RED', 'ST.')): srcs = regs; dst = None
    t0 = max([t] + [ready.get(r, 0) for r in srcs])
    lat = 5
    if op.startswith('MUFU'):
        t0 = max(t0, xu); xu = t0 + XU; lat = 18; nm += 1; last_m = t0
    elif op.startswith(('VOTE', 'SHFL')): lat = 10
    t = t0 + 1; n += 1
    trace.append((t0, a, ins))
    if dst: ready[dst] = t0 + lat
    i += 1
print(f'{f} {start:#x}->{end:#x}: {n} instructions, {nm} MUFU, last MUFU at {last_m}, end at {t}')
import os
if os.environ.get('TRACE'):
    for t0, a, ins in trace:
        if t0 >= last_m - int(os.environ['TRACE']): print(f'{t0:6} {a:#x} {ins[:70]}')
