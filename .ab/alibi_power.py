"""Issue 11, NOTES v77: is ALiBi's wall-clock cost at boost clocks (12-42%) a clock / power effect
on top of its 5-7% of cycles (ncu, locked clocks)? Each case (float16, d = 128, T = 8192, B = 2,
H = 16: bench_variants' modifiers case) runs back to back for --seconds while nvidia-smi samples
SM clock and power every 50 ms; prints per case: ms per call, mean SM clock, mean power, and the
cycles per call (ms x clock)."""
import argparse, subprocess, time
import cupy as cp
import numpy as np
import cuflash

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=3.0)
a = ap.parse_args()
B, H, T, d = 2, 16, 8192, 128
rng = np.random.default_rng(0)
f = lambda: cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float16))
q, k, v = f(), f(), f()
slopes = cp.asarray((2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(np.float32))
kinds = {"plain": {}, "alibi": dict(alibi_slopes=slopes), "softcap": dict(softcap=30.0)}
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                        "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
spans = []
for rnd in range(2):
    for causal in (False, True):
        for name, kw in kinds.items():
            fn = lambda: cuflash.attention(q, k, v, causal=causal, **kw)
            fn(); cp.cuda.Device().synchronize()
            t0 = time.time(); n = 0
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            while time.time() - t0 < a.seconds:
                for _ in range(10):
                    fn()
                n += 10
                e1.record(); e1.synchronize()
            ms = cp.cuda.get_elapsed_time(e0, e1) / n
            spans.append((rnd, causal, name, t0 + 0.5, time.time(), ms))
            time.sleep(0.3)
smi.terminate()
out = smi.communicate()[0]
samples = []
for line in out.splitlines():
    try:
        ts, clk, pw = [x.strip() for x in line.split(",")]
        t = time.mktime(time.strptime(ts.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + ts.split(".")[1])
        samples.append((t, float(clk), float(pw)))
    except Exception:
        pass
print("round causal kind ms_per_call sm_clock_MHz power_W Mcycles_per_call")
for rnd, causal, name, t0, t1, ms in spans:
    s = [(c, p) for t, c, p in samples if t0 <= t <= t1]
    clk = np.mean([c for c, _ in s]) if s else float("nan")
    pw = np.mean([p for _, p in s]) if s else float("nan")
    print(f"{rnd} {int(causal)} {name:8} {ms:7.3f} {clk:7.0f} {pw:6.0f} {ms * clk / 1e3:8.3f}")
