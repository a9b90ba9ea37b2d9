// The memesh operator console: plain DOM over the /admin/api JSON routes (no build step, no inline code,
// nothing from another origin). Every value from the service is written with textContent, never as HTML.
const $ = (selector) => document.querySelector(selector);
const SVG = "http://www.w3.org/2000/svg";

class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code || status}: ${message || "request failed"}`);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data?.error?.code, data?.error?.message);
  return data;
}

function toast(message, isError = false) {
  const box = $("#toast");
  box.textContent = message;
  box.className = isError ? "error" : "";
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.textContent = ""; }, 8000);
}

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

async function guarded(work) {
  try {
    return await work();
  } catch (error) {
    toast(error.message, true);
    if (error.status === 401) location.reload();
    return undefined;
  }
}

// ------------------------------------------------------------------ navigation
function show(view) {
  for (const section of document.querySelectorAll("main > section[data-view]")) section.hidden = section.dataset.view !== view;
  for (const button of document.querySelectorAll("#tabs button")) {
    if (button.dataset.view === view) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  history.replaceState(null, "", `#${view}`);
  if (view === "agents") loadAgents();
}

// ---------------------------------------------------------------------- agents
let agentsCursor = null;

async function loadAgents(more = false) {
  const page = await guarded(() => api("GET", `/admin/api/agents?limit=100${more && agentsCursor ? `&cursor=${encodeURIComponent(agentsCursor)}` : ""}`));
  if (!page) return;
  const body = $("#agents tbody");
  if (!more) body.replaceChildren();
  for (const agent of page.agents) body.append(agentRow(agent));
  agentsCursor = page.next_cursor;
  $("#agents-more").hidden = !agentsCursor;
}

function agentRow(agent) {
  const row = el("tr", null, { "data-agent": agent.agent_id });
  row.append(el("td", agent.display_name), el("td", agent.tenant_id), el("td", agent.roles.join(", ")), el("td", agent.status));
  const id = el("td");
  id.append(el("code", agent.agent_id));
  const actions = el("td");
  const act = (label, handler) => {
    const button = el("button", label, { type: "button", "aria-label": `${label} ${agent.display_name}` });
    button.addEventListener("click", handler);
    actions.append(button, " ");
  };
  if (agent.status === "active") act("Suspend", () => change(agent, "suspend"));
  if (agent.status === "suspended") act("Reinstate", () => change(agent, "reinstate"));
  if (agent.status !== "revoked") {
    act("Rotate", () => rotate(agent));
    act("Revoke", () => change(agent, "revoke"));
  }
  act("Descriptor", () => openDescriptor(agent));
  row.append(id, actions);
  return row;
}

// One agent's row, fetched again: replaced where it is shown, else put first (a new agent is on the last page
// of an id-ordered list, so the operator would not see it otherwise).
async function refreshRow(agentId) {
  const agent = await guarded(() => api("GET", `/admin/api/agents/${agentId}`));
  if (!agent) return;
  const row = agentRow(agent);
  const shown = [...document.querySelectorAll("#agents tbody tr")].find((r) => r.dataset.agent === agentId);
  if (shown) shown.replaceWith(row);
  else $("#agents tbody").prepend(row);
}

async function change(agent, action) {
  if (action === "revoke" && !confirm(`Revoke ${agent.display_name}? Its key stops working at once, for good.`)) return;
  if ((await guarded(() => api("POST", `/admin/api/agents/${agent.agent_id}/${action}`))) !== undefined) {
    toast(`${agent.display_name}: ${action} done`);
    await refreshRow(agent.agent_id);
  }
}

function showSecret(name, secret) {
  $("#secret-agent").textContent = name;
  $("#secret-value").value = secret;
  $("#secret-dialog").showModal();
  $("#secret-value").select();
}

async function rotate(agent) {
  if (!confirm(`Rotate the key of ${agent.display_name}? The old key stops working at once.`)) return;
  const issued = await guarded(() => api("POST", `/admin/api/agents/${agent.agent_id}/rotate`));
  if (issued) {
    showSecret(agent.display_name, issued.plaintext_secret);
    await refreshRow(agent.agent_id);
  }
}

