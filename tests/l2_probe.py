"""Where do the flash forward's K/V re-reads go? L2 and DRAM counters for a few points (ncu).

    python3 tests/l2_probe.py            # on a GPU machine with ncu; prints a table

For each point, ncu profiles one forward call (cuflash.experiments.one_call) and reports the
bytes the SMs read through L2 (lts__t_sectors_srcunit_tex_op_read.sum × 32), the L2 hit rate
and the DRAM bytes read. The IO model's no-cache prediction (K, V re-read once per query
tile) should match the L2 reads; its L2-aware prediction (K, V read from DRAM once per head when
the heads in flight fit in L2) should match the DRAM reads. The README's "Where the bytes go"
quotes this table.
"""
import subprocess
import sys

from cuflash import iomodel
from cuflash.experiments.ncu import find_ncu
from cuflash.experiments.points import Point
from cuflash.tile import default_tile

METRICS = ("dram__bytes_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
           "lts__t_sector_hit_rate.pct")


def profile(point: Point) -> dict:
    ncu = find_ncu()
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv",
           "--print-units", "base", "--metrics", ",".join(METRICS),
           sys.executable, "-m", "cuflash.experiments.one_call", point.to_json()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    values = {}
    for line in out.splitlines():
        cells = [c.strip('"') for c in line.split('","')]
        for m in METRICS:
            if m in cells:
                values[m] = values.get(m, 0.0) + float(cells[-1].replace(",", ""))
    return values


def main():
    print(f"{'d':>4} {'T':>6} {'tile':20} {'L2 read MB':>10} {'no-cache MB':>11} {'hit %':>6} "
          f"{'DRAM read MB':>12} {'L2-model MB':>11}")
    for d in (64, 128):
        for T in (8192, 32768):
            tile = default_tile(d, "float16")
            p = Point("flash", "flash", "", T, T, d, 1, 8, "float16", False, "forward", "gpu",
                      tile, None, None)
            v = profile(p)
            nocache = iomodel.flash_forward(8, T, T, d, "float16", False, tile)
            l2 = iomodel.flash_forward_dram(8, T, T, d, "float16", False, tile)
            print(f"{d:>4} {T:>6} {tile.short():20} "
                  f"{v.get(METRICS[1], float('nan')) * 32 / 1e6:>10.1f} "
                  f"{nocache.bytes_read / 1e6:>11.1f} {v.get(METRICS[2], float('nan')):>6.1f} "
                  f"{v.get(METRICS[0], float('nan')) / 1e6:>12.1f} {l2.bytes_read / 1e6:>11.1f}")


if __name__ == "__main__":
    main()
