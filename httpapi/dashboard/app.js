// tenure dashboard: polls the serving agent's /v1 API and renders the
// ring, shards, members (from gossip: a killed node shows as suspected
// before the control group commits it), elections, moves and jobs. No
// build step.
"use strict";

const POLL_MS = 1000;
const lastEpoch = new Map(); // shard -> epoch seen on the previous poll

// Members get colors in id order, spread around the hue circle by the
// golden angle so neighbours differ; unknown owners hash to a hue.
let memberOrder = new Map();

function colorOf(owner) {
  if (!owner) return "#39414b";
  let i = memberOrder.get(owner);
  if (i === undefined) {
    let h = 2166136261;
    for (const c of owner) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
    i = h % 1000;
  }
  return `hsl(${(200 + i * 137.508) % 360}, 65%, 62%)`;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.setAttribute("style", v);
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// The API token (read scope), when the agent requires one: open the
// dashboard as /#token=<token> once; it is kept for the tab's session and
// removed from the address bar. A 401 asks for it.
const tokenKey = "tenure-token";
let askedToken = false;
function apiToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(tokenKey, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(tokenKey) || "";
}

async function get(path) {
  const tok = apiToken();
  const r = await fetch(path, { cache: "no-store", headers: tok ? { Authorization: "Bearer " + tok } : {} });
  if (r.status === 401 && !askedToken) {
    askedToken = true;
    const v = window.prompt("This agent requires an API token (read scope):");
    if (v) { sessionStorage.setItem(tokenKey, v.trim()); askedToken = false; }
  }
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

function renderSummary(st, shards) {
  const owned = shards.filter(s => s.state !== "unowned" && s.valid).length;
  document.getElementById("summary").textContent =
    `${st.members.length} members · control leader ${st.control_leader || "none"} · voters ${st.voters.join(", ") || "none"} · ` +
    `${owned}/${shards.length} shards owned · profile ${st.profile}`;
  document.getElementById("served-by").textContent = st.node;
  const h = st.health;
  const hd = document.getElementById("health");
  hd.replaceChildren(el("span", { class: "status-" + h.status, id: "health-status" }, h.status),
    h.reasons && h.reasons.length ? el("span", {}, " — " + h.reasons.join("; ")) : "");
}

// memberState is what the state cell says: gossip's state, or
// "suspected" as soon as the member's heartbeats stop (gossip still says
// alive, the control group has not expired it yet).
function memberState(m) {
  if (m.state === "alive" && m.suspected) {
    const age = m.last_heartbeat ? ` (no heartbeat for ${Math.max(0, (Date.now() - new Date(m.last_heartbeat)) / 1000).toFixed(1)}s)` : "";
    return { cls: "suspect", text: "suspected" + age };
  }
  return { cls: m.state, text: m.state };
}

function leaseText(m) {
  if (!m.live) return "-";
  if (!m.last_heartbeat) return "-";
  return m.lease_remaining_ms > 0 ? (m.lease_remaining_ms / 1000).toFixed(2) + " s" : "expired";
}

// loadText is a member's gossiped load and its hottest shard ("-" when it
// reports none).
function loadText(m) {
  if (m.load === undefined || m.load === null) return "-";
  const hot = (m.hot_shards || [])[0];
  return m.load.toPrecision(3) + (hot ? ` (s${hot.shard}: ${hot.load.toPrecision(3)})` : "");
}

function renderMembers(members, shards) {
  const counts = new Map();
  for (const s of shards) if (s.state !== "unowned" && s.valid) counts.set(s.owner, (counts.get(s.owner) || 0) + 1);
  const tbody = document.querySelector("#members tbody");
  tbody.replaceChildren(...members.map(m => {
    const role = [m.leader ? "leader" : m.voter ? "voter" : "", m.draining ? "draining" : ""].filter(Boolean).join(", ");
    const ms = memberState(m);
    return el("tr", { "data-member": m.id, "data-state": m.suspected ? "suspected" : m.state },
      el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(m.id)}` })),
      el("td", {}, m.id),
      el("td", { class: ms.cls + " member-state" }, ms.text),
      el("td", {}, el("span", { class: "bar" }, el("span", { style: `width:${Math.round(m.health * 100)}%` })), " " + m.health.toFixed(2)),
      el("td", {}, m.live ? "yes" : "no"),
      el("td", { class: "lease" }, leaseText(m)),
      el("td", {}, role || "-"),
      el("td", {}, counts.get(m.id) || 0),
      el("td", { class: "load" }, loadText(m)),
      el("td", {}, m.http_addr ? el("a", { href: `http://${m.http_addr}/`, style: "color:inherit" }, m.http_addr) : "-"));
  }));
  const legend = document.getElementById("legend");
  legend.replaceChildren(...members.map(m =>
    el("span", {}, el("span", { class: "swatch", style: `background:${colorOf(m.id)}` }), " " + m.id + " (" + (counts.get(m.id) || 0) + ")")));
}

function renderRing(shards) {
  const svg = document.getElementById("ring");
  const n = shards.length || 1;
  const R = 100, r = 62;
  // Built as elements, never as markup: an owner id is data (it reaches
  // here from gossip), and innerHTML would run it as HTML.
  const NS = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const parts = [];
  shards.forEach((s, i) => {
    const a0 = (i / n) * 2 * Math.PI - Math.PI / 2, a1 = ((i + 1) / n) * 2 * Math.PI - Math.PI / 2;
    const p = (rad, a) => `${(rad * Math.cos(a)).toFixed(2)},${(rad * Math.sin(a)).toFixed(2)}`;
    const large = a1 - a0 > Math.PI ? 1 : 0;
    const fill = s.state === "unowned" || !s.valid ? "#39414b" : colorOf(s.owner);
    const path = svgEl("path", { d: `M${p(r, a0)} L${p(R, a0)} A${R},${R} 0 ${large} 1 ${p(R, a1)} L${p(r, a1)} A${r},${r} 0 ${large} 0 ${p(r, a0)} Z`, fill });
    path.appendChild(svgEl("title", {}, `shard ${s.shard} · ${s.owner || "unowned"} · epoch ${s.epoch}`));
    parts.push(path);
  });
  parts.push(svgEl("text", { y: 4 }, `${n} shards`));
  svg.replaceChildren(...parts);
  document.getElementById("ring-caption").textContent = "hover a segment for its owner";
}

function renderShards(shards) {
  const grid = document.getElementById("shard-grid");
  const cells = shards.map(s => {
    const cls = ["shard", s.state === "unowned" || !s.valid ? "unowned" : "", s.state === "revoking" ? "revoking" : "", s.fenced ? "fenced" : ""];
    const prev = lastEpoch.get(s.shard);
    if (prev !== undefined && prev !== s.epoch) cls.push("changed");
    lastEpoch.set(s.shard, s.epoch);
    return el("div", {
      class: cls.filter(Boolean).join(" "), style: `background:${colorOf(s.owner)}`,
      "data-shard": s.shard, "data-owner": s.owner, "data-epoch": s.epoch, "data-state": s.state, "data-fenced": s.fenced ? "1" : "0",
      title: `shard ${s.shard}\nowner ${s.owner || "-"}\nepoch ${s.epoch}\nstate ${s.state}${s.fenced ? "\nfenced takeover (S4 waived)" : ""}\n${s.reason || ""}`,
    }, el("div", {}, (s.acting ? "★" : "") + s.shard), el("div", { class: "ep" }, "e" + s.epoch));
  });
  grid.replaceChildren(...cells);
  const tbody = document.querySelector("#shard-table tbody");
  tbody.replaceChildren(...shards.map(s => el("tr", { "data-shard": s.shard, "data-owner": s.owner },
    el("td", {}, s.shard), el("td", {}, s.owner || "-"), el("td", {}, s.epoch), el("td", {}, s.state),
    el("td", {}, s.valid ? "yes" : "no"), el("td", {}, s.fenced ? "yes" : "-"), el("td", {}, s.acting ? s.lease_remaining_ms + " ms" : "-"), el("td", {}, s.reason || "-"))));
}

// unownedFor is, for a grant, how long its shard was unowned before it as
// this node saw it (a failover: from the old owner's lease lapsing), from
// the lapse recorded just before it.
function unownedFor(moves, i) {
  const m = moves[i];
  if (!m.to) return "";
  for (let j = i + 1; j < moves.length; j++) { // older moves
    const p = moves[j];
    if (p.shard !== m.shard) continue;
    if (p.to) return "";
    return ((new Date(m.at) - new Date(p.at)) / 1000).toFixed(2) + " s";
  }
  return "";
}

function renderMoves(moves) {
  const tbody = document.querySelector("#moves tbody");
  tbody.replaceChildren(...moves.slice(0, 50).map((m, i) => el("tr", { "data-cause": m.cause || "" },
    el("td", {}, new Date(m.at).toLocaleTimeString(undefined, { hour12: false }) + "." + String(new Date(m.at).getMilliseconds()).padStart(3, "0")),
    el("td", {}, m.shard), el("td", {}, m.epoch),
    el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(m.from)}` }), " " + (m.from || "-")),
    el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(m.to)}` }), " " + (m.to || "-")),
    el("td", {}, m.reason || "-"), el("td", {}, m.cause || "-"), el("td", {}, unownedFor(moves, i) || "-"))));
}

