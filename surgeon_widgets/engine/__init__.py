"""The engine: naming, tracing, Inspect, Extract, hooks. Imports no Jupyter code."""
