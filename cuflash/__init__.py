"""cuflash: exact FlashAttention from NumPy-style Python, on NVIDIA GPUs through CuPy.

FlashAttention keeps every FLOP of attention and removes the memory traffic: the T×S scores live
and die in on-chip memory. NumPy arrays run a CPU twin of the kernels (the executable
specification); CuPy arrays run CUDA kernels compiled at run time by NVRTC.

    >>> import numpy as np, cuflash
    >>> q = k = v = np.random.default_rng(0).standard_normal((2, 97, 64)).astype(np.float32)
    >>> out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    >>> out.shape, lse.shape
    ((2, 97, 64), (2, 97))
"""
from .api import Residuals, VarlenResiduals, attention, attention_backward, attention_vjp
from .varlen import attention_varlen, attention_varlen_backward
from .kvcache import PagedKVCache, attention_with_kvcache
from .mask_mod import MaskMod
from .checks import SUPPORTED_HEAD_DIMS, SeqLens
from .naive import (naive_attention, naive_attention_backward, naive_attention_varlen,
                    naive_attention_varlen_backward)
from .tile import TileConfig, default_tile
from . import distributed  # noqa: F401  (cuflash.distributed: ring attention; imports no CuPy)

__version__ = "0.1.0"

__all__ = ["attention", "attention_backward", "attention_vjp", "Residuals", "MaskMod",
           "attention_varlen", "attention_varlen_backward", "VarlenResiduals", "SeqLens",
           "attention_with_kvcache", "PagedKVCache",
           "naive_attention", "naive_attention_backward",
           "naive_attention_varlen", "naive_attention_varlen_backward",
           "TileConfig", "default_tile", "SUPPORTED_HEAD_DIMS", "__version__"]
