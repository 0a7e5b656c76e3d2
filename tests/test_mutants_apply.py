"""tools/mutants.py's planted bugs still plant: each mutation's text occurs exactly once in its
file and each test it names exists (a refactor that moves a line would otherwise leave a mutant
reported "not applied" only when someone runs it, GPU mutants on a GPU). CPU only; runs none."""
import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mutants():
    spec = importlib.util.spec_from_file_location("cuflash_mutants", ROOT / "tools" / "mutants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod      # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod.MUTANTS


MUTANTS = _mutants()


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.name)
def test_mutant_applies_once_and_names_real_tests(m):
    text = (ROOT / m.path).read_text()
    assert text.count(m.old) == 1, f"{m.name}: {m.path} holds its text {text.count(m.old)} times"
    assert m.new != m.old
    for t in m.tests:
        path, _, name = t.partition("::")
        assert (ROOT / path).is_file(), f"{m.name}: no test file {path}"
        if name:
            assert name.split("[")[0] in _test_names(ROOT / path), f"{m.name}: no test {t}"


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