async function issue(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  const scope = String(form.get("read_scope") || "").split(",").map((s) => s.trim()).filter(Boolean);
  const body = { tenant_id: form.get("tenant_id"), display_name: form.get("display_name"), roles: form.getAll("roles") };
  if (scope.length) body.read_scope = scope;
  const issued = await guarded(() => api("POST", "/admin/api/agents", body));
  if (!issued) return;
  event.target.reset();
  showSecret(body.display_name, issued.plaintext_secret);
  await refreshRow(issued.agent_id);
}

let descriptorAgent = null;

async function openDescriptor(agent) {
  descriptorAgent = agent;
  $("#descriptor-agent").textContent = agent.display_name;
  let text = "{}";
  try {
    text = JSON.stringify(await api("GET", `/admin/api/agents/${agent.agent_id}/descriptor`), null, 2);
  } catch (error) {
    if (error.status !== 404) { toast(error.message, true); return; }
  }
  $("#descriptor-json").value = text;
  $("#descriptor").hidden = false;
  $("#descriptor-json").focus();
}

async function saveDescriptor() {
  let parsed;
  try { parsed = JSON.parse($("#descriptor-json").value); } catch { toast("the descriptor is not valid JSON", true); return; }
  if (await guarded(() => api("PUT", `/admin/api/agents/${descriptorAgent.agent_id}/descriptor`, parsed))) toast("descriptor saved");
}

// ------------------------------------------------------------- delete and erase
let pendingErase = null;

function counts(list, certificate) {
  list.replaceChildren();
  for (const key of ["nodes_removed", "diffs_removed", "deliveries_removed", "sessions_removed", "aggregates_recomputed", "tombstones_propagated"]) {
    list.append(el("dt", key.replaceAll("_", " ")), el("dd", certificate[key]));
  }
}

async function previewErase(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  const scope = { kind: form.get("kind"), id: String(form.get("id")).trim() };
  if (form.get("tenant_id")) scope.tenant_id = String(form.get("tenant_id")).trim();
  const label = `${scope.kind}:${scope.id}`;
  const preview = await guarded(() => api("POST", "/admin/api/erase", { scope, confirm: label, dry_run: true }));
  if (!preview) return;
  pendingErase = { scope, label };
  counts($("#erase-counts"), preview);
  $("#erase-label").textContent = label;
  $("#erase-confirm").value = "";
  $("#erase-go").disabled = true;
  $("#erase-certificate").hidden = true;
  $("#erase-preview").hidden = false;
  $("#erase-confirm").focus();
}

async function runErase() {
  const { scope, label } = pendingErase;
  const done = await guarded(() => api("POST", "/admin/api/erase", { scope, confirm: $("#erase-confirm").value, dry_run: false }));
  if (!done) return;
  $("#erase-preview").hidden = true;
  counts($("#erase-done"), done);
  $("#erase-digest").value = done.digest;
  $("#erase-certificate").hidden = false;
  toast(`${label} erased`);
}

async function deleteNode(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  const id = String(form.get("node_id")).trim();
  if (!confirm(`Delete node ${id}?`)) return;
  if ((await guarded(() => api("POST", `/admin/api/nodes/${encodeURIComponent(id)}/delete`, { reason: form.get("reason") }))) !== undefined) {
    toast(`node ${id} deleted`);
    event.target.reset();
  }
}

// ---------------------------------------------------------------- reembed, audit
async function startReembed() {
  const job = await guarded(() => api("POST", "/admin/api/reembed"));
  if (!job) return;
  const progress = $("#reembed-progress");
  progress.hidden = false;
  for (let i = 0; i < 3600; i++) {
    const state = await guarded(() => api("GET", `/admin/api/jobs/${job.job_id}`));
    if (!state) return;
    progress.max = Math.max(1, state.nodes_total);
    progress.value = state.nodes_processed;
    $("#reembed-status").textContent = `job ${state.job_id}: ${state.status}, ${state.nodes_processed}/${state.nodes_total} nodes (${state.engine})`;
    if (state.status !== "running") return;
    await new Promise((done) => setTimeout(done, 1000));
  }
}

