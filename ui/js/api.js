// The REST API under /v3/commands, with the session's key (docs/dashboard.md).
// Every call has a timeout, so that no page waits forever; every failure is an ApiError
// whose kind says what the page shows: auth (401), forbidden, notfound, invalid (400),
// throttled (429), down (no answer, timeout, 502-504), or error.

export const BASE = '/v3/commands';
const KEY = 'rcs.dashboard.key';
const TIMEOUT_MS = 15000;

export class ApiError extends Error {
  constructor(kind, message, extra = {}) {
    super(message);
    this.kind = kind;
    this.status = extra.status || 0;
    this.code = extra.code || '';
    this.field = extra.field || '';
    this.retryAfter = extra.retryAfter || 0;
  }
}

// The key lives in sessionStorage: gone when the browser's tab or session ends.
export function getKey() {
  try {
    return sessionStorage.getItem(KEY) || '';
  } catch (e) {
    return '';
  }
}

export function setKey(k) {
  if (k) sessionStorage.setItem(KEY, k);
  else sessionStorage.removeItem(KEY);
  me = null;
}

// The session's key as GET /whoami answers it ({user, role, ...}), asked once per key:
// the pages show only what its role may do (docs/dashboard.md "Signing in").
let me = null;

export async function whoami(signal) {
  const key = getKey();
  if (!me || me.key !== key) me = { key, who: await api('GET', '/whoami', { signal }) };
  return me.who;
}

// Whether the session's role may send and pause, resume or cancel (operator, admin).
export function mayOperate(who) {
  return !!who && (who.role === 'operator' || who.role === 'admin');
}

// Whether the session's role may upload and delete artifacts (admin).
export function mayAdmin(who) {
  return !!who && who.role === 'admin';
}

const listeners = { unauthorized: [], reachable: [] };

// on('unauthorized', fn): a key was refused. on('reachable', fn(bool, message)).
export function on(what, fn) {
  listeners[what].push(fn);
}

function emit(what, ...args) {
  for (const fn of listeners[what]) fn(...args);
}

// api(method, path, opts): the answer's JSON (null for 204). opts: body (an object),
// bodyText (JSON already written), key (instead of the session's), signal, timeout, query.
export async function api(method, path, opts = {}) {
  const headers = { 'api-key': opts.key !== undefined ? opts.key : getKey() };
  let body;
  if (opts.bodyText !== undefined) body = opts.bodyText;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let url = BASE + path;
  if (opts.query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query)) {
      if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    }
    const s = q.toString();
    if (s) url += (url.includes('?') ? '&' : '?') + s;
  }
  const ctl = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ctl.abort();
  }, opts.timeout || TIMEOUT_MS);
  const outer = opts.signal;
  const onOuter = () => ctl.abort();
  if (outer) {
    if (outer.aborted) ctl.abort();
    else outer.addEventListener('abort', onOuter, { once: true });
  }
  let resp;
  let text;
  try {
    resp = await fetch(url, { method, headers, body, signal: ctl.signal, cache: 'no-store' });
    text = await resp.text();
  } catch (e) {
    if (outer && outer.aborted) throw new ApiError('aborted', 'cancelled');
    const msg = timedOut
      ? 'the coordinator did not answer within ' + Math.round((opts.timeout || TIMEOUT_MS) / 1000) + ' s'
      : 'the coordinator cannot be reached (' + (e && e.message ? e.message : 'network error') + ')';
    emit('reachable', false, msg);
    throw new ApiError('down', msg);
  } finally {
    clearTimeout(timer);
    if (outer) outer.removeEventListener('abort', onOuter);
  }
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (e) {
    json = null;
  }
  if (resp.status >= 502 && resp.status <= 504) {
    const msg = 'the coordinator is unavailable (HTTP ' + resp.status + ')';
    emit('reachable', false, msg);
    throw new ApiError('down', msg, { status: resp.status });
  }
  emit('reachable', true, '');
  if (resp.ok) return json;
  const err = json && json.error ? json.error : {};
  const extra = {
    status: resp.status,
    code: err.code || '',
    field: err.details && err.details.field ? err.details.field : '',
    retryAfter: Number(resp.headers.get('Retry-After')) || 0,
  };
  const message = err.message || 'HTTP ' + resp.status;
  let kind = 'error';
  if (resp.status === 401) kind = 'auth';
  else if (resp.status === 403) kind = 'forbidden';
  else if (resp.status === 404) kind = 'notfound';
  else if (resp.status === 400) kind = 'invalid';
  else if (resp.status === 429) kind = 'throttled';
  else if (resp.status === 503) kind = 'down';
  const e = new ApiError(kind, message, extra);
  if (kind === 'auth' && opts.key === undefined) emit('unauthorized', e);
  throw e;
}

export const get = (path, opts = {}) => api('GET', path, opts);
