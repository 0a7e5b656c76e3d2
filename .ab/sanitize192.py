"""compute-sanitizer cases of the three-consumer forward alone (v89, session 50): tests/sanitize.py's
main() on its HOPPER_CASES entry with block_m = 192 (dense, causal with split-KV, window + ALiBi,
mask_mod; GQA, strided views, a packed batch on the one-consumer tile), float16 d = 64."""
import sys
sys.path.insert(0, "tests")
import sanitize as s
s.CASES, s.KEY_SPLIT_CASES, s.TF32_CASES, s.FP64_TC_CASES, s.WGMMA_TF32_CASES = [], [], [], [], []
s.HOPPER_CASES = [c for c in s.HOPPER_CASES if c[2].block_m == 192]
assert s.HOPPER_CASES
sys.argv = ["sanitize.py", "case", "float16", "64"]
s.main()
