#!/usr/bin/env python3
"""Drives the dashboard in headless Chromium (Debian's, through Playwright):
signs in through the form, watches the page while a `seckillctl bench` runs
against the sale, and checks what an operator would look for: the figures
move, the stock reaches 0, the verdict reads consistent. Saves a screenshot
and prints what the page showed as one JSON line. Exit 0 when all held.

Usage: dashboard_watch.py URL TOKEN ACTIVITY SKU SCREENSHOT -- BENCH-COMMAND...
"""

import json
import shutil
import subprocess
import sys
import time

from playwright.sync_api import sync_playwright

url, token, activity, sku, screenshot = sys.argv[1:6]
bench = sys.argv[sys.argv.index("--") + 1:]
sale = f"{activity}-{sku}"
seen = {"acceptedPerSecondMax": 0.0, "redisRemaining": [], "verdicts": set()}


def text(page, testid):
    element = page.query_selector(f'[data-testid="{testid}"]')
    return element.inner_text().strip() if element else None


def number(value):
    try:
        return float((value or "").replace(",", ""))
    except ValueError:
        return None


def fail(why, page=None):
    if page is not None:
        page.screenshot(path=screenshot, full_page=True)
    print(json.dumps({"failed": why, **{k: sorted(v) if isinstance(v, set) else v for k, v in seen.items()}}))
    sys.exit(1)


with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/admin/dashboard")
    if not page.query_selector('form[action="/admin/login"] input[name="token"]'):
        fail("the dashboard did not ask to sign in", page)
    page.fill('input[name="name"]', "ops-watch")
    page.fill('input[name="token"]', "not-the-token")
    page.click('button[type="submit"]')
    if "invalid admin token" not in page.content():
        fail("a wrong token was not refused on the form", page)
    page.fill('input[name="name"]', "ops-watch")
    page.fill('input[name="token"]', token)
    page.click('button[type="submit"]')
    page.wait_for_selector('[data-testid="status"]:has-text("updated")', timeout=15_000)
    if token in page.url:
        fail("the token shows in the URL", page)
    cookies = context.cookies()
    session = [c for c in cookies if c["name"] == "seckill_admin"]
    if not session or not session[0]["httpOnly"] or session[0]["sameSite"] != "Strict":
        fail(f"the session cookie is not HttpOnly and SameSite=Strict: {cookies}", page)

    load = subprocess.Popen(bench, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    done = False
    while time.monotonic() < deadline:
        accepted = number(text(page, "rate-QUEUED"))
        if accepted is not None:
            seen["acceptedPerSecondMax"] = max(seen["acceptedPerSecondMax"], accepted)
        remaining = number(text(page, f"redis-remaining-{sale}"))
        if remaining is not None and (not seen["redisRemaining"] or seen["redisRemaining"][-1] != remaining):
            seen["redisRemaining"].append(remaining)
        verdict = text(page, f"verdict-{sale}")
        if verdict:
            seen["verdicts"].add(verdict)
        in_flight = number(text(page, f"in-flight-{sale}"))
        # The sale is in three stock buckets: each is listed, and at the end
        # every one is empty with nothing on its way.
        buckets = text(page, f"buckets-{sale}") or ""
        seen["buckets"] = buckets
        emptied = buckets.count(": 0 left") == 3 and buckets.endswith("; 0 in transit")
        if load.poll() is not None and remaining == 0 and in_flight == 0 and verdict == "consistent" \
                and seen["acceptedPerSecondMax"] > 0 and emptied:
            done = True
            break
        time.sleep(0.25)
    output = load.communicate()[0] if load.poll() is not None else ""
    page.screenshot(path=screenshot, full_page=True)
    if not done:
        load.kill()
        fail(f"the page never showed the sale sold out and consistent (bench exit {load.poll()}: {output[-500:]})", page)
    if len(seen["redisRemaining"]) < 2:
        fail("the stock on the page never moved", page)
    page.click('header button[type="submit"]')
    page.wait_for_selector('input[name="token"]', timeout=10_000)
    page.goto(f"{url}/admin/dashboard")
    if not page.query_selector('input[name="token"]'):
        fail("signing out did not end the session")
    browser.close()

print(json.dumps({k: sorted(v) if isinstance(v, set) else v for k, v in seen.items()}))
