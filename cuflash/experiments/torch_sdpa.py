"""PyTorch's scaled_dot_product_attention as a reference method, one backend forced at a time.

torch is imported here only, inside :func:`build_call`: cuflash never imports it at module import.
Inputs go CuPy → torch through DLPack (no copy). ``torch.nn.attention.sdpa_kernel`` forces the
backend; a backend that refuses the shape or dtype raises :class:`~.measure.Unavailable`, which the
runner records as an 'unavailable' row with torch's reasons. GQA (k and v with fewer heads than
q, ``layouts``) runs with ``enable_gqa=True`` (torch 2.5 and later; an older torch, or a backend
that refuses it, is 'unavailable' too); a packed varlen batch is not an SDPA input
(``layouts.torch_refusal``).
"""
from __future__ import annotations

import re
import warnings

import numpy as np

from . import layouts, variants
from .measure import Call, Unavailable
from .points import Point

#: Our backend names -> torch.nn.attention.SDPBackend members.
BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
            "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def refusal_reasons(messages) -> str:
    """The informative part of torch's warnings when a forced SDPA backend refuses: drops the
    'X kernel not used because:' headers, 'runtime disabled' notes for the other backends and the
    '(Triggered internally at ...)' suffixes."""
    kept = []
    for msg in messages:
        text = re.sub(r"\(Triggered internally at[^)]*\)", "", msg)
        text = " ".join(text.split())
        if not text or text.endswith("because:") or "runtime disabled" in text:
            continue
        if text not in kept:
            kept.append(text)
    return "; ".join(kept)


def import_torch():
    """torch with a CUDA device, or Unavailable saying why not."""
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        raise Unavailable(f"torch is not importable ({type(exc).__name__}: {exc})") from None
    if not torch.cuda.is_available():
        raise Unavailable("torch sees no CUDA device")
    return torch


def build_call(point: Point, inputs: dict) -> Call:
    """The measured SDPA call (forward, backward via autograd.grad, or both)."""
    if point.device != "gpu":
        raise Unavailable("torch_sdpa runs on the GPU only")
    refusal = variants.torch_refusal(point) or layouts.torch_refusal(point)
    if refusal is not None:
        raise Unavailable(refusal)
    if point.causal and point.seq_len != point.kv_len:
        raise Unavailable("torch's is_causal mask is aligned top-left, cuflash's bottom-right; "
                          "they differ when seq_len != kv_len")
    torch = import_torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, BACKENDS[point.backend])
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal = point.causal
    gqa = {"enable_gqa": True} if point.group > 1 else {}
    q, k, v = (torch.from_dlpack(inputs[n]) for n in ("q", "k", "v"))

    def forward(q_, k_, v_):
        with sdpa_kernel(backend):
            return sdpa(q_, k_, v_, is_causal=causal, **gqa)

    # One probe call: a backend that cannot take these inputs says so here, with its reasons.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            probe = forward(q, k, v)
        except TypeError as exc:
            if not gqa or "enable_gqa" not in str(exc):
                raise
            raise Unavailable(f"torch {torch.__version__} has no enable_gqa (GQA in SDPA came "
                              f"with torch 2.5): {exc}") from None
        except RuntimeError as exc:
            if "no available kernel" not in str(exc).lower():
                raise
            reasons = refusal_reasons(str(w.message) for w in caught)
            what = f"{point.dtype} d={point.head_dim}" + (
                f" with enable_gqa (G={point.group})" if gqa else "")
            raise Unavailable(f"torch SDPA backend {point.backend!r} refused {what}: "
                              f"{reasons or exc}") from None
    del probe

    def outputs(result):
        wide = torch.float64 if point.dtype == "float64" else torch.float32
        res = result if isinstance(result, tuple) else (result,)
        return tuple(np.asarray(t.detach().to(wide).cpu().numpy()) for t in res)

    if point.pass_ == "forward":
        return Call(lambda: forward(q, k, v), "torch", outputs)

    dout = torch.from_dlpack(inputs["dout"])
    leaves = tuple(t.detach().requires_grad_(True) for t in (q, k, v))
    if point.pass_ == "backward":
        out = forward(*leaves)          # the graph is kept; only the backward is measured
        return Call(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True),
                    "torch", outputs)

    def both():
        o = forward(*leaves)
        return (o,) + torch.autograd.grad(o, leaves, dout)
    return Call(both, "torch", outputs)
