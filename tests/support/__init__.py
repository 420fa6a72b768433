"""Helpers the tests and ``scripts/`` share: Chromium, local servers, Jupyter.

Plain Python (standard library; Playwright only when a browser is launched), no pytest, so
``scripts/screenshot.py`` imports them too. Tests import them as ``support.*`` (pytest puts
``tests/`` on ``sys.path``); a script puts ``tests/`` there itself.
"""