// ---------------------------------------------------------------- partitions
function showPartitions(layout) {
  $("#partitions-layout").textContent =
    `${layout.scene_shards} scene shards, ${layout.beacon_sets} beacon sets, ${layout.inbox_shards} inbox shards ` +
    `over ${layout.virtual_partitions} virtual partitions each; ${layout.epoch} online resizes so far.`;
  const body = $("#partitions-moves tbody");
  body.replaceChildren();
  for (const move of layout.moves) {
    const row = el("tr");
    for (const cell of [move.kind, `${move.count_from} → ${move.count_to}`, move.partitions, move.rows, move.seconds]) row.append(el("td", cell));
    body.append(row);
  }
  $("#partitions-moves").hidden = layout.moves.length === 0;
}

async function loadPartitions() {
  const layout = await guarded(() => api("GET", "/admin/api/partitions"));
  if (layout) showPartitions(layout);
}

async function resizePartitions(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  const body = {};
  for (const name of ["scene_shards", "beacon_sets", "inbox_shards"]) {
    const value = String(form.get(name) || "").trim();
    if (value) body[name] = Number(value);
  }
  if (!confirm(`Resize the partitions to ${JSON.stringify(body)}? Requests wait while they move.`)) return;
  const layout = await guarded(() => api("POST", "/admin/api/partitions/resize", body));
  if (layout) {
    showPartitions(layout);
    toast("partitions moved");
  }
}

async function verifyAudit() {
  const result = await guarded(() => api("GET", "/admin/api/audit/verify"));
  if (result) {
    $("#audit-result").textContent = result.ok
      ? `The chain holds: ${result.rows} rows verified.`
      : `The chain is broken at row ${result.first_bad_seq} (of ${result.rows}).`;
  }
}

// ------------------------------------------------------------------ observatory
const COLOURS = { delivered: "#1a7f37", deduped: "#0b5cad", pruned: "#a50e0e", exhausted: "#666666" };
const walks = new Map(); // diff_id -> events, in arrival order
let live = null;

function record(event) {
  if (!event || !event.diff_id) return;
  const hops = walks.get(event.diff_id) || [];
  if (!hops.some((h) => h.to_node === event.to_node && h.hop_index === event.hop_index && h.from_node === event.from_node)) hops.push(event);
  walks.delete(event.diff_id);
  walks.set(event.diff_id, hops); // newest walk last
  while (walks.size > 50) walks.delete(walks.keys().next().value);
}

function drawWalks() {
  const box = $("#walks");
  box.replaceChildren();
  const newest = [...walks.entries()].reverse().slice(0, 20);
  for (const [diffId, hops] of newest) box.append(drawWalk(diffId, hops));
  $("#obs-count").textContent = `${walks.size} walks, ${[...walks.values()].reduce((n, h) => n + h.length, 0)} hops shown`;
}

function drawWalk(diffId, hops) {
  const figure = el("figure", null, { class: "walk", "data-diff": diffId });
  const seed = hops.find((h) => h.hop_index === 0) || hops[0];
  const delivered = hops.filter((h) => h.outcome === "delivered").length;
  figure.append(el("h3", `diff …${diffId.slice(-8)} (tenant ${seed.tenant_id}): ${hops.length} hops, ${delivered} delivered`));
  const position = new Map();
  const perHop = new Map();
  for (const hop of [...hops].sort((a, b) => a.hop_index - b.hop_index)) {
    if (position.has(hop.to_node)) continue;
    const row = perHop.get(hop.hop_index) || 0;
    perHop.set(hop.hop_index, row + 1);
    position.set(hop.to_node, { x: 40 + hop.hop_index * 120, y: 30 + row * 40 });
  }
  const width = 80 + Math.max(...hops.map((h) => h.hop_index)) * 120;
  const height = 40 + Math.max(...perHop.values()) * 40;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `walk of diff ${diffId}: ${hops.length} hops, ${delivered} delivered`);
  const shape = (tag, attrs, title) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (title) { const t = document.createElementNS(SVG, "title"); t.textContent = title; node.append(t); }
    svg.append(node);
    return node;
  };
  for (const hop of hops) {
    const to = position.get(hop.to_node);
    const from = hop.from_node ? position.get(hop.from_node) : null;
    if (from) shape("line", { x1: from.x, y1: from.y, x2: to.x, y2: to.y, stroke: COLOURS[hop.outcome] || "#999", "stroke-width": 2 });
  }
  for (const hop of hops) {
    const at = position.get(hop.to_node);
    shape("circle", { cx: at.x, cy: at.y, r: 9, fill: COLOURS[hop.outcome] || "#999", class: `hop ${hop.outcome}` },
      `hop ${hop.hop_index} to ${hop.to_node}: ${hop.outcome}, energy ${hop.energy_before.toFixed(2)} → ${hop.energy_after.toFixed(2)}, relevance ${hop.relevance ?? "-"}`);
    const label = shape("text", { x: at.x + 12, y: at.y + 4, "font-size": 11 });
    label.textContent = hop.energy_before.toFixed(2);
  }
  figure.append(svg);
  const legend = el("figcaption", null, { class: "legend" });
  for (const outcome of Object.keys(COLOURS)) legend.append(el("span", `● ${outcome}`, { class: outcome }));
  figure.append(legend);
  return figure;
}

