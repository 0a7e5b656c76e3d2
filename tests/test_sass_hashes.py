"""tools/sass_hashes.py's comparison, the check behind the SASS-identical kernel refactors
(NOTES v19): equal fingerprints pass, a changed or missing kernel fails and is named."""
import importlib.util
import json
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "sass_hashes.py"


def _tool():
    spec = importlib.util.spec_from_file_location("sass_hashes", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compare_names_what_differs(tmp_path, capsys):
    tool = _tool()
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    a.write_text(json.dumps({"k1": "00", "k2": "11"}))
    b.write_text(json.dumps({"k1": "00", "k2": "11"}))
    c.write_text(json.dumps({"k1": "00", "k2": "12", "k3": "33"}))
    assert tool.main(["--compare", str(a), str(b)]) == 0
    assert "0 differ" in capsys.readouterr().out
    assert tool.main(["--compare", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert "2 differ" in out and "k2" in out and "k3" in out and "k1 " not in out
