// The live view: fetch /api/status and draw it. Plain DOM and SVG; no libraries, no build.
"use strict";
const STAGES = ["io", "cpu", "gpu", "net"];
const SVG = "http://www.w3.org/2000/svg";
let firstRender = true;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function colour(id) { return `hsl(${(id * 137.508) % 360}, 60%, 70%)`; }
function fmt(x) { return x === null || x === undefined ? "-" : (+x).toFixed(1); }

function drawSummary(s) {
  const box = document.getElementById("summary");
  box.textContent = "";
  box.classList.remove("muted");
  const parts = [["policy", s.policy], ["trace time", fmt(s.now) + " s"], ["rounds", s.rounds],
    ["running", s.counts.running], ["pending", s.counts.pending], ["finished", s.counts.finished],
    // ended without completing: not in the JCT CDF
    ["cancelled", s.counts.cancelled ?? 0], ["failed", s.counts.failed ?? 0],
    ["agents", Object.keys(s.agents).length], ["groups", s.groups.length]];
  for (const [k, v] of parts) box.appendChild(el("span", {}, `${k}: ${v}`));
}

function drawCluster(s) {
  const byGpu = {};  // "n0/3" -> group
  for (const g of s.groups) for (const [node, gpus] of Object.entries(g.slots))
    for (const gpu of gpus) byGpu[`${node}/${gpu}`] = g;
  const box = document.getElementById("cluster");
  const frag = document.createDocumentFragment();
  s.cluster.nodes.forEach((node, i) => {
    // each node its own pool's GPUs and type (a Muri-form spec: all alike, no type)
    const gpus = s.cluster.node_gpus ? s.cluster.node_gpus[i] : s.cluster.gpus_per_node;
    const type = s.cluster.node_types ? s.cluster.node_types[i] : "";
    const row = el("div", { class: "node", "data-node": node, "data-gpus": gpus });
    const online = node in s.agents;
    row.appendChild(el("span", { class: "node-name" + (online ? "" : " muted") }, node));
    if (type) row.appendChild(el("span", { class: "node-type", title: `${node}'s GPU type` }, type));
    for (let gpu = 0; gpu < gpus; gpu++) {
      const g = byGpu[`${node}/${gpu}`];
      const cell = el("div", { class: "gpu", title: `${node} GPU ${gpu}${type ? " (" + type + ")" : ""}` },
                      g ? g.members.join("→") : "");
      if (g) { cell.style.background = colour(g.members[0]); cell.setAttribute("data-group", g.members.join("-")); }
      row.appendChild(cell);
    }
    frag.appendChild(row);
  });
  box.replaceChildren(frag);
}

function drawGroups(s) {
  const box = document.getElementById("groups");
  const frag = document.createDocumentFragment();
  if (!s.groups.length) frag.appendChild(el("div", { class: "muted" }, "no group running"));
  const W = 600, H = 14, L = 34;
  for (const g of s.groups) {
    const div = el("div", { class: "group", "data-members": g.members.join("-") });
    const where = Object.entries(g.slots).map(([n, gs]) => `${n}:${gs.join(",")}`).join(" ");
    const title = el("div", {}, "group ");
    g.members.forEach((j, i) => {
      if (i) title.appendChild(document.createTextNode(" → "));
      const tag = el("span", { class: "job-tag" }, `job ${j}`);
      tag.style.background = colour(j);
      title.appendChild(tag);
    });
    const held = g.gpu_mem_gb ? ` · ${(+g.gpu_mem_gb).toFixed(1)} GB per GPU` : "";
    title.appendChild(document.createTextNode(
      ` · ${where}${held} · iteration ${(+g.tt).toFixed(3)} s · strip: last ${(+g.window).toFixed(2)} s, ` +
      (g.occupancy_source === "measured" ? `measured at ${g.measured_on}'s gate` : "model (3 periods)")));
    title.appendChild(el("span", { class: "occupancy-source" }, ` [${g.occupancy_source || "model"}]`));
    div.appendChild(title);
    if (g.occupancy.length) {
      const pic = svg("svg", { width: W + L, height: H * 4 + 4, class: "occupancy" });
      const t1 = g.window_end ?? s.now, t0 = t1 - g.window;
      STAGES.forEach((st, i) => pic.appendChild(svg("text", { x: 0, y: i * H + 11, "font-size": 10 }, st)));
      for (const sp of g.occupancy) {
        const x = L + (sp.start - t0) / (t1 - t0) * W, w = Math.max(0.5, (sp.end - sp.start) / (t1 - t0) * W);
        const r = svg("rect", { x, y: STAGES.indexOf(sp.stage) * H, width: w, height: H - 2, fill: colour(sp.job_id) });
        r.appendChild(svg("title", {}, `job ${sp.job_id} holds ${sp.stage}`));
        pic.appendChild(r);
      }
      div.appendChild(pic);
    }
    frag.appendChild(div);
  }
  box.replaceChildren(frag);
}

