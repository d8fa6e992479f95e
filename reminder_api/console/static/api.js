// The REST API as the console calls it: the user's bearer token on every call, RFC 9457
// problem+json answers turned into a Problem (docs/api.md, "Errors").

const TOKEN_KEY = "reminders.console.token";

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** An error answer: `status`, `title`, `detail` and the field problems of `errors`
 * ([{field, message}], field names such as "start_local", "dst.nonexistent", "exdates.0"). */
export class Problem extends Error {
  constructor(status, body) {
    const title = (body && body.title) || `HTTP ${status}`;
    super(title);
    this.status = status;
    this.title = title;
    this.detail = (body && body.detail) || "";
    this.errors = Array.isArray(body && body.errors) ? body.errors : [];
  }
}

/** Call `method path` with an optional JSON `body`, `etag` (sent as If-Match), an
 * `idempotencyKey` and an AbortSignal; resolve to {data, etag}, or reject with a Problem
 * (status 0 when the API could not be reached) or the AbortError of `signal`. */
export async function call(method, path, { body, etag, idempotencyKey, signal } = {}) {
  const headers = { Accept: "application/json, application/problem+json" };
  const bearer = token.get();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (etag) headers["If-Match"] = etag;
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new Problem(0, { title: "The API did not answer", detail: String(error.message) });
  }
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (!response.ok) {
    throw new Problem(response.status, data || { title: response.statusText });
  }
  return { data, etag: response.headers.get("ETag") };
}

/** A random idempotency key (works outside secure contexts, unlike randomUUID). */
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
