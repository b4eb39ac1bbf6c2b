// The live sale dashboard: figures arrive once a second as Server-Sent
// Events ("figures") from this edge; nothing is fetched from elsewhere.
"use strict";

const OUTCOMES = [
  ["QUEUED", "accepted", "#17803d"],
  ["SOLD_OUT", "sold out", "#8a8f98"],
  ["ALREADY_PURCHASED", "already purchased", "#b7791f"],
  ["RATE_LIMITED", "rate limited", "#6b46c1"],
  ["TRY_AGAIN", "try again", "#b42318"],
];
const HISTORY = 60;
const history = [];

const text = (selector, value) => {
  const element = document.querySelector(`[data-testid="${selector}"]`);
  if (element) element.textContent = value;
};
const number = (value) => (typeof value === "number" ? Math.round(value).toLocaleString("en") : "–");
const failed = (part) => part && typeof part === "object" && "error" in part;

function showEdge(edge) {
  const rates = edge.ratePerSecond || {};
  for (const [code] of OUTCOMES) text(`rate-${code}`, number(rates[code] || 0));
  const ms = (v) => (typeof v === "number" ? `${v.toFixed(1)} ms` : "–");
  text("latency", `${ms(edge.p50Ms)} / ${ms(edge.p99Ms)}`);
  history.push(OUTCOMES.map(([code]) => rates[code] || 0));
  if (history.length > HISTORY) history.shift();
  drawChart();
}

function drawChart() {
  const canvas = document.getElementById("chart");
  const context = canvas.getContext("2d");
  const { width, height } = canvas;
  context.clearRect(0, 0, width, height);
  const top = Math.max(1, ...history.flat());
  context.strokeStyle = "#d0d5db";
  context.strokeRect(0, 0, width, height);
  context.fillStyle = "#56606b";
  context.font = "11px system-ui";
  context.fillText(`${number(top)} /s`, 4, 12);
  OUTCOMES.forEach(([, , colour], series) => {
    context.strokeStyle = colour;
    context.lineWidth = 2;
    context.beginPath();
    // The newest second at the right edge; older ones move left.
    history.forEach((point, i) => {
      const x = width - ((history.length - 1 - i) / (HISTORY - 1)) * width;
      const y = height - (point[series] / top) * (height - 16);
      if (i === 0) context.moveTo(x, y); else context.lineTo(x, y);
    });
    context.stroke();
  });
}

function showPipeline(figures) {
  const pipeline = figures.pipeline || {};
  if (failed(pipeline)) {
    text("order-lag", pipeline.error);
  } else {
    text("order-lag", number(pipeline.orderLag));
    text("compensator-lag", number(pipeline.compensatorLag));
    text("dead-letters", number(pipeline.deadLetters));
  }
  text("parked", failed(figures.parked) ? figures.parked.error : number(figures.parked));
  const sweep = figures.sweeper;
  if (failed(sweep)) text("sweeper", sweep.error);
  else if (!sweep) text("sweeper", "none recorded");
  else {
    const age = Math.max(0, (figures.atMs - sweep.atMs) / 1000);
    text("sweeper", `${age.toFixed(0)} s ago (failed ${sweep.failed}, created ${sweep.created})`);
  }
}

function showDeadLetters(figures) {
  const dlq = figures.deadLetters || {};
  if (failed(dlq)) {
    text("dlq-records", dlq.error);
    return;
  }
  const counts = (byKey) => Object.entries(byKey || {}).map(([key, n]) => `${key} ${number(n)}`).join(", ") || "none";
  text("dlq-records", number(dlq.records));
  text("dlq-by-reason", counts(dlq.byReason));
  text("dlq-by-sale", counts(dlq.bySale));
  text("dlq-span", dlq.oldest ? `${dlq.oldest} / ${dlq.newest}` : "none");
  text("dlq-acted", `${number(dlq.replayed)} / ${number(dlq.redriven)}`);
}

// Orders whose buyer was told 202 and that still ended FAILED, by reason:
// a promise broken by a part failing. It reads 0.
function brokenPromises(sale) {
  const reasons = Object.entries(sale.brokenPromises || {});
  if (reasons.length === 0) return 0;
  return reasons.map(([reason, n]) => `${number(n)} ${reason}`).join(", ");
}

