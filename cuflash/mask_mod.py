"""Custom attention masks ("mask_mod", after FlexAttention): one expression, two backends.

A mask_mod is a Python expression string over the index variables ``b`` (batch), ``h`` (head),
``i`` (query) and ``j`` (key), plus named captures: ints and integer arrays. It is true where
query i of (b, h) sees key j. :meth:`MaskMod.evaluate` runs it with NumPy or CuPy (the CPU twin and
the float64 oracle); :meth:`MaskMod.cuda_source` translates it to a C++ struct the kernels compile
in through NVRTC. Examples::

    MaskMod("(j <= i) | (j < prefix)", prefix=16)                   # prefix-LM
    MaskMod("doc_q[b, i] == doc_k[b, j]", doc_q=ids_q, doc_k=ids_k)  # documents, ids (B,T), (B,S)
    MaskMod("(i - j) % 4 == 0")                                     # dilated
    MaskMod("(doc[b, i] == doc[b, j]) & (j <= i)", doc=ids)         # causal documents
    MaskMod("(h % 2 == 0) | (abs(i - j) <= w)", w=8)                # per-head patterns

What an expression may contain (anything else is an error naming the construct):

* int literals, ``True``/``False``; names b, h, i, j and the captures (every capture must be used);
* on ints: unary ``-``/``+``, ``+ - * // %`` (Python's floor ``//`` and ``%``), ``abs(x)``,
  ``min(x, y, ...)``, ``max(x, y, ...)``, and comparisons ``< <= > >= == !=``, chained too
  (``0 <= i - j < 8``);
* on bools: ``~`` and ``not`` (logical not), ``& | ^``, ``and``/``or``, ``==``/``!=``;
* ``x if cond else y`` (cond a bool, both branches of one type);
* ``arr[e1, ..., en]``: a captured array indexed by as many int expressions as it has dims.

Ints and bools never mix (``i & j``, ``(i < j) + 1`` and an int result are TypeErrors). Captures:
at most 4 ints and 4 arrays (1 to 4 dims, any int dtype, values within int32; kept as int32
C-contiguous). The kernels compute in 32-bit ints, so every int value an expression produces must
fit int32. :meth:`evaluate` checks this, and that divisors are non-zero and array indices are in
range (0 <= index < dim; no negative wrap-around), raising OverflowError, ZeroDivisionError or
IndexError; the checks apply only where a value is used: the untaken branch of ``x if c else y``
and the right side of a decided ``and``/``or`` (or of a decided chained comparison) are not
checked, as in Python, so ``(j < n) and (lens[j] > 0)`` is fine; ``&`` and ``|`` evaluate both
sides. The CUDA code does not check: it clamps indices into range, and ``x // 0 == x % 0 == 0``.
The NumPy checks are the contract; an expression that passes them computes the same mask on both.
"""
from __future__ import annotations

import ast
import hashlib
import numbers
import operator

import numpy as np

INDEX_VARS = ("b", "h", "i", "j")
FUNCS = ("abs", "min", "max")
MAX_ARRAYS = MAX_INTS = 4
MAX_NDIM = 4
I32 = (-2**31, 2**31 - 1)

_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_LOGIC = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_NOT_ALLOWED = {ast.Attribute: "attribute access", ast.Div: "true division '/' (use '//')",
                ast.Pow: "power '**'", ast.LShift: "shift '<<'", ast.RShift: "shift '>>'",
                ast.MatMult: "matrix product '@'", ast.In: "membership test",
                ast.NotIn: "membership test", ast.Is: "identity test",
                ast.IsNot: "identity test", ast.Lambda: "lambda",
                ast.NamedExpr: "assignment ':='", ast.Slice: "slice", ast.Starred: "starred '*'",
                ast.List: "list", ast.Tuple: "tuple", ast.Set: "set", ast.Dict: "dict",
                ast.JoinedStr: "f-string", ast.ListComp: "comprehension",
                ast.GeneratorExp: "comprehension", ast.SetComp: "comprehension",
                ast.DictComp: "comprehension"}

