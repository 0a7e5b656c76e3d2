"""tools/ab_speed.py's arguments (no GPU: the side-by-side timing itself runs on one): the cells
an A/B times and the backward options --bwd-tile hands both trees."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ab_speed  # noqa: E402


def test_bwd_tile_options():
    """'default' leaves each tree its own backward; a tile names the wgmma tile (':mma': the mma
    one), ':atomic' asks deterministic=False (dQ by atomics) with either; anything else stops
    with the flag's name."""
    assert ab_speed.bwd_options("default") == {}
    assert ab_speed.bwd_options("default:atomic") == {"deterministic": False}
    assert ab_speed.bwd_options("64x128x12x2:atomic") == {"tile": [64, 128, 12, 2, "wgmma"],
                                                          "deterministic": False}
    assert ab_speed.bwd_options("64x128x12x3") == {"tile": [64, 128, 12, 3, "wgmma"]}
    assert ab_speed.bwd_options("64x64x4x1:mma") == {"tile": [64, 64, 4, 1, "mma"]}
    for bad in ("64x128", "64x128x12x2:fast", "big", "default:mma", "64x64x4x1:mma:mma"):
        with pytest.raises(SystemExit, match="--bwd-tile"):
            ab_speed.bwd_options(bad)


def test_cells():
    """One cell per pass, head dim, dtype, causal flag and T, in that nesting."""
    a = ab_speed.cell_parser(ab_speed.__doc__).parse_args(
        ["--base", "a", "--new", "b", "--T", "1024,2048", "--d", "64", "--dtypes", "float16",
         "--passes", "bwd", "--causal", "0,1"])
    assert ab_speed.cells_of(a) == [[1024, 64, "float16", False, "bwd"],
                                    [2048, 64, "float16", False, "bwd"],
                                    [1024, 64, "float16", True, "bwd"],
                                    [2048, 64, "float16", True, "bwd"]]


def test_cell_precision_reaches_the_backward(tmp_path, monkeypatch):
    """A float32 cell's precision ('float32:tf32') reaches the forward and the backward: call 179's
    A/B of float32:tf32 timed 'highest''s backward (attention_backward's default) in both trees
    (NOTES.md v57). The cell code runs here on a stub tree whose cuflash records its calls (a
    stub cupy, a timer that calls once)."""
    import json
    tree, log = tmp_path / "tree", tmp_path / "calls.jsonl"
    (tree / "cuflash").mkdir(parents=True)
    (tree / "cupy").mkdir()
    (tree / "cuflash" / "__init__.py").write_text(
        "import json\n"
        "class Residuals: pass\n"
        "def _log(name, kw):\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(json.dumps([name, kw]) + '\\n')\n"
        "def attention(q, k, v, return_residuals=False, **kw):\n"
        "    _log('attention', kw)\n"
        "    return (q, Residuals()) if return_residuals else q\n"
        "def attention_backward(do, res, **kw):\n"
        "    _log('attention_backward', kw)\n")
    (tree / "cupy" / "__init__.py").write_text("import numpy\nasarray = numpy.asarray\n")
    timer = tmp_path / "gputime.py"
    timer.write_text("def gpu_times(fn, n, warm):\n    fn()\n    return [1.0]\n")
    monkeypatch.setattr(ab_speed, "GPUTIME", str(timer))
    out = ab_speed.run_tree(str(tree), [[16384, 128, "float32:tf32", True, "bwd"]])
    assert list(out) == [(16384, 128, "float32:tf32", True, "bwd")]
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert calls == [["attention", {"causal": True, "precision": "tf32"}],
                     ["attention_backward", {"precision": "tf32"}]], calls


def test_env_line_names_where_it_ran(tmp_path):
    """The A/B's first line and its JSON name the GPU, versions, date and commit as bench_f32's
    header does (cuflash.experiments.env.summary_line), from the new tree in a process of its own;
    a tree that cannot say gives a line saying why, not a crash."""
    tree = tmp_path / "tree"
    (tree / "cuflash" / "experiments").mkdir(parents=True)
    (tree / "cuflash" / "__init__.py").write_text("")
    (tree / "cuflash" / "experiments" / "__init__.py").write_text("")
    (tree / "cuflash" / "experiments" / "env.py").write_text(
        "def collect(device):\n    return {'device': device}\n"
        "def summary_line(env):\n    return 'GPU X, driver 1, ' + env['device']\n")
    assert ab_speed.env_line(str(tree)) == "GPU X, driver 1, gpu"
    (tree / "cuflash" / "experiments" / "env.py").write_text("raise ImportError('no')\n")
    assert ab_speed.env_line(str(tree)).startswith("(no environment line: rc=1")
