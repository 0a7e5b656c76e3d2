"""Compare two .ab/x3_bits.py outputs bit for bit: x3_bits_diff.py base.npz new.npz."""
import sys
import numpy as np

a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
bad = [k for k in a if k not in b or not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))]
print("bits: %d arrays, differing: %s" % (len(a), bad or "none"))