function renderElections(es) {
  const tbody = document.querySelector("#elections tbody");
  if (!es.length) {
    tbody.replaceChildren(el("tr", {}, el("td", { colSpan: 5, class: "dim" }, "no elections")));
    return;
  }
  tbody.replaceChildren(...es.map(e => el("tr", { "data-election": e.name },
    el("td", {}, e.name), el("td", {}, e.shard),
    el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(e.leader)}` }), " " + (e.leader || "none")),
    el("td", {}, e.epoch), el("td", {}, e.state))));
}

function renderJobs(j) {
  const box = document.getElementById("jobs");
  box.replaceChildren(...Object.keys(j.counts).sort().map(k => el("span", { "data-state": k }, `${k}: ${j.counts[k]}`)));
  const tbody = document.querySelector("#jobs-table tbody");
  const jobs = j.jobs || [];
  if (!jobs.length) {
    tbody.replaceChildren(el("tr", {}, el("td", { colSpan: 7, class: "dim" }, "no jobs")));
    return;
  }
  tbody.replaceChildren(...jobs.map(x => el("tr", { "data-job": x.id, "data-state": x.state },
    el("td", {}, x.id), el("td", {}, x.shard), el("td", {}, x.type), el("td", { class: "job-" + x.state }, x.state),
    el("td", {}, `${x.attempt}/${x.max_attempts}`), el("td", {}, x.owner || "-"), el("td", {}, x.last_error || "-"))));
}

// openJobs is the job counts and the jobs that need an eye — started,
// pending and dead, up to 10 of each (completed ones are only counted).
async function openJobs() {
  const pages = await Promise.all(["started", "pending", "dead"].map(st => get("/v1/jobs?limit=10&state=" + st)));
  return { counts: pages[0].counts, jobs: pages.flatMap(p => p.jobs || []) };
}

async function poll() {
  const conn = document.getElementById("conn");
  try {
    const [st, members, shards, moves, jobs, elections] = await Promise.all([get("/v1/status"), get("/v1/members"), get("/v1/shards"),
      get("/v1/moves"), openJobs(), get("/v1/elections")]);
    memberOrder = new Map(members.map((m, i) => [m.id, i]));
    renderSummary(st, shards);
    renderMembers(members, shards);
    renderElections(elections);
    renderRing(shards);
    renderShards(shards);
    renderMoves(moves);
    renderJobs(jobs);
    conn.className = "conn";
    conn.textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
    document.body.dataset.ready = "true";
  } catch (e) {
    conn.className = "conn bad";
    conn.textContent = "agent not answering: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}

poll();