_PYOP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
         "==": operator.eq, "!=": operator.ne, "+": operator.add, "-": operator.sub,
         "*": operator.mul, "//": operator.floordiv, "%": operator.mod}

_HELPERS = """\
#ifndef CUFLASH_MASK_MOD_HELPERS
#define CUFLASH_MASK_MOD_HELPERS
namespace cuflash {
// Python's floor // and % on 32-bit ints (x // 0 == x % 0 == 0; INT_MIN // -1 wraps).
__device__ __forceinline__ int mm_floordiv(int a, int b) {
    if (b == 0) return 0;
    if (b == -1) return (int)(0u - (unsigned)a);
    int q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ int mm_floormod(int a, int b) {
    if (b == 0 || b == -1) return 0;
    int r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ int mm_abs(int a) { return a < 0 ? -a : a; }
__device__ __forceinline__ int mm_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int mm_max(int a, int b) { return a > b ? a : b; }
// An array index clamped into [0, n) (NumPy evaluation raises instead).
__device__ __forceinline__ long long mm_clamp(int x, int n) {
    return x < 0 ? 0 : (x >= n ? (long long)(n > 0 ? n - 1 : 0) : (long long)x);
}
}  // namespace cuflash
#endif
"""


class _N:
    """A checked expression node: kind, children, type ('int' or 'bool'), source text, extra."""
    __slots__ = ("kind", "kids", "ty", "text", "extra")

    def __init__(self, kind, kids, ty, text, extra=None):
        self.kind, self.kids, self.ty, self.text, self.extra = kind, kids, ty, text, extra


def _is_cupy(x) -> bool:
    return type(x).__module__.split(".")[0] == "cupy"


def _on(xp, a):
    """`a` as an array of module xp (CuPy -> NumPy through .get())."""
    if xp is np and _is_cupy(a):
        return a.get()
    return xp.asarray(a)


