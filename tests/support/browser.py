"""Debian's Chromium (never a downloaded build) with the project's flags, through Playwright."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def launch(playwright):
    """A headless ``/usr/bin/chromium`` Browser from a started (sync or async) Playwright."""
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
    )


def page_errors(page, *, console: bool = False, ignore=None) -> list[str]:
    """A list that fills with the page's uncaught errors (and ``console.error`` lines if
    ``console``), but for those ``ignore(error)`` accepts."""
    errors: list[str] = []

    def on_error(error) -> None:
        if ignore is None or not ignore(error):
            errors.append(str(error))

    page.on("pageerror", on_error)
    if console:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors
