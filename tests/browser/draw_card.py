#!/usr/bin/env python3
"""Reads a draw's sale card on the dashboard in headless Chromium (Debian's,
through Playwright), as an operator would: signs in, waits for the card, and
checks it shows the draw's entries, winners and proof (the seed and the
entry list's digest once drawn). Prints what the card showed as one JSON
line. Exit 0 when it showed what was expected.

Usage: draw_card.py URL TOKEN ACTIVITY SKU ENTRIES WINNERS SEED DIGEST
"""

import json
import shutil
import sys
import time

from playwright.sync_api import sync_playwright

url, token, activity, sku, entries, winners, seed, digest = sys.argv[1:9]
sale = f"{activity}-{sku}"


def text(page, testid):
    element = page.query_selector(f'[data-testid="{testid}"]')
    return element.inner_text().strip() if element else None


with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{url}/admin/dashboard")
    page.fill('input[name="name"]', "ops-draw")
    page.fill('input[name="token"]', token)
    page.click('button[type="submit"]')
    page.wait_for_selector('[data-testid="status"]:has-text("updated")', timeout=15_000)
    shown = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        shown = {key: text(page, f"draw-{key}-{sale}") for key in ("entries", "state", "winners", "proof", "room")}
        shown["room"] = text(page, f"room-waiting-{sale}")
        if shown["entries"] == entries and (shown["winners"] or "").startswith(f"{winners} /") \
                and shown["proof"] == f"{seed} / {digest}":
            break
        time.sleep(0.25)
    browser.close()
    print(json.dumps(shown))
    ok = shown["entries"] == entries and shown["proof"] == f"{seed} / {digest}" and shown["room"] is None
    sys.exit(0 if ok else 1)
