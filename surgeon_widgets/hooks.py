"""Hook tools: the article's three (``VerboseExecution``, ``FeatureExtractor``,
``gradient_clipper``) and the registry every hook of this package goes through."""

from .engine.hook_tools import FeatureExtractor, GradientClipper, VerboseExecution, gradient_clipper
from .engine.registry import HookRegistry, live_hooks

__all__ = [
    "FeatureExtractor",
    "GradientClipper",
    "HookRegistry",
    "VerboseExecution",
    "gradient_clipper",
    "live_hooks",
]
