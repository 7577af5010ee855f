// The live flow page of contraflow. Hand-written, no dependencies, served by the runtime itself.
//
// Every second (and soon after any runtime event) it reads GET /v1/flows and each flow's
// connectors, and draws each flow as a graph: connectors and pipelines as nodes, channels as
// edges labelled with events/s and depth. Breakers, pauses and back-pressure are colours.
// GET /v1/events (Server-Sent Events) fills the list of recent events.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 150, NODE_H = 44, COL_W = 270, ROW_H = 74, PAD = 12;
const REFRESH_MS = 1000, MAX_EVENTS = 80;
const cards = new Map();  // flow id -> its card's elements
let refreshTimer = null;

function el(tag, attrs = {}, text = null, ns = null) {
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

const svg = (tag, attrs, text = null) => el(tag, attrs, text, SVG);
const fmt = (n) => Number(n).toLocaleString("en-US", { maximumFractionDigits: n < 10 ? 1 : 0 });

async function getJson(path) {
  const reply = await fetch(path, { cache: "no-store" });
  if (!reply.ok) throw new Error(`${path}: ${reply.status}`);
  return reply.json();
}

// -- graph layout: columns by longest path from the sources, rows in order of appearance --

function graphOf(flow, connectors) {
  const nodes = new Map();
  const add = (kind, alias) => {
    const key = `${kind}/${alias}`;
    if (!nodes.has(key)) nodes.set(key, { key, kind, alias, layer: 0 });
    return nodes.get(key);
  };
  for (const c of connectors) Object.assign(add("connector", c.alias), { report: c });
  for (const p of flow.pipelines) add("pipeline", p);
  const edges = [];
  for (const ch of flow.channels) {
    const from = add(ch.source.kind, ch.source.alias);
    for (const r of ch.readers) edges.push({ channel: ch, from, to: add(r.kind, r.alias), port: r.port });
  }
  for (let pass = 0; pass < nodes.size; pass++) {  // longest path; bounded so a cycle cannot loop
    let moved = false;
    for (const e of edges) {
      if (e.from !== e.to && e.to.layer < e.from.layer + 1) { e.to.layer = e.from.layer + 1; moved = true; }
    }
    if (!moved) break;
  }
  const rows = new Map();
  for (const n of nodes.values()) {
    const row = rows.get(n.layer) || 0;
    rows.set(n.layer, row + 1);
    n.x = PAD + n.layer * COL_W;
    n.y = PAD + row * ROW_H;
  }
  return { nodes: [...nodes.values()], edges };
}

function nodeClass(node) {
  const classes = ["node", node.kind];
  const r = node.report;
  if (r) {
    if (r.breaker === "open") classes.push("breaker-open");
    else if (r.status === "paused") classes.push("paused");
    else if (r.held_by.length) classes.push("held");
  }
  return classes.join(" ");
}

function drawNode(node) {
  const r = node.report;
  const g = svg("g", {
    class: nodeClass(node), "data-node": node.alias, "data-kind": node.kind,
    "data-breaker": r ? r.breaker : "none", "data-status": r ? r.status : "",
  });
  g.append(svg("rect", { x: node.x, y: node.y, width: NODE_W, height: NODE_H, rx: 6 }));
  g.append(svg("text", { x: node.x + 8, y: node.y + 17 }, node.alias));
  let sub = node.kind === "pipeline" ? "pipeline" : `${r ? r.kind : "connector"}`;
  if (r && r.breaker === "open") sub = `breaker open: ${r.breaker_reason || ""}`;
  else if (r && r.held_by.length) sub = `held: ${r.held_by[0]}`;
  g.append(svg("text", { x: node.x + 8, y: node.y + 33, class: "sub" }, sub.slice(0, 26)));
  const title = r ? [r.kind, r.status, r.breaker_reason, ...r.held_by].filter(Boolean).join("\n") : node.kind;
  g.append(svg("title", {}, title));
  return g;
}

function drawEdge(edge) {
  const { channel: ch, from, to } = edge;
  const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
  const classes = ["edge"];
  if (ch.backpressure) classes.push("backpressure");
  else if (ch.events_per_s > 0) classes.push("flowing");
  const g = svg("g", {
    class: classes.join(" "), "data-channel": ch.name, "data-to": `${to.kind}/${to.alias}`,
    "data-appended": ch.appended, "data-depth": ch.depth,
  });
  const bend = Math.max(30, (x2 - x1) / 2);
  g.append(svg("path", { d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}` }));
  const mx = x2 - 112, my = y2 - 18;  // above the line beside its reader: fan-out labels do not collide
  g.append(svg("text", { x: mx, y: my, class: "rate" }, `${fmt(ch.events_per_s)}/s · depth ${fmt(ch.depth)}`));
  g.append(svg("text", { x: mx, y: my + 11, class: "total" }, `${fmt(ch.appended)} events`));
  g.append(svg("title", {}, `${ch.name} → ${to.alias}/${edge.port}${ch.backpressure ? " (back-pressure)" : ""}`));
  return g;
}

// -- one card per flow, kept across refreshes so buttons stay put under the pointer --

function cardFor(flowId) {
  let card = cards.get(flowId);
  if (card) return card;
  const root = el("div", { class: "flow", "data-flow": flowId });
  const head = el("div", { class: "flow-head" });
  const title = el("h2", {}, flowId);
  const badge = el("span", { class: "badge" });
  const counts = el("span", { class: "counts" });
  const pause = el("button", { type: "button", "data-action": "pause" }, "Pause");
  const resume = el("button", { type: "button", "data-action": "resume" }, "Resume");
  pause.onclick = () => setStatus(flowId, "paused");
  resume.onclick = () => setStatus(flowId, "running");
  head.append(title, badge, counts, pause, resume);
  const graph = svg("svg", { class: "graph", role: "img", "aria-label": `graph of flow ${flowId}` });
  root.append(head, graph);
  document.getElementById("flows").append(root);
  card = { root, badge, counts, pause, resume, graph };
  cards.set(flowId, card);
  return card;
}

function drawFlow(flow, connectors) {
  const card = cardFor(flow.alias);
  card.badge.textContent = `${flow.status} · ${flow.priority}`;
  card.badge.className = `badge ${flow.status}`;
  card.root.dataset.status = flow.status;
  const appended = flow.channels.filter((c) => c.source.kind === "connector").reduce((s, c) => s + c.appended, 0);
  const depth = flow.channels.reduce((s, c) => s + c.depth, 0);
  card.counts.textContent = `${fmt(appended)} events in · depth ${fmt(depth)}`;
  card.counts.dataset.appended = appended;
  card.pause.disabled = flow.status !== "running";
  card.resume.disabled = flow.status !== "paused";
  const { nodes, edges } = graphOf(flow, connectors);
  const width = Math.max(...nodes.map((n) => n.x + NODE_W), 200) + PAD;
  const height = Math.max(...nodes.map((n) => n.y + NODE_H), 40) + PAD;
  card.graph.setAttribute("viewBox", `0 0 ${width} ${height}`);
  card.graph.style.maxWidth = `${width}px`;
  card.graph.replaceChildren(...edges.map(drawEdge), ...nodes.map(drawNode));
}

async function setStatus(flowId, status) {
  const reply = await fetch(`/v1/flows/${encodeURIComponent(flowId)}`, {
    method: "PATCH", headers: { "content-type": "application/json" }, body: JSON.stringify({ status }),
  });
  if (!reply.ok) alert((await reply.json()).error);
  refreshSoon(0);
}

async function refresh() {
  try {
    const flows = await getJson("/v1/flows");
    const connectors = await Promise.all(
      flows.map((f) => getJson(`/v1/flows/${encodeURIComponent(f.alias)}/connectors`).catch(() => [])));
    flows.forEach((flow, i) => drawFlow(flow, connectors[i]));
    for (const [id, card] of cards) {
      if (!flows.some((f) => f.alias === id)) { card.root.remove(); cards.delete(id); }
    }
    const open = flows.reduce((n, f) => n + Object.values(f.breakers).filter((b) => b.state === "open").length, 0);
    document.getElementById("summary").textContent =
      `${flows.length} flow${flows.length === 1 ? "" : "s"} · ${open} breaker${open === 1 ? "" : "s"} open`;
  } catch (err) {
    document.getElementById("summary").textContent = `runtime not reachable (${err.message})`;
  }
}

function refreshSoon(delay = 150) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(loop, delay);
}

async function loop() {
  clearTimeout(refreshTimer);
  await refresh();
  refreshTimer = setTimeout(loop, REFRESH_MS);
}

// -- recent events --

function describe(e) {
  const skip = new Set(["seq", "ts", "ts_ms", "kind", "flow"]);
  const rest = Object.entries(e).filter(([k]) => !skip.has(k)).map(([k, v]) => `${k}=${v}`).join(" ");
  return `${e.kind}${e.flow ? ` ${e.flow}` : ""} ${rest}`;
}

function showEvent(e) {
  const list = document.getElementById("events");
  const item = el("li", { class: e.kind, "data-kind": e.kind });
  item.append(el("time", { datetime: e.ts }, e.ts.slice(11, 23)), document.createTextNode(describe(e)));
  list.prepend(item);
  while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
}

function listen() {
  const live = document.getElementById("live");
  const source = new EventSource("/v1/events?history=30");
  source.onopen = () => live.classList.add("on");
  source.onerror = () => live.classList.remove("on");  // EventSource reconnects by itself
  source.onmessage = (msg) => {
    showEvent(JSON.parse(msg.data));
    refreshSoon();
  };
}

listen();
loop();
