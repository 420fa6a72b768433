"""The `browser` fixture's offline guard: non-local requests are aborted and recorded."""

from __future__ import annotations

from conftest import OfflineBrowser


def test_non_local_requests_are_aborted_and_recorded(chromium, static_server):
    blocked: list[str] = []
    context = OfflineBrowser(chromium, blocked).new_context()
    try:
        page = context.new_page()
        page.goto(f"{static_server}/tests/browser/harness.html")  # local: goes through
        assert blocked == []
        failed = page.evaluate(
            """async () => {
                const out = [];
                const urls = ['https://cdn.jsdelivr.net/npm/x.js', 'http://localhost.example/'];
                for (const url of urls) {
                    try { await fetch(url); out.push('loaded ' + url); }
                    catch (e) { out.push('failed ' + url); }
                }
                await new Promise((resolve) => {
                    const ws = new WebSocket('wss://example.com/socket');
                    ws.onclose = ws.onerror = resolve;
                });
                return out;
            }"""
        )
        assert failed == [
            "failed https://cdn.jsdelivr.net/npm/x.js",
            "failed http://localhost.example/",
        ]
        assert blocked[:2] == [
            "GET https://cdn.jsdelivr.net/npm/x.js",
            "GET http://localhost.example/",
        ]
        assert blocked[2:] == ["WebSocket wss://example.com/socket"]
    finally:
        context.close()
