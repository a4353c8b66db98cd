"""Builders raise kiln.unsupported.Unsupported; this is the name they import."""

from kiln.unsupported import Unsupported

__all__ = ["Unsupported"]
