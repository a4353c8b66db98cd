"""Runs bundles: loading, prefill and decode with a KV cache, sampling.

Never imports builders/: a bundle runs on a machine that never built it.
"""

from runtime.causal_lm import Bundle, BundleError, Generation, load
from runtime.sampling import Sampler

__all__ = ["Bundle", "BundleError", "Generation", "Sampler", "load"]
