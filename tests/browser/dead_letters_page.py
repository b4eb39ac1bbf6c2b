#!/usr/bin/env python3
"""Drives the dashboard's dead-letters page in headless Chromium (Debian's,
through Playwright) as an operator would after a bad release: signs in with
a name and the admin token, lists a sale's DB_REJECTED dead letters, runs a
dry run of a redrive (every buyer would get their order back), writes a
note and runs it — clicking twice — then sends the same submission once
more from the page, as a form sent again would. Saves a screenshot and
prints one JSON line: the runs' ids and what the page said. Exit 0 when all
held.

Usage: dead_letters_page.py URL TOKEN OPERATOR SALE REASON RECORDS NOTE SCREENSHOT
"""

import json
import shutil
import sys

from playwright.sync_api import sync_playwright

url, token, operator, sale, reason, records, note, screenshot = sys.argv[1:9]
records = int(records)
seen = {}


def text(page, testid):
    return page.inner_text(f'[data-testid="{testid}"]').strip()


def fail(why, page):
    page.screenshot(path=screenshot, full_page=True)
    print(json.dumps({"failed": why, **seen}))
    sys.exit(1)


def wait_text(page, testid, wanted, why):
    try:
        page.wait_for_selector(f'[data-testid="{testid}"]:has-text("{wanted}")', timeout=60_000)
    except Exception:  # noqa: BLE001 (any timeout is the failure named)
        fail(f"{why}: {testid} reads {text(page, testid)!r}", page)


with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
    posted = []
    page.on("request", lambda r: posted.append(r.post_data) if r.method == "POST" and r.url.endswith("/runs") else None)
    page.goto(f"{url}/admin/dead-letters")
    if not page.query_selector('input[name="name"]'):
        fail("the page did not ask to sign in with a name", page)
    page.fill('input[name="name"]', operator)
    page.fill('input[name="token"]', token)
    page.click('button[type="submit"]')
    page.wait_for_url("**/admin/dead-letters", timeout=15_000)
    page.fill('[data-testid="filter-sale"]', sale)
    page.fill('[data-testid="filter-reason"]', reason)
    page.click('[data-testid="list"]')
    wait_text(page, "records-count", f"{records} record(s)", "the list")
    seen["byReason"] = text(page, "stats-by-reason")
    seen["notIndexedYet"] = text(page, "stats-not-indexed")
    if not page.is_disabled('[data-testid="run"]'):
        fail("the run was offered before a dry run", page)
    page.select_option('[data-testid="kind"]', "redrive")
    page.click('[data-testid="dry-run"]')
    wait_text(page, "run-summary", "(dry run)", "the dry run")
    seen["dryRun"] = text(page, "run-summary")
    if f"{records} placed" not in seen["dryRun"]:
        fail("the dry run did not offer every buyer an order", page)
    page.fill('[data-testid="note"]', note)
    page.dblclick('[data-testid="run"]')
    try:
        page.wait_for_function(
            """([operator, records]) => {
                 const said = document.querySelector('[data-testid="run-summary"]').innerText;
                 return !said.includes("(dry run)") && said.includes(`by ${operator}: ${records} placed`);
               }""",
            arg=[operator, records],
            timeout=60_000,
        )
    except Exception:  # noqa: BLE001 (any timeout is the failure named)
        fail(f"the run: run-summary reads {text(page, 'run-summary')!r}", page)
    seen["run"] = text(page, "run-summary")
    seen["outcomes"] = page.locator('[data-testid="outcomes"] tr').count()
    # The same submission again (a form sent twice): the same run answers.
    real = [body for body in posted if body and '"dryRun":false' in body]
    seen["runsPosted"] = len(real)
    again = page.evaluate(
        """async (body) => (await (await fetch('/admin/dead-letters/runs', {method: 'POST',
             headers: {'Content-Type': 'application/json'}, body})).json()).run.runId""",
        real[0],
    )
    seen["again"] = again
    wait_text(page, "runs", note, "the audit trail")
    page.screenshot(path=screenshot, full_page=True)
    browser.close()
print(json.dumps(seen))
