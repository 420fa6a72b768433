"""The Explorer widget: a thin traitlets shell over the engine (tree, live stats, figures)."""

from .explorer import Explorer

__all__ = ["Explorer"]
