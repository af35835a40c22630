"""Machine-tuned CPU routes, apart from the model core.

A linear layer that picks, per shape, the faster of two products on this machine (timed once), and
weight-only int8 inference.
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.cpu.int8 import is_quantized, quantize

# Imported at first use: the core imports plm.cpu.linear alone.
_EXPORTS = dict.fromkeys(("is_quantized", "quantize"), "plm.cpu.int8")

__all__ = ["is_quantized", "quantize"]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
