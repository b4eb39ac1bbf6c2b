#!/usr/bin/env python3
"""Drives the waiting room's page in headless Chromium (Debian's, through
Playwright) as buyers would: each opens /queue/{activity}/{sku}?userId=N and
the page joins (solving the proof of work), waits, places the order with
its admission token and follows it. Checks each page ends reading what the
case expects, saves a screenshot of each, and prints what each page showed
as one JSON line. Exit 0 when all held.

Usage: queue_page.py URL ACTIVITY SKU SCREENSHOT-PREFIX USER:EXPECTED...
  (EXPECTED: text the page's state must come to read, e.g. "You bought it")
"""

import json
import shutil
import sys

from playwright.sync_api import sync_playwright

url, activity, sku, prefix = sys.argv[1:5]
cases = [case.split(":", 1) for case in sys.argv[5:]]
seen = []

with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    failed = None
    for user, expected in cases:
        page = browser.new_page(viewport={"width": 900, "height": 700})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{url}/queue/{activity}/{sku}?userId={user}")
        state = page.locator('[data-testid="state"]')
        try:
            state.filter(has_text=expected).wait_for(timeout=30_000)
        except Exception:
            failed = failed or f"user {user}: the page did not come to read '{expected}'"
        page.screenshot(path=f"{prefix}-{user}.png", full_page=True)
        seen.append({
            "user": user,
            "state": state.inner_text(),
            "order": page.locator('[data-testid="order"]').inner_text(),
            "note": page.locator('[data-testid="note"]').inner_text(),
            "commitment": page.locator('[data-testid="commitment"]').inner_text(),
            "errors": errors,
        })
        if errors:
            failed = failed or f"user {user}: script errors {errors}"
        page.close()
    browser.close()

print(json.dumps({"failed": failed, "pages": seen}))
sys.exit(1 if failed else 0)
