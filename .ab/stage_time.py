"""Call 182: how much of a float32 tensor-core call its staging takes, and at what bandwidth.
Per (d, T) at bench_f32's shapes (B = 16384 / T, H = 2048 / d): the whole 'tf32' / 'highest'
forward and backward (ms), the TF32 forward's K/Vᵀ staging kernel, the f16 staging of one pair
(rows, per row), and a device copy of the same bytes as the bandwidth reference."""
import sys, time
import numpy as np, cupy as cp
sys.path.insert(0, ".")
import cuflash
from cuflash.gpu import build, f16x3_stage, views
from cuflash.gpu.tf32_stage import padded_keys


def ms(fn, reps=20):
    fn(); cp.cuda.runtime.deviceSynchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    best = []
    for _ in range(3):
        s.record()
        for _ in range(reps):
            fn()
        e.record(); e.synchronize()
        best.append(cp.cuda.get_elapsed_time(s, e) / reps)
    return min(best)


def tf32_stage(k, v, out_k, out_v):
    B, H, S, D = k.shape
    fn = build.get_tf32_stage(cp.cuda.Device().id, getattr(build, "tf32_stage_dim", lambda d: build.TF32_STAGE_MAX_D)(D))
    ks, vs = views.strides(k), views.strides(v)
    fn((S // build.TF32_STAGE_KEYS, B * H), (build.TF32_STAGE_THREADS,),
       (k, v, *(np.int64(x) for x in ks), *(np.int64(x) for x in vs), np.int32(H), np.int32(S),
        np.int32(S), np.int32(D), out_k, out_v))


from cuflash.experiments import env
print("# " + env.summary_line(env.collect("gpu")))
print("d T causal what ms GB/s share")
for d in (64, 128):
    for T in (2048, 16384):
        B, H = 16384 // T, 2048 // d
        rng = cp.random.default_rng(0)
        q, k, v, do = (rng.standard_normal((B, H, T, d), dtype=cp.float32) for _ in range(4))
        n = q.nbytes
        kr, vt = cp.empty_like(k), cp.empty_like(v)
        t_tf = ms(lambda: tf32_stage(k, v, kr, vt))
        t_f16 = ms(lambda: f16x3_stage.stage_pair(q, do, 64, d, b_tile=False, pad=128))
        big = cp.empty(2 * q.size, cp.float32); big2 = cp.empty_like(big)
        t_cp = ms(lambda: cp.copyto(big2, big))
        print(d, T, "-", "copy_2arrays", f"{t_cp:.4f}", f"{4 * n / t_cp / 1e6:.0f}", "-")
        print(d, T, "-", "tf32_stage", f"{t_tf:.4f}", f"{4 * n / t_tf / 1e6:.0f}", "-")
        f16_bytes = 2 * n + 2 * B * H * T * (d + 4) * 4
        print(d, T, "-", "f16_stage_pair", f"{t_f16:.4f}", f"{f16_bytes / t_f16 / 1e6:.0f}", "-")
        for causal in (() if "--stage-only" in sys.argv else (False, True)):
            fl = 4 * B * H * T * T * d / (2 if causal else 1)
            for prec in ("tf32", "highest"):
                t_f = ms(lambda: cuflash.attention(q, k, v, causal=causal, precision=prec), 5)
                o, res = cuflash.attention(q, k, v, causal=causal, precision=prec,
                                           return_residuals=True)
                t_b = ms(lambda: cuflash.attention_backward(do, res, precision=prec), 3)
                sf = (t_tf if prec == "tf32" else t_f16) / t_f
                sb = 2 * t_f16 / t_b
                print(d, T, int(causal), f"fwd_{prec}", f"{t_f:.4f}", f"{fl / t_f / 1e9:.1f}TF",
                      f"{sf:.3f}")
                print(d, T, int(causal), f"bwd_{prec}", f"{t_b:.4f}", f"{2.5 * fl / t_b / 1e9:.1f}TF",
                      f"{sb:.3f}")
        del q, k, v, do, kr, vt, big, big2
        cp.get_default_memory_pool().free_all_blocks()
