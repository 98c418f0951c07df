/**
 * The live dashboard `GET /` serves: one self-contained page (no external assets) that polls
 * `status` every second and draws throughput, lag, counters, partitions and the stage graph.
 * Every value from /status goes into the page as text (textContent / SVG attributes), never as
 * markup. The URL is relative, so the page also works behind a path prefix (kubectl proxy).
 *
 * The script avoids template literals and backslashes: it lives inside this String.raw.
 */
export const DASHBOARD_HTML = String.raw`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fv-streams</title>
<style>
  :root { --bg: #0f1419; --panel: #182029; --line: #2a3642; --text: #d8dee6; --dim: #8695a4; --accent: #4fb3ff; --ok: #3fb950; --warn: #d29922; --bad: #f85149; }
  @media (prefers-color-scheme: light) { :root { --bg: #f6f8fa; --panel: #fff; --line: #d0d7de; --text: #1f2328; --dim: #59636e; --accent: #0969da; } }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--text); }
  header { display: flex; flex-wrap: wrap; gap: 12px; align-items: baseline; padding: 14px 20px; border-bottom: 1px solid var(--line); }
  h1 { font-size: 18px; margin: 0; }
  h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .06em; color: var(--dim); margin: 0 0 8px; font-weight: 600; }
  main { padding: 16px 20px; display: grid; gap: 16px; }
  .badge { padding: 2px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; background: var(--line); }
  .RUNNING { background: var(--ok); color: #fff; } .STARTING { background: var(--warn); color: #fff; } .FAILED { background: var(--bad); color: #fff; }
  .dim { color: var(--dim); }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(160px, 1fr)); gap: 12px; }
  .card, .panel { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px; }
  .card .v { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
  .card .k { color: var(--dim); font-size: 12px; }
  .card svg { display: block; width: 100%; height: 36px; color: var(--accent); margin-top: 4px; }
  .wide { grid-column: span 2; }
  .two { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 16px; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); }
  th { color: var(--dim); font-weight: 500; font-size: 12px; }
  td.n, th.n { text-align: right; }
  .bar { position: relative; height: 14px; min-width: 140px; background: var(--line); border-radius: 7px; overflow: hidden; }
  .bar span { position: absolute; inset: 0 auto 0 0; background: var(--accent); }
  .bar em { position: relative; font-size: 11px; font-style: normal; padding: 0 6px; line-height: 14px; color: var(--text); }
  #error { background: var(--bad); color: #fff; padding: 10px 20px; white-space: pre-wrap; }
  #graph { width: 100%; overflow-x: auto; }
  #graph svg text { fill: var(--text); font-size: 12px; }
  #graph .ds rect { fill: var(--bg); stroke: var(--accent); }
  #graph .st rect { fill: var(--panel); stroke: var(--dim); }
  #graph .edge { fill: none; stroke: var(--dim); stroke-width: 1.5; }
  #graph .sub { fill: var(--dim); }
  #state-form { display: flex; flex-wrap: wrap; gap: 8px; margin-bottom: 8px; }
  #state-form input, #state-form select, #state-form button { font: inherit; color: var(--text); background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 4px 8px; }
  #state-key { min-width: 240px; }
  #state-value { margin: 8px 0 0; padding: 8px; background: var(--bg); border-radius: 6px; overflow-x: auto; font-size: 12px; }
</style>
</head>
<body>
<header>
  <h1 id="title">fv-streams</h1>
  <span id="status" class="badge">…</span>
  <span id="meta" class="dim"></span>
  <span id="conn" class="dim"></span>
</header>
<div id="error" hidden></div>
<main>
  <section class="cards">
    <div class="card wide"><div class="k">consumed / s</div><div class="v" id="in-rate">–</div><svg id="in-spark" viewBox="0 0 240 36" preserveAspectRatio="none"></svg></div>
    <div class="card wide"><div class="k">emitted / s</div><div class="v" id="out-rate">–</div><svg id="out-spark" viewBox="0 0 240 36" preserveAspectRatio="none"></svg></div>
    <div class="card wide"><div class="k">lag (records behind, all owned partitions)</div><div class="v" id="lag">–</div><svg id="lag-spark" viewBox="0 0 240 36" preserveAspectRatio="none"></svg></div>
    <div class="card"><div class="k">consumed</div><div class="v" id="consumed">–</div></div>
    <div class="card"><div class="k">emitted</div><div class="v" id="emitted">–</div></div>
    <div class="card"><div class="k">dropped (filtered)</div><div class="v" id="dropped">–</div></div>
    <div class="card"><div class="k">poison</div><div class="v" id="poison">–</div></div>
    <div class="card"><div class="k">dead-lettered</div><div class="v" id="deadLettered">–</div></div>
    <div class="card"><div class="k">commits</div><div class="v" id="commits">–</div></div>
    <div class="card"><div class="k">consumers</div><div class="v" id="consumers">–</div></div>
    <div class="card"><div class="k">partitions owned</div><div class="v" id="owned">–</div></div>
  </section>
  <section class="panel"><h2>Stages</h2><div id="graph"></div></section>
  <section class="two">
    <div class="panel"><h2>Partitions</h2><table><thead><tr><th>topic</th><th class="n">partition</th><th class="n">offset</th><th class="n">lag</th><th class="n">state</th><th></th></tr></thead><tbody id="partitions"></tbody></table></div>
    <div class="panel"><h2>Poison by reason</h2><table><thead><tr><th>reason</th><th class="n">rows</th></tr></thead><tbody id="reasons"></tbody></table></div>
  </section>
  <section class="panel" id="state-panel" hidden><h2>State</h2>
    <form id="state-form"><select id="state-stage" aria-label="stage"></select><input id="state-key" aria-label="key" placeholder="key: AAPL, 42, or [&quot;AAPL&quot;,&quot;XNAS&quot;]"><button type="submit">watch</button></form>
    <div id="state-meta" class="dim"></div>
    <pre id="state-value"></pre>
  </section>
</main>
<script>
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var KEEP = 120;
  var history = [];
  function $(id) { return document.getElementById(id); }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }
  function num(n) { return typeof n === "number" && isFinite(n) ? n : undefined; }
  function fmt(n) {
    n = num(n);
    if (n === undefined) return "–";
    var a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (n / 1e3).toFixed(1) + "k";
    return Math.round(n).toLocaleString("en-US");
  }
  function bytes(n) {
    n = num(n);
    if (n === undefined) return "–";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n = n / 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }
  function ago(iso) {
    var t = Date.parse(iso);
    if (!isFinite(t)) return "";
    var s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 120) return s + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  /** A restore under way: a progress bar with records read of the changelog's end, the rate and an ETA. */
  function restoreCell(r) {
    var td = el("td"), bar = el("div", undefined, "bar"), fill = el("span");
    var share = r.total > 0 ? Math.min(1, r.read / r.total) : 1;
    fill.style.width = Math.round(share * 100) + "%";
    bar.appendChild(fill);
    bar.appendChild(el("em", "restoring " + Math.floor(share * 100) + "% · " + fmt(r.read) + " / " + fmt(r.total) + (r.rate ? " · " + fmt(r.rate) + "/s" : "") + (r.etaSeconds !== null && r.etaSeconds !== undefined ? " · " + r.etaSeconds + " s left" : "")));
    bar.title = (r.fromStore ? fmt(r.fromStore) + " entries from the local store, then " : "") + "changelog records read of those to read";
    td.appendChild(bar);
    return td;
  }
  function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
  function node(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, value, cls, anchor) {
    var t = node("text", { x: x, y: y }, parent);
    if (cls) t.setAttribute("class", cls);
    if (anchor) t.setAttribute("text-anchor", anchor);
    var s = String(value);
    t.textContent = s.length > 30 ? s.slice(0, 29) + "…" : s;
    if (s.length > 30) node("title", {}, t).textContent = s;
    return t;
  }

  function sparkline(id, values) {
    var svg = $(id);
    clear(svg);
    if (values.length < 2) return;
    var max = 1;
    values.forEach(function (v) { if (v > max) max = v; });
    var step = 240 / (KEEP - 1), x0 = 240 - (values.length - 1) * step;
    var points = values.map(function (v, i) { return (x0 + i * step).toFixed(1) + "," + (35 - (v / max) * 33).toFixed(1); }).join(" ");
    node("polyline", { points: points, fill: "none", stroke: "currentColor", "stroke-width": 1.5, "vector-effect": "non-scaling-stroke" }, svg);
  }

  function rates(key) {
    var out = [];
    for (var i = 1; i < history.length; i++) {
      var a = history[i - 1], b = history[i], dt = (b.t - a.t) / 1000;
      out.push(dt > 0 && b[key] >= a[key] ? (b[key] - a[key]) / dt : 0);
    }
    return out;
  }

  function stageSteps(stage) {
    return (stage.steps || []).map(function (s) { return typeof s === "string" ? s : (s && s.op) || "?"; });
  }

  // Layered layout: source datasets in column 0, a stage one column right of its rightmost
  // input, its output one column right of the stage.
  function drawGraph(stages, live) {
    var box = $("graph");
    clear(box);
    if (!stages || !stages.length) { box.appendChild(el("div", "The build record lists no stages yet.", "dim")); return; }
    var producer = {}, stageCol = {}, visiting = {};
    stages.forEach(function (s) { producer[s.output] = s; });
    function dsCol(name) { var p = producer[name]; return p ? colOf(p) + 1 : 0; }
    function colOf(s) {
      if (stageCol[s.index] !== undefined) return stageCol[s.index];
      if (visiting[s.index]) return 1;
      visiting[s.index] = true;
      var c = 1;
      (s.inputs || []).forEach(function (d) { c = Math.max(c, dsCol(d) + 1); });
      stageCol[s.index] = c;
      return c;
    }
    var nodes = {}, columns = [];
    function place(key, col, kind, payload) {
      if (nodes[key]) return nodes[key];
      var n = { key: key, col: col, kind: kind, payload: payload };
      n.h = kind === "ds" ? 34 : 40 + 17 * Math.max(1, stageSteps(payload).length) + (payload.live ? 17 : 0);
      (columns[col] = columns[col] || []).push(n);
      nodes[key] = n;
      return n;
    }
    var liveBy = {};
    (live || []).forEach(function (s) { liveBy[s.index] = s; });
    var edges = [];
    stages.forEach(function (s) {
      var st = place("s" + s.index, colOf(s), "st", { stage: s, live: liveBy[s.index] });
      (s.inputs || []).forEach(function (d) { edges.push([place("d" + d, dsCol(d), "ds", d), st]); });
      edges.push([st, place("d" + s.output, colOf(s) + 1, "ds", s.output)]);
    });
    var W = 190, GAP_X = 70, GAP_Y = 18, height = 0;
    columns.forEach(function (col, c) {
      var y = 10;
      (col || []).forEach(function (n) { n.x = 10 + c * (W + GAP_X); n.y = y; y += n.h + GAP_Y; });
      height = Math.max(height, y);
    });
    var svg = node("svg", { width: 20 + columns.length * (W + GAP_X) - GAP_X, height: height, role: "img" }, box);
    node("title", {}, svg).textContent = "stage graph";
    var marker = node("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, node("defs", {}, svg));
    node("path", { d: "M0,0 L10,5 L0,10 z", fill: "currentColor", class: "sub" }, marker);
    edges.forEach(function (e) {
      var a = e[0], b = e[1], x1 = a.x + W, y1 = a.y + a.h / 2, x2 = b.x - 2, y2 = b.y + b.h / 2, mid = (x1 + x2) / 2;
      node("path", { d: "M" + x1 + "," + y1 + " C" + mid + "," + y1 + " " + mid + "," + y2 + " " + x2 + "," + y2, class: "edge", "marker-end": "url(#arrow)" }, svg);
    });
    Object.keys(nodes).forEach(function (k) {
      var n = nodes[k], g = node("g", { class: n.kind }, svg);
      node("rect", { x: n.x, y: n.y, width: W, height: n.h, rx: n.kind === "ds" ? 17 : 6 }, g);
      if (n.kind === "ds") { text(g, n.x + W / 2, n.y + 21, n.payload, null, "middle"); return; }
      var s = n.payload.stage, steps = stageSteps(s), y = n.y + 20;
      text(g, n.x + 10, y, "stage " + (s.index + 1));
      (steps.length ? steps : ["pass-through"]).forEach(function (op, i) { y += 17; text(g, n.x + 16, y, (i + 1) + ". " + op, "sub"); });
      var l = n.payload.live;
      if (l) { y += 17; text(g, n.x + 10, y, "in " + fmt(l.consumed) + " · out " + fmt(l.emitted) + " · poison " + fmt(l.poison), "sub"); }
    });
  }

  function render(status) {
    // The state panel's stages, once the stream runs (before, /state has nothing to say).
    if (status.record && status.record.status === "RUNNING" && !loadStages.asked) { loadStages.asked = true; loadStages(); }
    var r = status.record || {}, m = r.metrics || {};
    document.title = (r.pipeline || "fv-streams") + " · " + (r.status || "?");
    $("title").textContent = r.pipeline || "fv-streams";
    $("status").textContent = r.status || "?";
    $("status").className = "badge " + (r.status || "");
    $("meta").textContent = "build " + (r.id || "?") + (r.startedAt ? " · up " + ago(r.startedAt) : "") + (r.updatedAt ? " · record " + ago(r.updatedAt) + " ago" : "");
    var err = $("error");
    err.hidden = !r.error;
    err.textContent = r.error || "";
    ["consumed", "emitted", "dropped", "poison", "deadLettered", "commits", "consumers"].forEach(function (k) { $(k).textContent = fmt(m[k]); });

    var partitions = (status.partitions && status.partitions.length ? status.partitions : m.partitions || []).slice();
    partitions.sort(function (a, b) { return a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition; });
    $("owned").textContent = fmt(partitions.length);
    var lag, body = $("partitions");
    clear(body);
    partitions.forEach(function (p) {
      if (num(p.lag) !== undefined) lag = (lag || 0) + p.lag;
      var tr = el("tr");
      tr.appendChild(el("td", p.topic));
      tr.appendChild(el("td", String(p.partition), "n"));
      tr.appendChild(el("td", fmt(p.offset), "n"));
      tr.appendChild(el("td", fmt(p.lag), "n"));
      var stateCell = el("td", bytes(p.stateBytes), "n");
      // The local store behind it: keys and bytes on disk, and how often a lookup found its entity in memory.
      if (num(p.storeKeys) !== undefined) stateCell.title = fmt(p.storeKeys) + " keys on disk (" + bytes(p.storeBytesOnDisk) + ")" + (num(p.cacheHitRate) !== undefined ? ", " + fmt(p.cacheKeys) + " in memory, cache hit rate " + (p.cacheHitRate * 100).toFixed(1) + "%" : "");
      tr.appendChild(stateCell);
      tr.appendChild(p.restore ? restoreCell(p.restore) : el("td", p.state || "", "dim"));
      body.appendChild(tr);
    });
    if (!partitions.length) { var none = el("tr"); var td = el("td", "no partitions assigned", "dim"); td.colSpan = 6; none.appendChild(td); body.appendChild(none); }

    var reasons = $("reasons");
    clear(reasons);
    Object.keys(m.poisonByReason || {}).sort().forEach(function (k) {
      var tr = el("tr");
      tr.appendChild(el("td", k));
      tr.appendChild(el("td", fmt(m.poisonByReason[k]), "n"));
      reasons.appendChild(tr);
    });

    history.push({ t: Date.now(), consumed: num(m.consumed) || 0, emitted: num(m.emitted) || 0, lag: lag || 0 });
    if (history.length > KEEP) history.shift();
    var inRates = rates("consumed"), outRates = rates("emitted");
    $("in-rate").textContent = fmt(inRates.length ? inRates[inRates.length - 1] : m.recordsPerSecond);
    $("out-rate").textContent = fmt(outRates.length ? outRates[outRates.length - 1] : undefined);
    $("lag").textContent = fmt(lag);
    sparkline("in-spark", inRates);
    sparkline("out-spark", outRates);
    sparkline("lag-spark", history.map(function (h) { return h.lag; }));
    var shape = JSON.stringify(r.stages || []) + JSON.stringify(status.stages || []);
    if (shape !== render.shape) { render.shape = shape; drawGraph(r.stages, status.stages); }
  }

  // Opened as /?token=… when the server has STREAM_ADMIN_TOKEN: the polls send it as a bearer token.
  var token = new URLSearchParams(location.search).get("token");
  function poll() {
    fetch("status", { cache: "no-store", headers: token ? { authorization: "Bearer " + token } : {} })
      .then(function (res) { if (!res.ok) throw new Error("HTTP " + res.status); return res.json(); })
      .then(function (status) { $("conn").textContent = "live"; render(status); })
      .catch(function (e) { $("conn").textContent = "disconnected (" + e.message + "), retrying"; })
      .then(function () { setTimeout(poll, 1000); });
  }
  poll();

  // The state panel: the stateful stages from /state; a key is followed through its watch stream
  // (EventSource sends no headers: the token goes as ?token=).
  var watching;
  function loadStages() {
    fetch("state", { cache: "no-store", headers: token ? { authorization: "Bearer " + token } : {} })
      .then(function (res) { if (!res.ok) throw new Error("HTTP " + res.status); return res.json(); })
      .then(function (state) {
        var select = $("state-stage");
        clear(select);
        (state.stages || []).filter(function (s) { return s.queryable; }).forEach(function (s) {
          var option = el("option", "stage " + s.stage + " · " + s.op + (s.keyColumns.length ? " by " + s.keyColumns.join(", ") : ""));
          option.value = String(s.stage);
          select.appendChild(option);
        });
        $("state-panel").hidden = select.options.length === 0;
      })
      .catch(function () { loadStages.asked = false; });
  }
  $("state-form").addEventListener("submit", function (event) {
    event.preventDefault();
    if (watching) watching.close();
    var key = $("state-key").value.trim();
    if (!key) return;
    $("state-meta").textContent = "watching…";
    $("state-value").textContent = "";
    watching = new EventSource("state/" + $("state-stage").value + "/keys/" + encodeURIComponent(key) + "/watch" + (token ? "?token=" + encodeURIComponent(token) : ""));
    watching.addEventListener("value", function (e) {
      var answer = JSON.parse(e.data);
      $("state-meta").textContent = "partition " + answer.partition + " · position " + answer.position + " · from " + (answer.owner && answer.owner.admin) + (answer.stale ? " · stale" : "") + " · " + new Date().toLocaleTimeString();
      $("state-value").textContent = JSON.stringify(answer.windows !== undefined ? answer.windows : answer.value, null, 2);
    });
    watching.addEventListener("missing", function () { $("state-meta").textContent = "no state for this key (yet)"; $("state-value").textContent = ""; });
    watching.addEventListener("error", function () { $("state-meta").textContent = "the watch stream broke; retrying"; });
  });
})();
</script>
</body>
</html>
`;
