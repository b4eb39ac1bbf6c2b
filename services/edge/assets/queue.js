// The waiting room's page: joins (solving the proof of work when the room
// asks one), shows the place and the estimated wait, polls at the
// pollAfterMs the edge says, and once admitted places the order with the
// admission token and follows it to its status. Sold out and closed are
// said plainly.
"use strict";
const activityId = Number(document.body.dataset.activity);
const skuId = Number(document.body.dataset.sku);
const $ = (id) => document.getElementById(id);
const state = document.querySelector('[data-testid="state"]');
let userId = null;

function show(text, kind) {
  state.textContent = text;
  state.className = "state " + (kind || "");
}

function note(text) {
  $("note").textContent = text || "";
}

async function call(method, path, body, headers) {
  const response = await fetch(path, {
    method,
    headers: Object.assign(body ? { "content-type": "application/json" } : {}, headers || {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  let json = null;
  try { json = await response.json(); } catch (e) { json = null; }
  return { status: response.status, json: json || {} };
}

const later = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function sha256Bits(text) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  let bits = 0;
  for (const byte of digest) {
    if (byte === 0) { bits += 8; continue; }
    bits += Math.clz32(byte) - 24;
    break;
  }
  return bits;
}

// A solution whose SHA-256 of "challenge:solution" starts with `bits` zeros.
async function solve(challenge, bits) {
  for (let n = 0; ; n++) {
    if (await sha256Bits(challenge + ":" + n) >= bits) return String(n);
  }
}

async function join() {
  const body = { activityId, skuId, userId };
  let reply = await call("POST", "/api/seckill/queue", body);
  if (reply.status === 403 && reply.json.code === "CHALLENGE_FAILED") {
    show("Checking you are not a robot…");
    const query = `activityId=${activityId}&skuId=${skuId}&userId=${userId}`;
    const asked = await call("GET", `/api/seckill/queue/challenge?${query}`);
    if (asked.status !== 200) return reply;
    const solution = await solve(asked.json.challenge, asked.json.bits);
    reply = await call("POST", "/api/seckill/queue", Object.assign({ challenge: asked.json.challenge, solution }, body));
  }
  return reply;
}

async function follow(orderId) {
  for (;;) {
    const reply = await call("GET", `/api/seckill/order/${encodeURIComponent(orderId)}`);
    const status = reply.json.status;
    if (reply.status === 200 && status !== "QUEUED") {
      $("order").textContent = `Order ${orderId}: ${status}` + (reply.json.reason ? ` (${reply.json.reason})` : "");
      show(status === "FAILED" ? "Your order failed" : "You bought it", status === "FAILED" ? "sold-out" : "bought");
      return;
    }
    $("order").textContent = `Order ${orderId}: being placed…`;
    await later(500);
  }
}

async function buy(token) {
  show("You are in: placing your order…", "admitted");
  const reply = await call("POST", "/api/seckill/order", { activityId, skuId, userId }, { "seckill-admission": token });
  if (reply.status === 202 && reply.json.orderId) return follow(reply.json.orderId);
  if (reply.status === 410) return show("Sold out", "sold-out");
  if (reply.status === 409 && reply.json.orderId) return follow(reply.json.orderId);
  show("Your order was not placed", "sold-out");
  note(reply.json.message || `answered ${reply.status}`);
}

async function run() {
  let reply = await join();
  for (;;) {
    if (reply.status === 403 && reply.json.code === "SALE_NOT_ACTIVE" && reply.json.opensAt) {
      show("The waiting room opens at " + new Date(reply.json.opensAt).toLocaleTimeString());
      await later(Math.max(1000, Date.parse(reply.json.opensAt) - Date.now()));
      reply = await join();
      continue;
    }
    if (reply.status !== 200) {
      show("Could not join", "closed");
      note(reply.json.message || `answered ${reply.status}`);
      if (reply.status === 429 || reply.status === 503) { await later(2000); reply = await join(); continue; }
      return;
    }
    const ticket = reply.json;
    if (ticket.seedCommitment) {
      // Shown to everyone alike; the seed revealed at the start hashes to it.
      $("commitment").textContent = `The draw's seed commitment (SHA-256): ${ticket.seedCommitment}`;
    }
    $("position").textContent = ticket.position ? `Your place in line: ${ticket.position}` : "";
    $("wait").textContent = ticket.waitSeconds != null ? `Estimated wait: about ${ticket.waitSeconds} s` : "";
    if (ticket.status === "ADMITTED") {
      $("position").textContent = "";
      $("wait").textContent = "";
      return buy(ticket.admission);
    }
    if (ticket.status === "CLOSED") return show("The sale is closed", "closed");
    if (ticket.status === "SOLD_OUT") {
      show("Sold out", "sold-out");
      note("If a unit comes back (an order cancelled or left unpaid), the line moves again.");
    } else {
      show(ticket.position ? "You are in line" : "You are in the pre-queue: places are drawn at the start", "waiting");
      note("");
    }
    await later(ticket.pollAfterMs || 1000);
    reply = await call("GET", `/api/seckill/queue/${encodeURIComponent(ticket.ticket)}`);
  }
}

$("who").addEventListener("submit", (event) => {
  event.preventDefault();
  userId = Number($("user").value);
  $("who").hidden = true;
  $("room").hidden = false;
  run().catch((error) => { show("Something went wrong", "closed"); note(String(error)); });
});

const asked = new URLSearchParams(location.search).get("userId");
if (asked) {
  $("user").value = asked;
  $("who").requestSubmit();
}
