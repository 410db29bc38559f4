// redqueue dashboard: polls two JSON endpoints and draws the page. Data only ever reaches the
// DOM as text (textContent), never as markup, so payloads, keys and errors cannot inject HTML.
"use strict";

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
const CSRF = meta("csrf-token");
const ACTIONS = meta("redqueue-actions") === "on";
const REFRESH = Math.max(500, parseInt(meta("redqueue-refresh"), 10) || 2000);
const $ = (id) => document.getElementById(id);

const state = {
  selected: decodeURIComponent(location.hash.slice(1)) || null,
  token: sessionStorage.getItem("redqueue-token") || "",
  query: "",
  deadStart: 0,
  serverTime: Date.now() / 1000,
  detail: null,
  checked: new Set(),
};

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmtNum(v, digits = 0) {
  if (v === null || v === undefined) return "-";
  return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function fmtSecs(v) {
  if (v === null || v === undefined) return "-";
  if (v < 60) return `${v.toFixed(1)}s`;
  if (v < 3600) return `${(v / 60).toFixed(1)}m`;
  return `${(v / 3600).toFixed(1)}h`;
}

function fmtTime(epoch) {
  if (!epoch) return "-";
  return new Date(epoch * 1000).toLocaleTimeString();
}

function fmtClock(epoch, seconds) {
  const options = seconds
    ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : { hour: "2-digit", minute: "2-digit" };
  return new Date(epoch * 1000).toLocaleTimeString([], options);
}

// When a key may release next, relative to the server's clock at the last refresh.
function fmtEligible(epoch) {
  if (epoch === null || epoch === undefined) return "-";
  const wait = epoch - state.serverTime;
  return wait <= 0 ? "now" : `in ${fmtSecs(wait)}`;
}

function emptyRow(columns, text) {
  const tr = el("tr");
  const td = el("td", text, "muted");
  td.colSpan = columns;
  tr.appendChild(td);
  return tr;
}

function status(text, ok) {
  const box = $("status");
  box.textContent = text || "";
  box.className = text ? (ok ? "ok" : "error") : "";
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

async function act(body) {
  const response = await fetch("api/action", {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      "X-CSRF-Token": CSRF,
      Authorization: `Bearer ${state.token}`,
    },
    body: JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch (e) { data = { error: response.statusText }; }
  if (!response.ok) {
    status(`${response.status}: ${data.error || "refused"}`, false);
    return false;
  }
  status(data.message, true);
  state.checked.clear();
  refresh();
  return true;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function cells(tr, values) {
  for (const [value, cls] of values) tr.appendChild(el("td", value, cls));
  return tr;
}

function renderOverview(data) {
  state.serverTime = data.time;
  $("prefix").textContent = `prefix ${data.prefix}`;
  $("updated").textContent = `updated ${fmtTime(data.time)}`;
  $("warnings").hidden = data.warnings.length === 0;
  fill($("warning-list"), data.warnings.map((w) => el("li", w)));
  const row = (s) => {
    const tr = el("tr");
    tr.dataset.id = s.id;
    if (s.id === state.selected) tr.className = "selected";
    tr.addEventListener("click", () => select(s.id));
    return tr;
  };
  const rows = [];
  const leaseRows = [];
  const uniqueRows = [];
  for (const s of data.structures) {
    const tr = row(s);
    if (s.unique) {
      uniqueRows.push(uniqueRow(tr, s));
    } else if (s.error) {
      tr.appendChild(el("td", s.id));
      const td = el("td", s.error, "error");
      td.colSpan = 10;
      tr.appendChild(td);
      rows.push(tr);
    } else if (s.leases) {
      const l = s.leases;
      leaseRows.push(cells(tr, [[s.id], ...["resources", "free", "leased", "expired", "acquired",
        "released", "reclaimed", "missed"].map((k) => [fmtNum(l[k]), "num"])]));
    } else {
      const f = s.figures;
      rows.push(cells(tr, [[s.id], [fmtNum(f.depth), "num"], [fmtNum(f.in_flight), "num"],
        [fmtNum(f.delayed), "num"], [fmtNum(f.dead), f.dead ? "num bad" : "num"],
        [fmtNum(f.rate_in, 2), "num"], [fmtNum(f.rate_out, 2), "num"],
        [fmtSecs(f.oldest_age), "num"], [fmtSecs(f.drain_eta), "num"],
        [fmtNum(f.workers_needed, 2), "num"], [fmtNum(f.shed), f.shed ? "num warn" : "num"]]));
      // The shed cell's split by reason, on hover.
      tr.lastChild.title = Object.entries(s.counters || {})
        .filter(([k]) => SHED_REASONS.includes(k)).map(([k, v]) => `${k} ${fmtNum(v)}`).join(", ");
      // A stream's groups, a line each under it: lag as depth, pending as in flight.
      for (const g of s.groups || []) {
        const gr = row(s);
        gr.classList.add("group");
        gr.dataset.group = g.group;
        rows.push(cells(gr, [[`group ${g.group}`], [fmtNum(g.lag), "num"], [fmtNum(g.pending), "num"],
          ["-", "num"], [fmtNum(g.dead), g.dead ? "num bad" : "num"], [fmtNum(g.rate_in, 2), "num"],
          [fmtNum(g.rate_out, 2), "num"], [fmtSecs(g.oldest_pending_age), "num"], ["-", "num"],
          ["-", "num"], ["-", "num"]]));
      }
    }
  }
  if (rows.length === 0) rows.push(emptyRow(11, "no pool, bucket or stream registered under this prefix yet"));
  $("unique-section").hidden = uniqueRows.length === 0;
  fill($("unique").tBodies[0], uniqueRows);
  $("leases-section").hidden = leaseRows.length === 0;
  fill($("leases").tBodies[0], leaseRows);
  fill($("structures").tBodies[0], rows);
}

// A unique-lock table's line in the overview.
function uniqueRow(tr, s) {
  const u = s.unique;
  return cells(tr, [[s.id], ...["held", "acquired", "refused", "released", "expired",
    "handed_back"].map((k) => [fmtNum(u[k]), k === "expired" && u[k] ? "num warn" : "num"])]);
}

// A unique-lock table's held keys in its detail: who holds each, since when, until when.
function renderHeld(d) {
  $("held-box").hidden = !d.held;
  if (!d.held) return;
  if (d.held.length === 0) {
    fill($("held").tBodies[0], [emptyRow(7, "no key held")]);
    return;
  }
  fill($("held").tBodies[0], d.held.map((h) => {
    const tr = cells(el("tr"), [[h.key], [h.task_id], [h.who], [h.phase], [fmtTime(h.since)],
      [fmtTime(h.until)], [h.state === "held" ? `held, ${fmtSecs(h.expires_in)} left`
        : "expired (its holder died)", h.state === "held" ? "" : "warn"]]);
    tr.dataset.key = h.key;
    return tr;
  }));
}

// A debouncing pool's or bucket's dedupe ids holding a call: since when, due when, calls merged so far.
function renderDebounced(d) {
  $("debounced-box").hidden = !d.debounced;
  if (!d.debounced) return;
  if (d.debounced.length === 0) {
    fill($("debounced").tBodies[0], [emptyRow(4, "no key waiting")]);
    return;
  }
  fill($("debounced").tBodies[0], d.debounced.map((h) => {
    const tr = cells(el("tr"), [[h.key], [h.since === null ? "-" : fmtTime(h.since)],
      [`${fmtTime(h.due)} (in ${fmtSecs(Math.max(0, h.due_in))})`], [fmtNum(h.calls), "num"]]);
    tr.dataset.key = h.key;
    return tr;
  }));
}

function select(id) {
  state.selected = id;
  state.query = "";
  state.deadStart = 0;
  state.checked.clear();
  $("key-query").value = "";
  history.replaceState(null, "", `#${encodeURIComponent(id)}`);
  refresh();
}

// The stats counters that count shed calls (ops/reading.py's SHED_REASONS, every kind).
const SHED_REASONS = ["rejected", "evicted", "lost", "duplicates", "trimmed"];

// "auto": per second when every minute of the hour with traffic is among its last two (a short
// burst, which the hour's per-minute bars would show as a sliver), else the hour.
function chartSpan(h) {
  const chosen = $("span").value;
  if (chosen !== "auto") return chosen;
  const n = h.minutes_in.length;
  const older = (list) => list.slice(0, Math.max(0, n - 2)).some((v) => v);
  const recent = h.seconds_in.some((v) => v) || h.seconds_out.some((v) => v);
  return recent && !older(h.minutes_in) && !older(h.minutes_out) ? "minute" : "hour";
}

// The chart: bars for items in and out per slot, a line for depth (own scale on the right).
function drawChart(detail) {
  const canvas = $("chart");
  const h = detail.history;
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 900;
  const height = canvas.clientHeight || 220;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  if (!h) { canvas.dataset.points = "0"; return; }
  const hour = chartSpan(h) === "hour";
  const starts = hour ? h.minute_starts : h.second_starts;
  const ins = hour ? h.minutes_in : h.seconds_in;
  const outs = hour ? h.minutes_out : h.seconds_out;
  const depth = hour ? h.minutes_depth : [];
  const pad = { l: 44, r: 44, t: 10, b: 22 };
  const plotW = width - pad.l - pad.r;
  const plotH = height - pad.t - pad.b;
  const maxFlow = Math.max(1, ...ins, ...outs);
  const maxDepth = Math.max(1, ...depth.filter((d) => d !== null));
  const slot = plotW / starts.length;
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#6b7280";
  ctx.strokeStyle = "#e5e7eb";
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + (plotH * i) / 4;
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(width - pad.r, y); ctx.stroke();
    ctx.textAlign = "right";
    ctx.fillText(fmtNum((maxFlow * (4 - i)) / 4, maxFlow < 4 ? 1 : 0), pad.l - 4, y + 4);
    if (depth.length) {
      ctx.textAlign = "left";
      ctx.fillText(fmtNum((maxDepth * (4 - i)) / 4, maxDepth < 4 ? 1 : 0), width - pad.r + 4, y + 4);
    }
  }
  ctx.textAlign = "center";
  for (let i = 0; i < starts.length; i += Math.ceil(starts.length / 6)) {
    ctx.fillText(fmtClock(starts[i], !hour), pad.l + slot * (i + 0.5), height - 6);
  }
  let points = 0;
  const bar = Math.max(1, slot / 2 - 1);
  ins.forEach((v, i) => {
    if (!v) return;
    points++;
    ctx.fillStyle = "#2563eb";
    const bh = (v / maxFlow) * plotH;
    ctx.fillRect(pad.l + slot * i, pad.t + plotH - bh, bar, bh);
  });
  outs.forEach((v, i) => {
    if (!v) return;
    points++;
    ctx.fillStyle = "#10b981";
    const bh = (v / maxFlow) * plotH;
    ctx.fillRect(pad.l + slot * i + bar, pad.t + plotH - bh, bar, bh);
  });
  ctx.strokeStyle = "#f97316";
  ctx.lineWidth = 2;
  ctx.beginPath();
  let pen = false;
  depth.forEach((v, i) => {
    if (v === null) { pen = false; return; }
    points++;
    const x = pad.l + slot * (i + 0.5);
    const y = pad.t + plotH - (v / maxDepth) * plotH;
    if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    pen = true;
  });
  ctx.stroke();
  ctx.lineWidth = 1;
  ctx.fillStyle = "#f97316";
  depth.forEach((v, i) => {  // a dot per reading: a lone minute has no line to draw
    if (v === null) return;
    ctx.beginPath();
    ctx.arc(pad.l + slot * (i + 0.5), pad.t + plotH - (v / maxDepth) * plotH, 2.5, 0, 2 * Math.PI);
    ctx.fill();
  });
  canvas.dataset.points = String(points);
  canvas.dataset.span = hour ? "hour" : "minute";
}

function renderDetail(d) {
  state.detail = d;
  $("detail").hidden = false;
  $("detail-title").textContent = d.id;
  $("detail-settings").textContent = Object.entries(d.settings || {})
    .filter(([, v]) => v !== null).map(([k, v]) => `${k.replace(/_/g, " ")} ${v}`).join(" · ");
  $("drain").hidden = !d.can_drain;
  fill($("counters").tBodies[0], Object.entries(d.counters || d.leases || d.unique || {}).sort()
    .map(([k, v]) => cells(el("tr"), [[k], [fmtNum(v), "num"]])));
  for (const id of ["chart", "legend", "span-label"]) $(id).hidden = !d.history;
  drawChart(d);

  $("keys-box").hidden = !d.keys;
  $("set-rate").hidden = !(ACTIONS && d.kind === "bucket");
  if (d.keys && d.keys.length === 0) {
    fill($("keys").tBodies[0], [emptyRow(6, state.query ? "no key matches" : "no key holds work")]);
  } else if (d.keys) {
    fill($("keys").tBodies[0], d.keys.map((k) => {
      const tr = cells(el("tr"), [[k.key], [fmtNum(k.depth), "num"], [fmtNum(k.in_flight), "num"],
        [fmtNum(k.rate, 3) + (k.custom_rate ? "" : " (default)"), "num"], [fmtNum(k.burst, 1), "num"],
        [fmtEligible(k.next_eligible)]]);
      tr.addEventListener("click", () => { $("rate-key").value = k.key; });
      return tr;
    }));
  }
  $("pause-key").hidden = !(ACTIONS && d.kind === "bucket");
  if (d.noisy) {
    const n = d.noisy, rows = Math.max(n.busiest.length, n.longest_waiting.length, n.paused.length);
    const line = [];
    for (let i = 0; i < rows; i++) {
      const b = n.busiest[i], w = n.longest_waiting[i], p = n.paused[i];
      line.push(cells(el("tr"), [[b ? b.key : ""], [b ? fmtNum(b.releases, 1) : "", "num"],
        [b ? fmtNum(100 * b.share, 1) + " %" : "", "num"], [w ? w.key : ""],
        [w ? fmtSecs(w.oldest_age) : "", "num"], [p ? p.key : ""],
        [p ? (p.until === null ? "resumed by hand" : fmtEligible(p.until)) : ""]]));
    }
    fill($("noisy").tBodies[0], rows ? line : [emptyRow(7, "no release, wait or pause lately")]);
  }
  $("groups-box").hidden = !d.groups;
  if (d.groups) {
    fill($("groups").tBodies[0], d.groups.length === 0 ? [emptyRow(12, "no group has read it yet")]
      : d.groups.map((g) => {
        const tr = cells(el("tr"), [[g.group], [fmtNum(g.lag), "num"], [fmtNum(g.pending), "num"],
          [fmtSecs(g.oldest_pending_age), "num"], [fmtNum(g.rate_in, 2), "num"],
          [fmtNum(g.rate_out, 2), "num"], [fmtNum(g.processed), "num"], [fmtNum(g.redelivered), "num"],
          [fmtNum(g.retried), "num"], [fmtNum(g.dead), g.dead ? "num bad" : "num"],
          [fmtNum(g.missed), g.missed ? "num bad" : "num"], [fmtNum(g.lost), g.lost ? "num bad" : "num"]]);
        tr.dataset.group = g.group;
        return tr;
      }));
  }
  renderHeld(d);
  renderDebounced(d);
  $("resources-box").hidden = !d.resources;
  if (d.resources) {
    fill($("resources").tBodies[0], d.resources.map((r) => cells(el("tr"), [[r.resource], [r.state],
      [r.state === "free" ? "-" : fmtSecs(r.expires_in), "num"], [fmtNum(r.acquisitions), "num"]])));
  }
  const dead = d.dead_letters;
  $("dead-box").hidden = !dead;
  $("dead-actions").hidden = !ACTIONS;
  if (dead && dead.letters.length === 0) {
    $("dead-total").textContent = `(${fmtNum(dead.total)})`;
    fill($("dead").tBodies[0], [emptyRow(6, "no dead letters")]);
  }
  $("dead-pages").hidden = !dead || dead.total <= dead.letters.length;
  if (dead) {
    $("dead-newer").disabled = dead.start === 0;
    $("dead-older").disabled = dead.start + dead.letters.length >= dead.total;
  }
  if (dead && dead.letters.length > 0) {
    const shown = dead.total > dead.letters.length
      ? `, ${fmtNum(dead.start + 1)} to ${fmtNum(dead.start + dead.letters.length)} from the oldest` : "";
    $("dead-total").textContent = `(${fmtNum(dead.total)}${shown})`;
    fill($("dead").tBodies[0], dead.letters.map((letter) => {
      const tr = el("tr");
      const box = el("input");
      box.type = "checkbox";
      box.checked = state.checked.has(letter.ref);
      box.addEventListener("change", () => {
        if (box.checked) state.checked.add(letter.ref); else state.checked.delete(letter.ref);
      });
      const td = el("td");
      if (ACTIONS) td.appendChild(box);  // nothing to select for on a read-only page
      tr.appendChild(td);
      return cells(tr, [[letter.payload, "payload"], [letter.receives, "num"], [letter.error, "error"],
        [letter.key ?? "-"], [fmtTime(letter.at)]]);
    }));
  }
}

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const data = await getJSON("api/overview");
    renderOverview(data);
    if (state.selected && data.structures.some((s) => s.id === state.selected)) {
      const q = encodeURIComponent(state.query);
      const id = encodeURIComponent(state.selected);
      renderDetail(await getJSON(`api/structure?id=${id}&q=${q}&dead_start=${state.deadStart}`));
    } else {
      $("detail").hidden = true;
    }
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
    if ($("status").className === "error" && $("status").dataset.kind === "poll") status("");
  } catch (e) {
    status(`refresh failed: ${e.message}`, false);
    $("status").dataset.kind = "poll";
  } finally {
    busy = false;
  }
}

function dead(action, all) {
  const refs = [...state.checked];
  if (!all && refs.length === 0) { status("select dead letters first", false); return; }
  if (action === "purge" && !confirm(all ? "Purge every dead letter?" : `Purge ${refs.length}?`)) return;
  act(all ? { action, id: state.selected, all: true } : { action, id: state.selected, refs });
}

function setup() {
  $("unlock").hidden = !ACTIONS;
  $("readonly").hidden = ACTIONS;
  $("token").value = state.token;
  $("lockstate").textContent = state.token ? "token set" : "";
  $("unlock").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value;
    sessionStorage.setItem("redqueue-token", state.token);
    $("lockstate").textContent = state.token ? "token set" : "";
  });
  $("requeue-selected").addEventListener("click", () => dead("requeue", false));
  $("purge-selected").addEventListener("click", () => dead("purge", false));
  $("requeue-all").addEventListener("click", () => dead("requeue", true));
  $("purge-all").addEventListener("click", () => dead("purge", true));
  $("dead-newer").addEventListener("click", () => {
    state.deadStart = Math.max(0, state.deadStart - 50);
    refresh();
  });
  $("dead-older").addEventListener("click", () => { state.deadStart += 50; refresh(); });
  $("drain").addEventListener("click", () => act({ action: "drain", id: state.selected }));
  $("span").addEventListener("change", () => state.detail && drawChart(state.detail));
  $("key-search").addEventListener("submit", (e) => {
    e.preventDefault();
    state.query = $("key-query").value;
    refresh();
  });
  $("set-rate").addEventListener("submit", (e) => {
    e.preventDefault();
    const burst = $("rate-burst").value.trim();
    act({ action: "set_rate", id: state.selected, key: $("rate-key").value,
      rate: $("rate-value").value, burst: burst === "" ? null : Number(burst) });
  });
  $("pause-key").addEventListener("submit", (e) => {
    e.preventDefault();
    const secs = $("pause-seconds").value.trim();
    act({ action: "pause", id: state.selected, key: $("pause-name").value,
      seconds: secs === "" ? null : Number(secs) });
  });
  $("resume-button").addEventListener("click", () => {
    act({ action: "resume", id: state.selected, key: $("pause-name").value });
  });
  refresh();
  setInterval(refresh, REFRESH);
}

setup();
