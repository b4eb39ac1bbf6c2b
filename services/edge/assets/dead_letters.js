// The dead-letters page: figures, the records a filter takes, a dry run
// and then the run itself (POST /admin/dead-letters/runs), the audit trail.
// A run carries a one-time key made when its dry run ended: a second click,
// or the form sent again, is answered with the same run.
"use strict";

const $ = (id) => document.getElementById(id);
const testid = (name) => document.querySelector(`[data-testid="${name}"]`);
let armed = null; // {kind, filter, submission} once a dry run showed what a run would do

function filter() {
  const form = new FormData($("filter"));
  const chosen = {};
  for (const key of ["sale", "reason", "since"]) {
    const value = (form.get(key) || "").trim();
    if (value) chosen[key] = value;
  }
  return chosen;
}

function oneTimeKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message || "";
}

async function call(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    if (response.status === 401) window.location.assign("/admin/dead-letters");
    throw new Error(`${response.status} ${body.code || ""}: ${body.message || ""}`);
  }
  return body;
}

function counts(map) {
  const entries = Object.entries(map || {});
  return entries.length ? entries.map(([k, v]) => `${k} ${v}`).join(", ") : "none";
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    td.textContent = cell === null || cell === undefined ? "" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}

async function refresh() {
  showError("");
  const chosen = filter();
  const query = new URLSearchParams(chosen);
  try {
    const stats = await call(`/admin/dead-letters/stats?${new URLSearchParams(
      Object.fromEntries(Object.entries(chosen).filter(([k]) => k !== "reason")))}`);
    testid("stats-records").textContent = stats.records;
    testid("stats-not-indexed").textContent =
      stats.notIndexedYet === null || stats.notIndexedYet === undefined ? "unknown (the broker did not answer)" : stats.notIndexedYet;
    testid("stats-by-reason").textContent = counts(stats.byReason);
    testid("stats-by-sale").textContent = counts(stats.bySale);
    testid("stats-acted").textContent = `${stats.replayed} / ${stats.redriven} / ${stats.parked}`;
    const records = await call(`/admin/dead-letters/records?${query}`);
    $("records").replaceChildren(...records.map((r) => row([r.position, r.reason, r.orderId, r.failedAt, r.error])));
    testid("records-count").textContent = `${records.length} record(s)`;
    await auditTrail();
  } catch (error) {
    showError(error.message);
  }
}

async function auditTrail() {
  const runs = await call("/admin/dead-letters/runs");
  $("runs").replaceChildren(...runs.map((r) => row([
    r.runId, r.dryRun ? `${r.kind} (dry run)` : r.kind, r.operator, r.startedAt, r.sent, r.skipped, r.refused, r.note,
  ])));
}

function showRun(body) {
  const run = body.run;
  const what = run.kind === "redrive" ? "placed" : "sent";
  testid("run-summary").textContent =
    `run ${run.runId}${run.dryRun ? " (dry run)" : ""} by ${run.operator}: ${run.sent} ${what}, ` +
    `${run.skipped} skipped, ${run.refused} refused${run.error ? ` — stopped: ${run.error}` : ""}`;
  $("outcomes").replaceChildren(...body.records.map((r) => row([
    r.position, r.reason, r.orderId, r.outcome,
    r.newOrderId && !r.detail.includes(r.newOrderId) ? `${r.detail} (new order ${r.newOrderId})` : r.detail,
  ])));
}

async function run(dryRun) {
  showError("");
  const kind = new FormData($("act")).get("kind");
  const note = (new FormData($("act")).get("note") || "").trim();
  if (!dryRun && !note) {
    showError("a note is required: say why");
    return;
  }
  const request = dryRun
    ? { kind, filter: filter(), dryRun: true, note: note || "dry run from the dashboard", submission: oneTimeKey() }
    : { kind: armed.kind, filter: armed.filter, dryRun: false, note, submission: armed.submission };
  $("run").disabled = true;
  $("dry-run").disabled = true;
  try {
    const body = await call("/admin/dead-letters/runs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
    showRun(body);
    // A dry run arms the run of what it showed; a run spends its key.
    armed = dryRun ? { kind, filter: request.filter, submission: oneTimeKey() } : null;
    await refresh();
  } catch (error) {
    showError(error.message);
    armed = dryRun ? null : armed;
  } finally {
    $("dry-run").disabled = false;
    $("run").disabled = armed === null;
  }
}

$("filter").addEventListener("submit", (event) => {
  event.preventDefault();
  armed = null;
  $("run").disabled = true;
  refresh();
});
testid("kind").addEventListener("change", () => {
  armed = null;
  $("run").disabled = true;
});
$("dry-run").addEventListener("click", () => run(true));
$("act").addEventListener("submit", (event) => {
  event.preventDefault();
  if (armed) run(false);
});
refresh();