function drawQueue(s) {
  const pending = (s.jobs || []).filter(j => j.state === "pending");
  const t = el("table", { id: "queue-table" });
  const head = el("tr");
  for (const h of ["position", "job", "GPUs", "iterations", "expected start", "why it waits"]) head.appendChild(el("th", {}, h));
  t.appendChild(head);
  pending.forEach((j, i) => {
    const tr = el("tr", { "data-job": j.job_id });
    const cells = [j.position ?? i + 1, j.job_id, j.num_gpu, `${Math.round(j.iterations_done)}/${j.iterations}`,
                   "expected_start" in j && j.expected_start !== null ? fmt(j.expected_start) + " s" : "-",
                   j.reason ? `${j.reason}: ${j.why}` : "-"];
    cells.forEach((c, k) => tr.appendChild(el("td", { class: k === 1 || k >= 4 ? "" : "num" }, String(c))));
    t.appendChild(tr);
  });
  const box = document.getElementById("queue");
  box.replaceChildren(pending.length ? t : el("div", { class: "muted" }, "queue empty"));
  if (s.jobs_truncated)  // the status reply lists at most so many jobs: say the rest exist
    box.appendChild(el("div", { class: "muted" }, `${s.counts.pending - pending.length} more pending, not listed`));
}

function drawEvents(s) {
  const t = el("table", { id: "events-table" });
  for (const e of s.events) {
    const tr = el("tr");
    for (const c of [fmt(e.ts), e.kind, e.job_id ?? "", e.node ?? ""]) tr.appendChild(el("td", {}, String(c)));
    t.appendChild(tr);
  }
  document.getElementById("events").replaceChildren(t);
}

function drawCdf(s) {
  const W = 300, H = 160, P = 30, xs = s.jcts, n = xs.length;
  const pic = svg("svg", { width: W + P + 10, height: H + P + 10, id: "cdf-svg" });
  pic.appendChild(svg("rect", { x: P, y: 5, width: W, height: H, fill: "none", stroke: "#ccc" }));
  if (n) {
    const max = xs[n - 1] || 1;
    let d = `M ${P} ${5 + H}`;
    xs.forEach((x, i) => {
      const px = P + x / max * W;
      d += ` L ${px} ${5 + H - i / n * H} L ${px} ${5 + H - (i + 1) / n * H}`;
    });
    pic.appendChild(svg("path", { d, fill: "none", stroke: "#2a6", "stroke-width": 2 }));
    pic.appendChild(svg("text", { x: P + W, y: H + 20, "text-anchor": "end", "font-size": 10 }, `${fmt(max)} s`));
  }
  pic.appendChild(svg("text", { x: P, y: H + 20, "font-size": 10 }, `JCT, ${n} jobs`));
  pic.appendChild(svg("text", { x: 0, y: 12, "font-size": 10 }, "1.0"));
  document.getElementById("cdf").replaceChildren(pic);
}

async function refresh() {
  try {
    const r = await fetch("api/status", { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const s = await r.json();
    drawSummary(s); drawCluster(s); drawGroups(s); drawQueue(s); drawEvents(s); drawCdf(s);
    if (firstRender) {
      firstRender = false;
      const ms = performance.now();  // since navigation start: the page is ready to read
      const out = document.getElementById("load-ms");
      out.textContent = ms.toFixed(0);
      out.setAttribute("data-ms", ms.toFixed(1));
      document.body.setAttribute("data-rendered", "1");
    }
  } catch (err) {
    document.getElementById("summary").textContent = `cannot read the scheduler: ${err.message}`;
  }
}
refresh();
setInterval(refresh, 2000);