class MaskMod:
    """A custom mask: ``expr`` over b, h, i, j and the captures (see the module docstring)."""

    def __init__(self, expr: str, **captures):
        if not isinstance(expr, str):
            raise TypeError(f"mask_mod: expr must be a str, got {type(expr).__name__} {expr!r}")
        self.expr = expr
        self._arrays, self._ints, self._kinds = {}, {}, {}
        for name, value in captures.items():
            self._capture(name, value)
        self._src = expr.strip()
        try:
            tree = ast.parse(self._src, mode="eval")
        except (RecursionError, MemoryError):   # the parser's own depth limit
            raise ValueError(f"mask_mod: {expr[:60]!r}{'...' if len(expr) > 60 else ''} nests "
                             f"too deeply to parse") from None
        except SyntaxError as exc:
            line = (exc.text or self._src).rstrip("\n")
            col = exc.offset or len(line) + 1           # 0: at the end of the input
            raise ValueError(f"mask_mod: syntax error in {expr!r} at line {exc.lineno}, column "
                             f"{col}: {exc.msg}\n    {line}\n    {' ' * (col - 1)}^") from None
        self._used = set()
        try:
            self._norm = ast.unparse(tree)
            self._root = self._check(tree.body)
        except RecursionError:
            raise ValueError(f"mask_mod: {expr[:60]!r}{'...' if len(expr) > 60 else ''} nests "
                             f"too deeply to check") from None
        if self._root.ty != "bool":
            raise TypeError(f"mask_mod: the expression must be a bool (a comparison or a "
                            f"combination of comparisons), got int {self._root.text!r} in "
                            f"{expr!r}")
        unused = [n for n in captures if n not in self._used]
        if unused:
            raise ValueError(f"mask_mod: capture {unused[0]!r} is not used in {expr!r}; every "
                             f"capture must appear in the expression")
        self._uses = frozenset(n for n in INDEX_VARS if n in self._used)
        self._cache = {}

    # -- captures --------------------------------------------------------------------------------

    def _capture(self, name, value):
        if name in INDEX_VARS or name in FUNCS:
            raise ValueError(f"mask_mod: capture {name!r} is named like "
                             f"{'an index variable' if name in INDEX_VARS else 'a function'}; "
                             f"captures may not be called {', '.join(INDEX_VARS + FUNCS)}")
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"mask_mod: capture {name}={value!r} is a bool; a capture is an int "
                            f"or an integer array (write the condition in the expression)")
        if isinstance(value, numbers.Integral):
            if len(self._ints) == MAX_INTS:
                raise ValueError(f"mask_mod: capture {name!r} is int number {MAX_INTS + 1}; at "
                                 f"most {MAX_INTS} int captures ({', '.join(self._ints)} "
                                 f"already)")
            v = int(value)
            if not I32[0] <= v <= I32[1]:
                raise ValueError(f"mask_mod: capture {name}={v} is outside int32 "
                                 f"[{I32[0]}, {I32[1]}]")
            self._ints[name], self._kinds[name] = v, "int"
            return
        if not (isinstance(value, np.ndarray) or (_is_cupy(value) and hasattr(value, "dtype"))):
            raise TypeError(f"mask_mod: capture {name}={value!r:.60} is a "
                            f"{type(value).__name__}; a capture is an int or an integer "
                            f"numpy/cupy array")
        if value.dtype.kind not in "iu":
            raise TypeError(f"mask_mod: capture {name!r} is a {value.dtype} array; captured arrays "
                            f"must have an integer dtype (values within int32)")
        if not 1 <= value.ndim <= MAX_NDIM:
            raise ValueError(f"mask_mod: capture {name!r} has {value.ndim} dims (shape "
                             f"{tuple(value.shape)}); captured arrays have 1 to {MAX_NDIM} dims"
                             + ("; pass a 0-d array as an int" if value.ndim == 0 else ""))
        if len(self._arrays) == MAX_ARRAYS:
            raise ValueError(f"mask_mod: capture {name!r} is array number {MAX_ARRAYS + 1}; at "
                             f"most {MAX_ARRAYS} array captures ({', '.join(self._arrays)} "
                             f"already)")
        if value.size:
            lo, hi = int(value.min()), int(value.max())
            if lo < I32[0] or hi > I32[1]:
                raise ValueError(f"mask_mod: capture {name!r} has values in [{lo}, {hi}], outside "
                                 f"int32 [{I32[0]}, {I32[1]}]")
        xp = np if isinstance(value, np.ndarray) else __import__("cupy")
        self._arrays[name] = xp.ascontiguousarray(value.astype(np.int32, copy=False))
        self._kinds[name] = f"array{value.ndim}"

    # -- checking: Python AST -> typed nodes -----------------------------------------------------

    def _err(self, exc, node, msg):
        seg = ast.get_source_segment(self._src, node) or ast.unparse(node)
        where = f"in {self.expr!r}"
        msg = msg if "{where}" in msg else msg + " {where}"
        return exc(f"mask_mod: {msg.format(seg=repr(seg), where=where)}")

    def _typed(self, node, want, what):
        n = self._check(node)
        if n.ty != want:
            raise self._err(TypeError, node, f"{what} needs {'an' if want == 'int' else 'a'} "
                            f"{want}, got {n.ty} {{seg}}")
        return n

    def _check(self, node) -> _N:
        text = ast.get_source_segment(self._src, node) or ast.unparse(node)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return _N("lit", [], "bool", text, v)
            if isinstance(v, int):
                if v > I32[1]:
                    raise self._err(ValueError, node, "int literal {seg} is outside int32")
                return _N("lit", [], "int", text, v)
            raise self._err(ValueError, node, f"{type(v).__name__} literal {{seg}} {{where}} is "
                            f"not allowed; only int literals and True/False")
        if isinstance(node, ast.Name):
            name = node.id
            if name in INDEX_VARS or name in self._ints:
                self._used.add(name)
                return _N("var" if name in INDEX_VARS else "int", [], "int", text, name)
            if name in self._arrays:
                nd = self._arrays[name].ndim
                raise self._err(TypeError, node, f"{{seg}} is an array capture with {nd} dims; "
                                f"index it as {name}[{', '.join(['...'] * nd)}]")
            valid = ", ".join(list(INDEX_VARS) + list(self._kinds))
            raise self._err(ValueError, node, f"unknown name {{seg}} {{where}}; valid names: "
                            f"{valid} (and the functions {', '.join(FUNCS)})")
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, (ast.USub, ast.UAdd)):
                neg = isinstance(node.op, ast.USub)
                lit = node.operand
                if neg and isinstance(lit, ast.Constant) and type(lit.value) is int and \
                        lit.value == -I32[0]:   # int32's least value, whose digits alone do not fit
                    return _N("lit", [], "int", text, I32[0])
                x = self._typed(node.operand, "int", f"unary '{'-' if neg else '+'}'")
                return _N("neg", [x], "int", text) if neg else x
            op = "not" if isinstance(node.op, ast.Not) else "~"
            return _N("not", [self._typed(node.operand, "bool", f"'{op}'")], "bool", text)
        if isinstance(node, ast.BinOp):
            kind = type(node.op)
            if kind in _ARITH:
                op = _ARITH[kind]
                a, b = (self._typed(x, "int", f"'{op}'") for x in (node.left, node.right))
                return _N("arith", [a, b], "int", text, op)
            if kind in _LOGIC:
                op = _LOGIC[kind]
                a, b = (self._typed(x, "bool", f"'{op}' (logical on bools; compare ints first)")
                        for x in (node.left, node.right))
                return _N("logic", [a, b], "bool", text, op)
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return _N(op, [self._typed(x, "bool", f"'{op}'") for x in node.values], "bool", text)
        if isinstance(node, ast.Compare):
            parts = [self._check(x) for x in [node.left, *node.comparators]]
            links = []
            for op, a, b in zip(node.ops, parts, parts[1:]):
                if type(op) not in _CMP:
                    break
                sym = _CMP[type(op)]
                if a.ty != b.ty or (a.ty == "bool" and sym not in ("==", "!=")):
                    raise self._err(TypeError, node, f"comparison '{sym}' needs two ints (or two "
                                    f"bools for == and !=), got {a.ty} {a.text!r} and {b.ty} "
                                    f"{b.text!r}")
                links.append(_N("cmp", [a, b], "bool", f"{a.text} {sym} {b.text}", sym))
            else:
                return links[0] if len(links) == 1 else _N("and", links, "bool", text)
        if isinstance(node, ast.IfExp):
            c = self._typed(node.test, "bool", "the condition of 'if'")
            a, b = self._check(node.body), self._check(node.orelse)
            if a.ty != b.ty:
                raise self._err(TypeError, node, f"the branches of {{seg}} must have one type, got "
                                f"{a.ty} {a.text!r} and {b.ty} {b.text!r}")
            return _N("if", [c, a, b], a.ty, text)
        if isinstance(node, ast.Call):
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if fn not in FUNCS:
                raise self._err(ValueError, node, f"call {{seg}} {{where}} is not allowed; the "
                                f"functions are {', '.join(FUNCS)}")
            if node.keywords or (len(node.args) != 1 if fn == "abs" else len(node.args) < 2):
                want = "one positional argument" if fn == "abs" else "two or more positional "
                raise self._err(ValueError, node, f"{fn}() takes {want}"
                                f"{'' if fn == 'abs' else 'arguments'}, got {{seg}}")
            return _N(fn, [self._typed(x, "int", f"{fn}()") for x in node.args], "int", text)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            node = node.slice
        elif isinstance(node, ast.Subscript):
            name = node.value.id if isinstance(node.value, ast.Name) else None
            if name not in self._arrays:
                what = ("an int" if name in self._ints or name in INDEX_VARS
                        else "not an array capture")
                raise self._err(TypeError, node, f"{{seg}} indexes {ast.unparse(node.value)!r}, "
                                f"which is {what}, {{where}}; only captured "
                                f"arrays ({', '.join(self._arrays) or 'none'}) can be indexed")
            idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            nd = self._arrays[name].ndim
            if len(idx) != nd:
                raise self._err(ValueError, node, f"{{seg}} {{where}} has {len(idx)} indices but "
                                f"{name} has {nd} dims; give exactly {nd}")
            self._used.add(name)
            kids = [self._typed(x, "int", f"index of {name}") for x in idx]
            return _N("index", kids, "int", text, name)
        what = _NOT_ALLOWED.get(type(node)) or _NOT_ALLOWED.get(type(getattr(node, "op", None)))
        if isinstance(node, ast.Compare):
            what = next(_NOT_ALLOWED.get(type(op), "comparison") for op in node.ops
                        if type(op) not in _CMP)
        what = what or f"{type(node).__name__} expression"
        raise self._err(ValueError, node, f"{what} {{seg}} is not allowed")

    # -- public API ------------------------------------------------------------------------------

    def key(self) -> str:
        """12 hex digits naming the compiled code: the normalized expression and the capture
        names, kinds and ndims in order (not the array or int values)."""
        sig = ";".join(f"{n}:{k}" for n, k in self._kinds.items())
        return hashlib.sha256(f"{self._norm}|{sig}".encode()).hexdigest()[:12]

    def arrays(self) -> list:
        """[(name, int32 C-contiguous array)] in the order of ``mm_tensor``."""
        return list(self._arrays.items())

    def ints(self) -> list:
        """[(name, value)] in the order of ``mm_int``."""
        return list(self._ints.items())

    def uses(self) -> frozenset:
        """Which of b, h, i, j the expression reads."""
        return self._uses

    def __repr__(self):
        caps = [f"{n}={v}" for n, v in self._ints.items()]
        caps += [f"{n}=<int32 array {tuple(a.shape)}>" for n, a in self._arrays.items()]
        return f"MaskMod({', '.join([repr(self.expr), *caps])})"

    # -- NumPy / CuPy ----------------------------------------------------------------------------

    def evaluate(self, b, h, i, j, xp=np):
        """Bool array of module xp: the mask at broadcast index arrays b, h, i, j (integer arrays
        or Python ints), of their broadcast shape. Raises IndexError, ZeroDivisionError or
        OverflowError where the CUDA code would silently differ (module docstring)."""
        if xp.__name__ not in self._cache:
            self._cache[xp.__name__] = {n: _on(xp, a) for n, a in self._arrays.items()}
        ev = _Eval(xp, {}, self._cache[xp.__name__], self._ints, self.expr)
        for name, v in zip(INDEX_VARS, (b, h, i, j)):
            kind = getattr(v, "dtype", np.dtype("f8")).kind
            if isinstance(v, (bool, np.bool_)) or not (isinstance(v, numbers.Integral)
                                                       or kind in "iu"):
                raise TypeError(f"mask_mod.evaluate: {name} must be an int or an integer array, "
                                f"got {type(v).__name__} {getattr(v, 'dtype', '')}".rstrip())
            if isinstance(v, numbers.Integral) and not I32[0] <= int(v) <= I32[1]:
                raise OverflowError(f"mask_mod: index variable {name}={int(v)} is outside int32 "
                                    f"[{I32[0]}, {I32[1]}], in {self.expr!r}")
            a = _on(xp, v)
            if a.dtype.kind == "u" and a.size and int(a.max()) > I32[1]:   # (cast would wrap)
                raise OverflowError(f"mask_mod: index variable {name} takes values up to "
                                    f"{int(a.max())}, outside int32 [{I32[0]}, {I32[1]}], in "
                                    f"{self.expr!r}")
            ev.env[name] = ev.fits(a.astype(np.int64), None, f"index variable {name}")
        shape = np.broadcast_shapes(*(a.shape for a in ev.env.values()))
        res = xp.asarray(ev.eval(self._root, None), dtype=bool)
        return res if res.shape == shape else xp.broadcast_to(res, shape).copy()

    # -- CUDA ------------------------------------------------------------------------------------

    def cuda_source(self) -> str:
        """C++ defining ``cuflash::MaskMod_<key>`` with ``visible(p, b, h, i, j)`` (and, once per
        translation unit, the mm_* helpers). P has ``const int* mm_tensor[4]``,
        ``int mm_shape[4][4]`` and ``int mm_int[4]``, filled in the order of arrays() and ints()."""
        body = self._cpp(self._root)
        return (f"{_HELPERS}namespace cuflash {{\n// mask_mod: {self._norm}\n"
                f"struct MaskMod_{self.key()} {{\n"
                f"    static constexpr bool kActive = true;\n"
                f"    template <class P>\n"
                f"    __device__ __forceinline__ static bool visible(const P& p, int b, int h, "
                f"int i, int j) {{\n"
                f"        (void)p; (void)b; (void)h; (void)i; (void)j;\n"
                f"        return {body};\n    }}\n}};\n}}  // namespace cuflash\n")

    def _cpp(self, n) -> str:
        k, c = n.kind, [self._cpp(kid) for kid in n.kids]
        if k == "lit":
            if n.ty == "bool":
                return str(n.extra).lower()
            return "(-2147483647 - 1)" if n.extra == I32[0] else str(n.extra)   # an int in C++
        if k == "var":
            return n.extra
        if k == "int":
            return f"p.mm_int[{list(self._ints).index(n.extra)}]"
        if k == "not":
            return f"(!{c[0]})"
        if k in ("and", "or"):
            return "(" + (" && " if k == "and" else " || ").join(c) + ")"
        if k == "logic":
            return f"({c[0]} {dict(zip('&|^', ('&&', '||', '!=')))[n.extra]} {c[1]})"
        if k == "cmp":
            return f"({c[0]} {n.extra} {c[1]})"
        if k == "if":
            return f"({c[0]} ? {c[1]} : {c[2]})"
        if k == "neg":
            return f"(-{c[0]})"
        if k == "abs":
            return f"mm_abs({c[0]})"
        if k in ("min", "max"):
            out = c[0]
            for x in c[1:]:
                out = f"mm_{k}({out}, {x})"
            return out
        if k == "arith":
            if n.extra in ("//", "%"):
                return f"mm_floor{'div' if n.extra == '//' else 'mod'}({c[0]}, {c[1]})"
            return f"({c[0]} {n.extra} {c[1]})"
        t = list(self._arrays).index(n.extra)           # index
        off = ""
        for d, x in enumerate(c):
            cl = f"mm_clamp({x}, p.mm_shape[{t}][{d}])"
            off = cl if d == 0 else f"({off} * p.mm_shape[{t}][{d}] + {cl})"
        return f"p.mm_tensor[{t}][{off}]"