async function replay() {
  const events = await guarded(() => api("GET", "/admin/api/observatory/events?limit=1000"));
  if (!events) return;
  walks.clear();
  for (const event of events) record(event);
  drawWalks();
}

function toggleLive() {
  const button = $("#obs-live");
  if (live) {
    live.close();
    live = null;
    button.setAttribute("aria-pressed", "false");
    $("#obs-status").textContent = "live tail stopped";
    return;
  }
  const socket = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/admin/api/observatory/stream`);
  live = socket;
  button.setAttribute("aria-pressed", "true");
  let pending = false;
  socket.addEventListener("message", (message) => {
    const frame = JSON.parse(message.data);
    if (frame.error) { toast(`observatory: ${frame.error.code}: ${frame.error.message}`, true); return; }
    if (frame.resync) { toast("the live tail fell behind: some events were skipped"); return; }
    record(frame);
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; drawWalks(); }); }
  });
  socket.addEventListener("close", () => {
    if (live === socket) { live = null; button.setAttribute("aria-pressed", "false"); $("#obs-status").textContent = "live tail closed"; }
  });
  socket.addEventListener("open", () => { $("#obs-status").textContent = "live tail open"; });
}

// ------------------------------------------------------------------------ start
async function start() {
  let me;
  try {
    me = await api("GET", "/admin/api/me");
  } catch (error) {
    $("#who").textContent = error.status === 401 ? "You are not signed in." : error.message;
    $("#login").hidden = false;
    return;
  }
  $("#who").textContent = `Signed in as ${me.display_name} (${me.roles.join(", ")}, tenant ${me.tenant_id})`;
  $("#logout").hidden = false;
  $("#tabs").hidden = false;
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => show(button.dataset.view));
  $("#issue").addEventListener("submit", issue);
  $("#agents-more").addEventListener("click", () => loadAgents(true));
  $("#descriptor-save").addEventListener("click", saveDescriptor);
  $("#descriptor-close").addEventListener("click", () => { $("#descriptor").hidden = true; });
  $("#erase").addEventListener("submit", previewErase);
  $("#erase-confirm").addEventListener("input", () => { $("#erase-go").disabled = $("#erase-confirm").value !== pendingErase?.label; });
  $("#erase-go").addEventListener("click", runErase);
  $("#delete-node").addEventListener("submit", deleteNode);
  $("#reembed-start").addEventListener("click", startReembed);
  $("#audit-verify").addEventListener("click", verifyAudit);
  $("#partitions-load").addEventListener("click", loadPartitions);
  $("#partitions-resize").addEventListener("submit", resizePartitions);
  $("#obs-replay").addEventListener("click", replay);
  $("#obs-live").addEventListener("click", toggleLive);
  $("#logout").addEventListener("submit", async (event) => {
    event.preventDefault();
    await guarded(() => api("POST", "/admin/auth/logout"));
    location.assign("/admin");
  });
  const wanted = location.hash.slice(1);
  show(document.querySelector(`#tabs button[data-view="${wanted}"]`) ? wanted : "agents");
}

start();
