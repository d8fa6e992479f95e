// The console's views, routed on the URL fragment: #/ (list), #/new, #/r/<id> (detail and
// delivery history), #/r/<id>/edit. Every value from the API is written with textContent.
import { call, newKey, Problem, token } from "./api.js";
import { $, el } from "./dom.js";
import { opsView, tokenIsAdmin } from "./ops.js";

const PREVIEW_DELAY_MS = 300;
const HISTORY_POLL_MS = 2000;
const PAGE_SIZE = 50;
const SCHEDULE_FIELDS = ["start_local", "timezone", "rrule", "exdates", "all_day", "dst", "from"];
const LIVE = ["pending", "claimed", "paused"];

let viewAbort = new AbortController();
let pollTimer = null;

// ------------------------------------------------------------------ formatting

/** "2027-03-13 07:30:00 UTC" */
export function formatUtc(iso) {
  return new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

/** The instant as the wall time of `zone` (the browser's when null or unknown), with
 * the zone's abbreviation: "2027-03-14 03:30:00 EDT". */
export function formatInZone(iso, zone) {
  const options = {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  };
  let parts;
  try {
    parts = new Intl.DateTimeFormat("en-US", { ...options, timeZone: zone || undefined })
      .formatToParts(new Date(iso));
  } catch {
    parts = new Intl.DateTimeFormat("en-US", options).formatToParts(new Date(iso));
  }
  const p = Object.fromEntries(parts.map((part) => [part.type, part.value]));
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

/** "2027-03-14T03:30:00-04:00" -> "2027-03-14 03:30:00 (UTC-04:00)" */
function formatOffsetLocal(local) {
  const match = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d(?::\d\d)?)([+-]\d\d:\d\d|Z)?$/.exec(local);
  if (!match) return local;
  const offset = match[3] ? ` (UTC${match[3] === "Z" ? "+00:00" : match[3]})` : "";
  return `${match[1]} ${match[2]}${offset}`;
}

function badge(status) {
  return el("span", { class: `badge status-${status}` }, status);
}

function schedule(r) {
  const when = r.all_day ? `${r.start_local}, all day` : r.start_local;
  const zone = r.timezone || "profile timezone";
  return `${r.rrule ? r.rrule : "once"} from ${when} (${zone})`;
}

/** The instant in `zone` (see formatInZone), and in UTC below it unless that is the same. */
function timeCell(iso, zone) {
  if (!iso) return el("span", { class: "muted" }, "—");
  const local = formatInZone(iso, zone);
  const utc = formatUtc(iso);
  return el("span", { class: "when" }, el("time", { datetime: iso }, local),
    local === utc ? null : el("br"), local === utc ? null : el("span", { class: "muted" }, utc));
}

function cell(label, ...children) {
  return el("td", { "data-label": label }, ...children);
}

// ------------------------------------------------------------------ notices and problems

/** Show `text` in the page's status line; `keep`: through the next navigation too. */
function notify(text, keep = false) {
  const notice = $("#notice");
  notice.textContent = text;
  notice.dataset.keep = keep ? "1" : "";
}

/** Show `problem` in `box` (title and detail) and each of its field problems next to the
 * field it names in `form`; field problems no field shows are listed in the box. Only the
 * fields in `scope` (all when null) are cleared first. */
function showProblem(box, problem, form = null, scope = null) {
  if (form) clearFieldErrors(form, scope);
  box.replaceChildren();
  if (!problem) {
    box.hidden = true;
    return;
  }
  box.append(el("strong", {}, problem.title));
  if (problem.detail) box.append(" ", el("span", {}, problem.detail));
  const unplaced = [];
  for (const { field, message } of problem.errors) {
    // The API names an item either way ("exdates.0" from validation, "exdates[0]" from
    // the schedule's checks: docs/api.md); the form's data-field names use the dot.
    const name = String(field).replace(/\[(\d+)\]/g, ".$1");
    const target = form && fieldFor(form, name);
    if (target) addFieldError(target, name, message);
    else unplaced.push(`${field}: ${message}`);
  }
  if (unplaced.length) box.append(el("ul", {}, ...unplaced.map((text) => el("li", {}, text))));
  box.hidden = false;
}

/** The form's .field whose data-field is `name` or its prefix ("exdates" for
 * "exdates.0"), or the first one under it ("dst.nonexistent" for "dst"). */
function fieldFor(form, name) {
  const fields = [...form.querySelectorAll(".field[data-field]")];
  const exact = fields.filter((f) => name === f.dataset.field || name.startsWith(f.dataset.field + "."));
  if (exact.length) return exact.sort((a, b) => b.dataset.field.length - a.dataset.field.length)[0];
  return fields.find((f) => f.dataset.field.startsWith(name + ".")) || null;
}

function addFieldError(field, name, message) {
  const error = $(".error", field);
  const control = $("input, select, textarea", field);
  const item = name.includes(".") && !field.dataset.field.includes(".") ? `${name}: ${message}` : message;
  error.textContent = error.textContent ? `${error.textContent}; ${item}` : item;
  error.id = error.id || `${control.id}-error`;
  control.setAttribute("aria-invalid", "true");
  const described = (control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
  if (!described.includes(error.id)) described.push(error.id);
  control.setAttribute("aria-describedby", described.join(" "));
}

function clearFieldErrors(form, scope) {
  for (const field of form.querySelectorAll(".field[data-field]")) {
    const name = field.dataset.field;
    if (scope && !scope.some((s) => name === s || name.startsWith(s + "."))) continue;
    $(".error", field).textContent = "";
    const control = $("input, select, textarea", field);
    control.removeAttribute("aria-invalid");
  }
}

/** A refused token ends the session; any other problem is the caller's to show. */
function handleAuth(error) {
  if (error instanceof Problem && error.status === 401) {
    token.clear();
    notify(`Signed out: ${error.title}${error.detail ? ` (${error.detail})` : ""}.`);
    route();
    return true;
  }
  return error.name === "AbortError";
}

// ------------------------------------------------------------------ routing

/** Replace the current view by a copy of template `templateId`; return it and the
 * AbortSignal of its requests (aborted when the next view mounts). */
function mount(templateId) {
  viewAbort.abort();
  viewAbort = new AbortController();
  clearInterval(pollTimer);
  const view = $("#view");
  view.replaceChildren($(`#${templateId}`).content.cloneNode(true));
  return { view, signal: viewAbort.signal };
}

/** The operators' page (ops.js), for a token with the reminders:admin scope; the API
 * answers 403 otherwise, and the page says so. */
function opsRoute() {
  viewAbort.abort();
  viewAbort = new AbortController();
  clearInterval(pollTimer);
  const view = $("#view");
  opsView(view, { signal: viewAbort.signal, onAuth: handleAuth });
  focusHeading(view);
}

function focusHeading(view) {
  const heading = $("h1", view);
  heading.tabIndex = -1;
  heading.focus({ preventScroll: false });
}

function route() {
  const signedIn = Boolean(token.get());
  $("#account").hidden = !signedIn;
  $("#ops-link").hidden = !tokenIsAdmin();
  if (!signedIn) return loginView();
  const hash = location.hash || "#/";
  let match;
  if (hash === "#/ops") return opsRoute();
  if (hash === "#/new") return editView(null);
  if ((match = /^#\/r\/([0-9a-f-]{36})\/edit$/.exec(hash))) return editView(match[1]);
  if ((match = /^#\/r\/([0-9a-f-]{36})$/.exec(hash))) return detailView(match[1]);
  return listView();
}

// ------------------------------------------------------------------ sign in

function loginView() {
  const { view } = mount("tpl-login");
  const form = $("#login-form", view);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = form.elements.token.value.trim().replace(/^Bearer\s+/i, "");
    const field = $(".field", form);
    clearFieldErrors(form, null);
    if (!value) return addFieldError(field, "token", "paste a token");
    token.set(value);
    try {
      await call("GET", "/v1/reminders?limit=1");
    } catch (error) {
      token.clear();
      const text = error instanceof Problem ? `${error.title}${error.detail ? `: ${error.detail}` : ""}` : String(error);
      return addFieldError(field, "token", text);
    }
    notify("");
    if (!location.hash || location.hash === "#/") route();
    else location.hash = "#/";
  });
  focusHeading(view);
}

// ------------------------------------------------------------------ list

function listView() {
  const { view, signal } = mount("tpl-list");
  const rows = $("#reminders tbody", view);
  const more = $("#load-more", view);
  const problemBox = $("#list-problem", view);
  const status = $("#filter-status", view);
  const search = $("#filter-search", view);
  let cursor = null;

  const applySearch = () => {
    const needle = search.value.trim().toLocaleLowerCase();
    let shown = 0;
    for (const row of rows.rows) {
      const hit = !needle || row.dataset.title.includes(needle);
      row.hidden = !hit;
      shown += hit ? 1 : 0;
    }
    $("#list-empty", view).hidden = shown > 0;
  };

  const load = async (reset) => {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (status.value) query.set("status", status.value);
    if (!reset && cursor) query.set("cursor", cursor);
    try {
      const { data } = await call("GET", `/v1/reminders?${query}`, { signal });
      if (reset) rows.replaceChildren();
      for (const r of data.items) rows.append(reminderRow(r));
      cursor = data.next_cursor;
      more.hidden = !cursor;
      showProblem(problemBox, null);
      applySearch();
    } catch (error) {
      if (!handleAuth(error)) showProblem(problemBox, error);
    }
  };

  status.addEventListener("change", () => load(true));
  search.addEventListener("input", applySearch);
  $("#filters", view).addEventListener("submit", (event) => event.preventDefault());
  more.addEventListener("click", () => load(false));
  focusHeading(view);
  return load(true);
}

function reminderRow(r) {
  const row = el("tr", { "data-id": r.id });
  row.dataset.title = r.title.toLocaleLowerCase();
  row.append(
    cell("Title", el("a", { href: `#/r/${r.id}` }, r.title)),
    cell("Status", badge(r.status)),
    cell("Schedule", schedule(r)),
    cell("Next run", timeCell(r.next_run_utc, r.timezone)),
    cell("Actions", el("span", { class: "links" },
      el("a", { href: `#/r/${r.id}/edit`, "aria-label": `Edit ${r.title}` }, "Edit"),
      el("a", { href: `#/r/${r.id}`, "aria-label": `History of ${r.title}` }, "History"))),
  );
  return row;
}

// ------------------------------------------------------------------ create and edit

function readSchedule(form) {
  const value = (name) => form.elements[name].value.trim();
  return {
    start_local: value("start_local"),
    timezone: value("timezone") || null,
    rrule: value("rrule") || null,
    exdates: form.elements.exdates.value.split("\n").map((s) => s.trim()).filter(Boolean),
    all_day: form.elements.all_day.checked,
    dst: { nonexistent: value("dst.nonexistent"), ambiguous: value("dst.ambiguous") },
  };
}

function readReminder(form) {
  const lateness = form.elements["misfire.max_lateness_s"].valueAsNumber;
  return {
    title: form.elements.title.value,
    body: form.elements.body.value || null,
    ...readSchedule(form),
    misfire: {
      policy: form.elements["misfire.policy"].value,
      max_lateness_s: Number.isInteger(lateness) ? lateness : null,
    },
  };
}

/** The members of `now` that differ from `before` (a PATCH body: an unchanged schedule
 * sent again would still count as a schedule change, docs/api.md). */
function changes(before, now) {
  return Object.fromEntries(
    Object.entries(now).filter(([key, value]) => JSON.stringify(value) !== JSON.stringify(before[key])),
  );
}

function fillForm(form, r) {
  form.elements.title.value = r.title;
  form.elements.body.value = r.body || "";
  form.elements.start_local.value = r.start_local;
  form.elements.timezone.value = r.timezone || "";
  form.elements.rrule.value = r.rrule || "";
  form.elements.exdates.value = r.exdates.join("\n");
  form.elements.all_day.checked = r.all_day;
  form.elements["dst.nonexistent"].value = r.dst.nonexistent;
  form.elements["dst.ambiguous"].value = r.dst.ambiguous;
  form.elements["misfire.policy"].value = r.misfire.policy;
  form.elements["misfire.max_lateness_s"].value = String(r.misfire.max_lateness_s);
}

function fillZones(list) {
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const names = zones.includes("UTC") ? zones : ["UTC", ...zones];
  list.replaceChildren(...names.map((name) => el("option", { value: name })));
}

async function editView(id) {
  const { view, signal } = mount("tpl-edit");
  const form = $("#edit-form", view);
  const box = $("#form-problem", view);
  const fromInput = $("#f-from", view);
  let etag = null;
  let original = null; // the form's values as loaded: a save sends only what changed
  let idempotencyKey = newKey();
  fillZones($("#zones", view));
  if (id) {
    $("#edit-title", view).textContent = "Edit reminder";
    $("#save", view).textContent = "Save changes";
    $("#cancel-edit", view).href = `#/r/${id}`;
    try {
      const answer = await call("GET", `/v1/reminders/${id}`, { signal });
      etag = answer.etag;
      fillForm(form, answer.data);
      original = readReminder(form);
    } catch (error) {
      if (!handleAuth(error)) showProblem(box, error, form);
      return;
    }
  }
  const preview = previewer(view, form, signal);
  form.addEventListener("input", preview);
  form.addEventListener("change", preview);
  fromInput.addEventListener("input", preview);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = original ? changes(original, readReminder(form)) : readReminder(form);
    const save = $("#save", view);
    save.disabled = true;
    try {
      const answer = id
        ? await call("PATCH", `/v1/reminders/${id}`, { body, etag, signal })
        : await call("POST", "/v1/reminders", { body, idempotencyKey, signal });
      idempotencyKey = newKey();
      notify(id ? `Saved “${answer.data.title}”.` : `Created “${answer.data.title}”.`, true);
      location.hash = `#/r/${answer.data.id}`;
    } catch (error) {
      if (handleAuth(error)) return;
      if (error.status === 412) {
        error.detail = `${error.detail} Reload the page to see the current version.`;
      }
      showProblem(box, error, form);
      const first = form.querySelector("[aria-invalid=true]") || box;
      if (first === box) box.tabIndex = -1;
      first.focus();
      preview(); // its schedule problems again, beside those of the save
    } finally {
      save.disabled = false;
    }
  });
  focusHeading(view);
  preview();
}

/** A debounced preview of the form's schedule: POST /v1/occurrences:preview after
 * PREVIEW_DELAY_MS without input, the previous request aborted. */
function previewer(view, form, viewSignal) {
  const rows = $("#preview tbody", view);
  const status = $("#preview-status", view);
  const fromInput = $("#f-from", view);
  const previewBox = $("#preview-problem", view);
  let timer = null;
  let inFlight = null;

  const run = async () => {
    inFlight?.abort();
    inFlight = new AbortController();
    const signal = AbortSignal.any ? AbortSignal.any([viewSignal, inFlight.signal]) : inFlight.signal;
    const body = { ...readSchedule(form), limit: 10 };
    const from = fromInput.value.trim();
    if (from) body.from = from;
    if (!body.start_local) {
      rows.replaceChildren();
      status.textContent = "Enter a start time to see the occurrences.";
      return;
    }
    status.textContent = "Updating…";
    try {
      const { data } = await call("POST", "/v1/occurrences:preview", { body, signal });
      showProblem(previewBox, null, form, SCHEDULE_FIELDS);
      clearFieldErrors(view, ["from"]);
      rows.replaceChildren(...data.items.map((o) => occurrenceRow(o, data.timezone)));
      const flagged = data.items.filter((o) => o.shifted || o.skipped).length;
      status.textContent = `${data.items.length} occurrences in ${data.timezone}` +
        (flagged ? `, ${flagged} moved or dropped by daylight saving time.` : ".");
    } catch (error) {
      if (handleAuth(error)) return;
      rows.replaceChildren();
      status.textContent = "";
      showProblem(previewBox, error, form, SCHEDULE_FIELDS);
      const from = error.errors.find((e) => e.field === "from");
      clearFieldErrors(view, ["from"]);
      if (from) addFieldError(fieldFor(view, "from"), "from", from.message);
    }
  };

  return () => {
    clearTimeout(timer);
    timer = setTimeout(run, PREVIEW_DELAY_MS);
  };
}

function occurrenceRow(o, zone) {
  const time = (o.rule_local.split("T")[1] || "").slice(0, 5);
  const day = o.rule_local.split("T")[0];
  if (o.skipped) {
    return el("tr", { class: "dst-skipped" },
      cell("Local time", el("s", {}, formatOffsetLocal(o.rule_local))),
      cell("UTC", el("span", { class: "muted" }, "not sent")),
      cell("DST", el("span", {}, el("span", { class: "badge dst" }, "Skipped"),
        ` ${time} does not exist on ${day} (daylight saving time starts): not sent.`)));
  }
  const [date, clock, offset] = formatOffsetLocal(o.local).split(" ");
  const abbreviation = formatInZone(o.run_time_utc, zone).split(" ")[2];
  const local = el("span", { class: "when" }, `${date} ${clock} ${abbreviation}`,
    el("br"), el("span", { class: "muted" }, offset || ""));
  const note = o.shifted
    ? el("span", {}, el("span", { class: "badge dst" }, "Shifted"),
      ` ${time} does not exist on ${day} (daylight saving time starts): fires at ${clock.slice(0, 5)} ${abbreviation}.`)
    : el("span", { class: "muted" }, "—");
  return el("tr", { class: o.shifted ? "dst-shifted" : "" },
    cell("Local time", local),
    cell("UTC", el("span", { class: "when" }, formatUtc(o.run_time_utc))),
    cell("DST", note));
}

// ------------------------------------------------------------------ detail and history

function detailView(id) {
  const { view, signal } = mount("tpl-detail");
  const box = $("#detail-problem", view);
  const rows = $("#history tbody", view);
  const more = $("#history-more", view);
  let reminder = null;
  let etag = null;
  let cursor = null;
  let extraPages = false;

  const render = (r) => {
    reminder = r;
    $("#detail-title", view).textContent = r.title;
    const status = $("#d-status", view);
    status.className = `badge status-${r.status}`;
    status.textContent = r.status;
    $("#d-reason", view).textContent = r.paused_reason ? `(${r.paused_reason})` : "";
    $("#d-next", view).replaceChildren(timeCell(r.next_run_utc, r.timezone));
    $("#d-schedule", view).textContent = schedule(r);
    $("#d-body", view).textContent = r.body || "—";
    $("#d-error", view).textContent = r.last_error || "—";
    $("#d-edit", view).href = `#/r/${r.id}/edit`;
    $("#d-pause", view).disabled = !["pending", "claimed"].includes(r.status);
    $("#d-resume", view).disabled = r.status !== "paused";
    $("#d-cancel", view).disabled = !LIVE.includes(r.status);
  };

  const loadReminder = async () => {
    const answer = await call("GET", `/v1/reminders/${id}`, { signal });
    etag = answer.etag;
    render(answer.data);
  };

  const loadHistory = async (reset) => {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (!reset && cursor) query.set("cursor", cursor);
    const { data } = await call("GET", `/v1/reminders/${id}/deliveries?${query}`, { signal });
    const built = data.items.map((d) => deliveryRow(d, reminder && reminder.timezone));
    if (reset) rows.replaceChildren(...built);
    else rows.append(...built);
    cursor = data.next_cursor;
    more.hidden = !cursor;
    const count = rows.rows.length;
    $("#history-status", view).textContent = count === 0 ? "Nothing delivered yet."
      : `${count} occurrence${count === 1 ? "" : "s"}${cursor ? " so far (more below)" : ""}.`;
  };

  const refresh = async () => {
    try {
      await loadReminder();
      if (!extraPages) await loadHistory(true);
    } catch (error) {
      if (!handleAuth(error)) showProblem(box, error);
    }
  };

  const act = (button, method, path, done) => {
    $(button, view).addEventListener("click", async () => {
      if (button === "#d-cancel" && !confirm(`Cancel “${reminder.title}”? Nothing more will be sent.`)) return;
      try {
        const answer = await call(method, `/v1/reminders/${id}${path}`, { etag, signal });
        etag = answer.etag;
        render(answer.data);
        showProblem(box, null);
        notify(`“${answer.data.title}” ${done}.`);
      } catch (error) {
        if (!handleAuth(error)) showProblem(box, error);
      }
    });
  };
  act("#d-pause", "POST", "/pause", "is paused");
  act("#d-resume", "POST", "/resume", "is resumed");
  act("#d-cancel", "DELETE", "", "is cancelled");
  more.addEventListener("click", async () => {
    extraPages = true;
    try {
      await loadHistory(false);
    } catch (error) {
      if (!handleAuth(error)) showProblem(box, error);
    }
  });

  pollTimer = setInterval(() => {
    if (document.visibilityState === "visible") refresh();
  }, HISTORY_POLL_MS);
  return refresh().then(() => focusHeading(view));
}

function deliveryRow(d, zone) {
  return el("tr", { class: `delivery-${d.status}` },
    cell("Occurrence", timeCell(d.run_time_utc, zone)),
    cell("Status", badge(d.status)),
    cell("Provider", d.provider || "—"),
    cell("Attempts", String(d.attempt_count)),
    cell("Sent at", d.sent_at ? formatUtc(d.sent_at) : "—"),
    cell("Error", d.error || "—"));
}

// ------------------------------------------------------------------ start

$("#sign-out").addEventListener("click", () => {
  token.clear();
  notify("Signed out.");
  location.hash = "#/";
  route();
});
window.addEventListener("hashchange", () => {
  const notice = $("#notice");
  if (notice.dataset.keep) notice.dataset.keep = "";
  else notify("");
  route();
});
route();