// A card's table: one row per [label, value, key], each value's test id
// its key and the card's id.
function fill(table, rows, id) {
  table.replaceChildren(...rows.map(([label, value, key]) => {
    const row = document.createElement("tr");
    const th = document.createElement("th");
    const td = document.createElement("td");
    th.textContent = label;
    td.textContent = typeof value === "number" ? number(value) : value;
    td.dataset.testid = `${key}-${id}`;
    row.append(th, td);
    return row;
  }));
}

function saleCard(sale) {
  const id = `${sale.activityId}-${sale.skuId}`;
  let card = document.getElementById(`sale-${id}`);
  if (!card) {
    card = document.createElement("article");
    card.className = "sale";
    card.id = `sale-${id}`;
    card.innerHTML = `<h2></h2><table class="figures"></table><p class="verdict"></p><ul class="violations"></ul>`;
    document.getElementById("sales").appendChild(card);
  }
  card.querySelector("h2").textContent = `sale ${sale.activityId}:${sale.skuId} (round ${sale.round})`;
  const rows = [
    ["total stock", sale.totalStock, "total"],
    ["remaining in Redis", sale.redisRemaining, "redis-remaining"],
    ["remaining in PostgreSQL", sale.dbRemaining, "db-remaining"],
    ["orders created", sale.ordersCreated, "created"],
    ["orders paid", sale.ordersPaid, "paid"],
    ["orders cancelled", sale.ordersCancelled, "cancelled"],
    ["orders failed", sale.ordersFailed, "failed"],
    ["202s that ended FAILED", brokenPromises(sale), "broken-promises"],
    ["in flight", sale.ordersInFlight, "in-flight"],
    ["units compensated / written off", `${number(sale.compensated)} / ${number(sale.writtenOff)}`, "compensated"],
    ["records parked", sale.parked, "sale-parked"],
  ];
  // A sale of several units per order: the units the orders hold, and the
  // buyers' limit (never passed).
  if (sale.perUserLimit > 1) {
    rows.push(["units created / paid / in flight", `${number(sale.unitsCreated)} / ${number(sale.unitsPaid)} / ${number(sale.unitsInFlight)}`, "units"]);
    rows.push(["users over their limit", `${number(sale.usersOverLimit)} (limit ${number(sale.perUserLimit)} units)`, "over-limit"]);
  }
  // A sale in stock buckets: each bucket's units left and buyers, and the
  // units on their way from one to another.
  const buckets = (sale.redis && sale.redis.buckets) || [];
  if (buckets.length > 0) {
    const each = buckets.map((b) => `#${b.bucket}: ${number(b.remaining)} left, ${number(b.buyers)} buyers`).join(" · ");
    rows.push(["buckets", `${each}; ${number(sale.redis.inTransit)} in transit`, "buckets"]);
  }
  // A sale sold by a draw: its entries, winners and what became of their
  // rights, and the proof (the seed once drawn, the entry list's digest).
  const draw = sale.draw;
  if (draw) {
    const at = (ms) => new Date(ms).toISOString().replace(".000Z", "Z");
    rows.push(["draw: entries", draw.entries, "draw-entries"]);
    rows.push(["draw", draw.drawn ? `drawn at ${at(draw.drawnAtMs)}` : `at ${at(draw.drawMs)}`, "draw-state"]);
    rows.push(["winners / rights used", `${number(draw.winners)} / ${number(draw.claimed)}`, "draw-winners"]);
    rows.push(["promoted / expired / lost", `${number(draw.promoted)} / ${number(draw.expired)} / ${number(draw.lost)}`, "draw-moves"]);
    rows.push(["waitlisted now", draw.waitlisted, "draw-waitlisted"]);
    rows.push(["outcomes not yet published", draw.eventsUnpublished, "draw-unpublished"]);
    rows.push(["seed commitment", draw.seedCommitment, "draw-commitment"]);
    rows.push(["seed / entry list digest", draw.drawn ? `${draw.seed} / ${draw.entriesDigest}` : "at the draw", "draw-proof"]);
  }
  // A sale behind a waiting room: the line, who is in, the rate, the wait.
  const room = draw ? null : sale.waitingRoom;
  if (room) {
    rows.push(["waiting room: waiting", room.waiting, "room-waiting"]);
    rows.push(["admitted last minute / active", `${number(room.admittedLastMinute)} / ${number(room.active)} of ${number(room.activeBuyers)}`, "room-active"]);
    rows.push(["expired / abandoned", `${number(room.expired)} / ${number(room.abandoned)}`, "room-expired"]);
    const rate = room.admittedLastMinute || room.admitPerMinute;
    const open = !room.soldOut && !room.closed;
    rows.push(["estimated wait at the back", open && rate ? `${Math.ceil((room.waiting * 60) / rate)} s` : "–", "room-wait"]);
    rows.push(["room", room.closed ? "closed" : room.soldOut ? "sold out" : "admitting", "room-state"]);
    rows.push(["shuffle seed", room.seed || "secret until the start", "room-seed"]);
  }
  fill(card.querySelector("table"), rows, id);
  // Reads taken while orders move (Redis, then PostgreSQL) can disagree for
  // an instant: with orders in flight a disagreement is "settling"; the
  // verdict that counts is the one with nothing in flight.
  const settling = !sale.consistent && sale.ordersInFlight > 0;
  const verdict = card.querySelector(".verdict");
  verdict.textContent = sale.consistent ? "consistent" : settling ? `settling (${number(sale.ordersInFlight)} in flight)` : "NOT consistent";
  verdict.className = `verdict ${sale.consistent ? "ok" : settling ? "settling" : "bad"}`;
  verdict.dataset.testid = `verdict-${id}`;
  card.querySelector(".violations").replaceChildren(...(sale.violations || []).map((v) => {
    const item = document.createElement("li");
    item.textContent = v;
    return item;
  }));
}

