// The operators' page (#/ops): what `reminders status` says, the delivery-lag chart of the
// last hour, the workers, the dead-letter queue with replay, and the suppression list with
// removal. Every figure comes from /v1/admin/* (docs/operations.md, "The operators' API"),
// which needs a token with the reminders:admin scope; values are written with textContent.
import { call, Problem, token } from "./api.js";
import { el } from "./dom.js";

const REFRESH_MS = 10000;
export const ADMIN_SCOPE = "reminders:admin";

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children) node.append(child);
  return node;
}

/** Whether the signed-in token says it carries the admin scope (its payload read without
 * verification, only to decide whether to show the link: the API decides access). */
export function tokenIsAdmin() {
  const value = token.get();
  if (!value) return false;
  try {
    const part = value.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
    return typeof claims.scope === "string" && claims.scope.split(" ").includes(ADMIN_SCOPE);
  } catch {
    return false;
  }
}

function utc(iso) {
  return iso ? new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "–";
}

function ago(iso, now) {
  if (!iso) return "–";
  const s = Math.max(0, Math.round((now - new Date(iso)) / 1000));
  return s < 120 ? `${s} s ago` : s < 7200 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`;
}

function value(check) {
  if (check.value === null || check.value === undefined) return "–";
  if (typeof check.value === "number" && check.unit === "s") return `${check.value.toFixed(1)} s`;
  return String(check.value);
}

function threshold(check) {
  if (check.threshold === null || check.threshold === undefined) return "–";
  if (check.name.startsWith("workers_")) return `< ${check.threshold}`;
  return `> ${check.threshold}${check.unit ? " " + check.unit : ""}`;
}

function stateBadge(state) {
  return el("span", { class: `badge state-${state}` }, state.toUpperCase());
}

function table(caption, headers, rows, id) {
  return el(
    "div",
    { class: "table-wrap" },
    el(
      "table",
      { class: "stack", id },
      el("caption", { class: "visually-hidden" }, caption),
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ...rows),
    ),
  );
}

function row(cells, headers) {
  return el("tr", {}, ...cells.map((c, i) => el("td", { "data-label": headers[i] }, c)));
}

// ------------------------------------------------------------------ chart

const SERIES = [
  { key: "p50_s", label: "p50", color: "#0a58ca" },
  { key: "p90_s", label: "p90", color: "#b76e00" },
  { key: "p99_s", label: "p99", color: "#b42318" },
];

/** An SVG line chart of the lag percentiles per bucket, time on x (the window), seconds
 * on y (from 0 to the largest p99, rounded up); each point has a <title> with its values. */
export function lagChart(lag) {
  const width = 760, height = 240, left = 56, right = 12, top = 12, bottom = 36;
  const since = new Date(lag.since).getTime(), until = new Date(lag.until).getTime();
  const buckets = lag.buckets;
  const peak = Math.max(0.001, ...buckets.map((b) => b.p99_s));
  const magnitude = 10 ** Math.floor(Math.log10(peak));
  const ymax = Math.ceil(peak / magnitude) * magnitude;
  const x = (t) => left + ((t - since) / (until - since)) * (width - left - right);
  const y = (s) => top + (1 - s / ymax) * (height - top - bottom);
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${height}`, role: "img", class: "chart", id: "lag-chart",
    "aria-label": `Delivery lag p50, p90 and p99 per ${lag.bucket_s} s over the last `
      + `${Math.round((until - since) / 60000)} minutes; ${buckets.length} buckets with sends`,
  });
  for (let i = 0; i <= 4; i += 1) {
    const v = (ymax * i) / 4;
    chart.append(
      svg("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" }),
      svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end", class: "axis" },
        document.createTextNode(v >= 1 ? `${+v.toFixed(2)} s` : `${Math.round(v * 1000)} ms`)),
    );
  }
  for (let i = 0; i <= 6; i += 1) {
    const t = since + ((until - since) * i) / 6;
    const label = new Date(t).toISOString().slice(11, 16);
    chart.append(svg("text", { x: x(t), y: height - bottom + 18, "text-anchor": "middle", class: "axis" },
      document.createTextNode(label)));
  }
  chart.append(svg("text", { x: width - right, y: height - 4, "text-anchor": "end", class: "axis" },
    document.createTextNode("UTC")));
  const mid = (b) => new Date(b.start).getTime() + (lag.bucket_s * 1000) / 2;
  for (const series of SERIES) {
    if (buckets.length > 1) {
      const points = buckets.map((b) => `${x(mid(b)).toFixed(1)},${y(b[series.key]).toFixed(1)}`);
      chart.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: series.color,
        "stroke-width": 2, class: `series-${series.label}` }));
    }
    for (const b of buckets) {
      const tip = `${utc(b.start)}: ${series.label} ${b[series.key].toFixed(3)} s (${b.sent} sent)`;
      chart.append(svg("circle", { cx: x(mid(b)), cy: y(b[series.key]), r: 3, fill: series.color,
        class: `point point-${series.label}` }, svg("title", {}, document.createTextNode(tip))));
    }
  }
  const legend = el("p", { class: "legend" }, ...SERIES.map((s) =>
    el("span", {}, el("span", { class: `swatch swatch-${s.label}` }), ` ${s.label}`)));
  const sent = buckets.reduce((n, b) => n + b.sent, 0);
  const note = buckets.length ? `${sent} sent in the window` : "Nothing sent in the window.";
  return el("figure", { class: "card" }, el("h2", {}, "Delivery lag, last hour"), chart, legend,
    el("figcaption", { class: "muted" }, `sent_at − run_time_utc per ${lag.bucket_s} s, from the delivery log. ${note}`));
}