class _Eval:
    """One evaluate() call: the array module, index variables, arrays on that module, ints."""

    def __init__(self, xp, env, arrs, ints, expr):
        self.xp, self.env, self.arrs, self.ints, self.expr = xp, env, arrs, ints, expr

    def _live(self, v, live):
        """The values of v where `live` (None: everywhere), or None when there are none."""
        if live is None:
            return v
        if not hasattr(v, "shape"):
            return v if bool(live.any()) else None
        shape = np.broadcast_shapes(v.shape, live.shape)
        return self.xp.broadcast_to(v, shape)[self.xp.broadcast_to(live, shape)]

    def _range(self, v, live):
        vals = self._live(v, live)
        if vals is None or getattr(vals, "size", 1) == 0:
            return None
        return (int(vals.min()), int(vals.max())) if hasattr(vals, "shape") else (vals, vals)

    def fits(self, v, live, text):
        r = self._range(v, live)
        if r and (r[0] < I32[0] or r[1] > I32[1]):
            raise OverflowError(f"mask_mod: {text} takes values in [{r[0]}, {r[1]}], outside int32 "
                                f"[{I32[0]}, {I32[1]}] (the kernels compute in 32-bit ints), in "
                                f"{self.expr!r}")
        if r is None and live is not None and getattr(v, "ndim", 0) == 0:
            return 0                # an unused scalar: keep it small
        return v

    def _and(self, live, c):
        """Where a value is used: `live` (None: everywhere) narrowed by the bool c."""
        c = c if hasattr(c, "shape") else self.xp.asarray(c)
        return c if live is None else live & c

    def _not(self, x):
        return (not x) if isinstance(x, bool) else self.xp.logical_not(x)

    def eval(self, n, live):
        xp, k = self.xp, n.kind
        if k == "lit":
            return n.extra
        if k == "var":
            return self.env[n.extra]
        if k == "int":
            return self.ints[n.extra]
        if k == "not":
            x = self.eval(n.kids[0], live)
            return self._not(x)
        if k in ("and", "or"):
            acc = self.eval(n.kids[0], live)
            for kid in n.kids[1:]:
                sub = self._and(live, acc if k == "and" else self._not(acc))
                y = self.eval(kid, sub)
                acc = (acc & y) if k == "and" else (acc | y)
            return acc
        if k == "if":
            c = xp.asarray(self.eval(n.kids[0], live))
            a = self.eval(n.kids[1], self._and(live, c))
            b = self.eval(n.kids[2], self._and(live, xp.logical_not(c)))
            return xp.where(c, xp.asarray(a), xp.asarray(b))
        vals = [self.eval(kid, live) for kid in n.kids]
        if k == "logic":
            a, b = vals
            return a & b if n.extra == "&" else a | b if n.extra == "|" else a ^ b
        if k == "cmp":
            a, b = vals
            return _PYOP[n.extra](a, b)
        if k == "index":
            return self._gather(n, vals, live)
        if k == "neg":
            out = -vals[0]
        elif k == "abs":
            out = abs(vals[0])
        elif k in ("min", "max"):
            out = vals[0]
            for v in vals[1:]:
                if isinstance(out, int) and isinstance(v, int):
                    out = (min if k == "min" else max)(out, v)
                else:
                    out = (xp.minimum if k == "min" else xp.maximum)(out, v)
        else:
            a, b, op = *vals, n.extra
            if op in ("//", "%"):
                r = self._range(b == 0, live)
                if r and r[1]:
                    raise ZeroDivisionError(f"mask_mod: {n.kids[1].text!r} is 0 in {n.text!r} "
                                            f"(integer division or modulo by zero) in "
                                            f"{self.expr!r}")
                b = xp.where(b == 0, 1, b) if hasattr(b, "shape") else (b or 1)
            out = _PYOP[op](a, b)
        return self.fits(out, live, repr(n.text))

    def _gather(self, n, idx, live):
        arr, xp = self.arrs[n.extra], self.xp
        for d, (v, kid) in enumerate(zip(idx, n.kids)):
            r = self._range(v, live)
            if r and (r[0] < 0 or r[1] >= arr.shape[d]):
                raise IndexError(f"mask_mod: index {d} ({kid.text!r}) of {n.text!r} ranges over "
                                 f"[{r[0]}, {r[1]}] but {n.extra} has shape {tuple(arr.shape)}: "
                                 f"valid indices are 0 <= index < {arr.shape[d]} (indices must be "
                                 f"in range; NumPy evaluation raises, CUDA clamps), in "
                                 f"{self.expr!r}")
        if arr.size == 0:           # nothing is in range, so nothing here is used
            return xp.zeros(np.broadcast_shapes(*(np.shape(v) for v in idx)), dtype=np.int64)
        idx = tuple(xp.clip(v, 0, s - 1) if hasattr(v, "shape") else min(max(v, 0), s - 1)
                    for v, s in zip(idx, arr.shape))
        out = arr[idx]
        return out.astype(np.int64) if hasattr(out, "shape") and out.ndim else int(out)