// A release: one limit per customer across an activity's sizes; its books
// count PostgreSQL's live orders per customer against the takes in Redis.
function releaseCard(release) {
  const id = `${release.activityId}`;
  let card = document.getElementById(`release-${id}`);
  if (!card) {
    card = document.createElement("article");
    card.className = "sale";
    card.id = `release-${id}`;
    card.innerHTML = `<h2></h2><table class="figures"></table><p class="verdict"></p>`;
    document.getElementById("releases").appendChild(card);
  }
  card.querySelector("h2").textContent = `release ${release.activityId} (its sizes share one limit)`;
  const rows = [
    ["limit per customer", release.perCustomerLimit, "release-limit"],
    ["customers with orders", release.customers, "release-customers"],
    ["most one customer holds", release.mostHeld, "release-most"],
    ["units in live orders / taken", `${number(release.unitsInOrders)} / ${number(release.unitsTaken)}`, "release-units"],
    ["takes pending", release.takesPending, "release-pending"],
    ["customers over the limit", release.overLimit.length, "release-over"],
    ["customers undercounted", release.undercounted.length, "release-undercounted"],
  ];
  fill(card.querySelector("table"), rows, id);
  const verdict = card.querySelector(".verdict");
  verdict.textContent = release.consistent ? "consistent" : "NOT consistent";
  verdict.className = `verdict ${release.consistent ? "ok" : "bad"}`;
  verdict.dataset.testid = `release-verdict-${id}`;
}

function show(figures) {
  showEdge(figures.edge || {});
  showPipeline(figures);
  showDeadLetters(figures);
  if (failed(figures.sales)) text("sales", figures.sales.error);
  else (figures.sales || []).forEach(saleCard);
  if (failed(figures.releases)) text("releases", figures.releases.error);
  else (figures.releases || []).forEach(releaseCard);
  text("status", `updated ${new Date(figures.atMs).toLocaleTimeString("en-GB")}`);
}

document.getElementById("legend").replaceChildren(...OUTCOMES.map(([, label, colour]) => {
  const span = document.createElement("span");
  span.textContent = `■ ${label}`;
  span.style.color = colour;
  return span;
}));

const source = new EventSource("/admin/dashboard/events");
source.addEventListener("figures", (event) => show(JSON.parse(event.data)));
source.onerror = () => text("status", "reconnecting…");