// ------------------------------------------------------------------ the page

/** Draw the operators' page into `view` and refresh it every 10 s until `signal` aborts.
 * `onAuth(problem)` is called with a 401 (the caller signs out). */
export function opsView(view, { signal, onAuth }) {
  view.replaceChildren(
    el("section", { "aria-labelledby": "ops-title" },
      el("h1", { id: "ops-title" }, "Operations"),
      el("p", { class: "problem", id: "ops-problem", role: "alert", hidden: "" }),
      el("p", { class: "muted", id: "ops-checked" }),
      el("div", { id: "ops-body" })),
  );
  const problemBox = view.querySelector("#ops-problem");
  const body = view.querySelector("#ops-body");
  const show = (error) => {
    if (error instanceof Problem && error.status === 401) return onAuth(error);
    problemBox.replaceChildren(el("strong", {}, error.title || String(error)),
      error.detail ? ` ${error.detail}` : "");
    if (error.status === 403) problemBox.append(" Sign in with a token that has the "
      + `${ADMIN_SCOPE} scope (in development: reminders token --admin).`);
    problemBox.hidden = false;
  };
  let selected = new Set();

  async function refresh() {
    let overview, lag, letters, suppressed;
    try {
      [overview, lag, letters, suppressed] = await Promise.all([
        call("GET", "/v1/admin/overview", { signal }),
        call("GET", "/v1/admin/delivery-lag?window_s=3600&bucket_s=60", { signal }),
        call("GET", "/v1/admin/dead-letters?limit=200", { signal }),
        call("GET", "/v1/admin/suppressions?limit=200", { signal }),
      ]);
    } catch (error) {
      if (error.name !== "AbortError") show(error);
      return;
    }
    problemBox.hidden = true;
    const now = new Date(overview.data.checked_at);
    view.querySelector("#ops-checked").textContent =
      `Overall ${overview.data.status.toUpperCase()} at ${utc(overview.data.checked_at)}; refreshed every ${REFRESH_MS / 1000} s.`;
    body.replaceChildren(
      checksCard(overview.data.checks),
      lagChart(lag.data),
      workersCard(overview.data.workers, now),
      lettersCard(letters.data),
      suppressionsCard(suppressed.data),
    );
  }

  function checksCard(checks) {
    const headers = ["Check", "Value", "Alert when", "State", "Detail"];
    return el("div", { class: "card" }, el("h2", {}, "Status"),
      table("Status checks", headers, checks.map((c) => {
        const tr = row([c.label, value(c), threshold(c), stateBadge(c.state), c.detail], headers);
        tr.dataset.check = c.name;
        return tr;
      }), "ops-checks"));
  }

  function workersCard(workers, now) {
    const headers = ["Role", "Process", "Version", "Started", "Last heartbeat", "Last tick", "Live"];
    const rows = workers.map((w) => {
      const tr = row([w.role, `${w.host}:${w.pid} (${w.process})`, w.version, utc(w.started_at),
        ago(w.last_seen_at, now), ago(w.last_tick_at, now),
        w.live ? stateBadge("ok") : el("span", { class: "badge state-alert" }, w.stopped_at ? "STOPPED" : "SILENT")],
      headers);
      tr.dataset.role = w.role;
      return tr;
    });
    return el("div", { class: "card" }, el("h2", {}, "Workers (seen in the last hour)"),
      rows.length ? table("Workers", headers, rows, "ops-workers") : el("p", { class: "empty" }, "No worker has reported."));
  }

  function lettersCard(letters) {
    const headers = ["", "Reminder", "Occurrence", "Receives", "Dead-lettered", "Recorded failed"];
    const result = el("p", { class: "notice", id: "replay-result", role: "status" });
    const replay = async (ids) => {
      try {
        const { data } = await call("POST", "/v1/admin/dead-letters:replay", { body: { ids }, signal });
        result.textContent = `Redriven ${data.redriven}; already delivered (dropped, not resent) ${data.already_done}; `
          + `malformed ${data.malformed}; not found ${data.missing_ids.length}; held by another reader ${data.held}.`;
        selected = new Set();
        await refresh();
        body.querySelector("#replay-result").textContent = result.textContent;
      } catch (error) {
        if (error.name !== "AbortError") show(error);
      }
    };
    const rows = letters.map((d) => {
      const box = el("input", { type: "checkbox", "aria-label": `select dead letter ${d.message_id}` });
      box.checked = selected.has(d.message_id);
      box.addEventListener("change", () => (box.checked ? selected.add(d.message_id) : selected.delete(d.message_id)));
      const tr = row([box, d.reminder_id || "(no occurrence)", d.run_time_utc ? utc(d.run_time_utc) : "–",
        String(d.receive_count), utc(d.dead_lettered_at), d.recorded_at ? utc(d.recorded_at) : "not yet"], headers);
      tr.dataset.messageId = d.message_id;
      return tr;
    });
    const replaySelected = el("button", { type: "button", id: "replay-selected" }, "Replay selected");
    replaySelected.addEventListener("click", () => selected.size && replay([...selected]));
    const replayAll = el("button", { type: "button", id: "replay-all", class: "primary" }, "Replay all");
    replayAll.addEventListener("click", () => replay(null));
    if (!letters.length) replaySelected.disabled = replayAll.disabled = true;
    return el("div", { class: "card", id: "ops-dlq" }, el("h2", {}, `Dead letters (${letters.length})`),
      el("p", { class: "muted" }, "A replay sends each occurrence again unless it was delivered meanwhile: "
        + "the same safe replay as reminders dlq replay."),
      letters.length ? table("Dead letters", headers, rows, "ops-letters") : el("p", { class: "empty" }, "The dead-letter queue is empty."),
      el("p", { class: "actions" }, replaySelected, " ", replayAll), result);
  }

  function suppressionsCard(entries) {
    const headers = ["Address", "Reason", "Provider", "Since", "Reminders paused", ""];
    const result = el("p", { class: "notice", id: "suppression-result", role: "status" });
    const rows = entries.map((s) => {
      const remove = el("button", { type: "button", class: "danger", "aria-label": `remove ${s.email}` }, "Remove");
      remove.addEventListener("click", async () => {
        try {
          const { data } = await call("DELETE", `/v1/admin/suppressions/${encodeURIComponent(s.email)}`, { signal });
          await refresh();
          body.querySelector("#suppression-result").textContent =
            `${data.email}: ${data.removed ? "removed" : "was not listed"}; reminders resumed ${data.resumed}`
            + (data.left_paused ? `, left paused ${data.left_paused} (profile unavailable)` : "") + ".";
        } catch (error) {
          if (error.name !== "AbortError") show(error);
        }
      });
      const tr = row([s.email, s.reason, s.provider || "–", utc(s.created_at), String(s.paused), remove], headers);
      tr.dataset.email = s.email;
      return tr;
    });
    return el("div", { class: "card", id: "ops-suppressions" }, el("h2", {}, `Suppression list (${entries.length})`),
      entries.length ? table("Suppression list", headers, rows, "ops-suppression-list") : el("p", { class: "empty" }, "No address is suppressed."),
      result);
  }

  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
}
