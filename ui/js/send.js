// The send form's checks, by the types of a task's variables_info (docs/api.md, "Jobs"):
// each value is checked here before anything is sent, and kept as the JSON text to send,
// so that an integer beyond 2^53 reaches the coordinator exactly as typed.

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const TS_MAX = 2n ** 63n - 2n;
const INT_RE = /^-?(0|[1-9][0-9]*)$/;
const NUM_RE = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/;
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const TAG_RE = /^[A-Za-z0-9_.:/-]{1,64}$/;
export const MAX_STRING = 65536;

// checkValue(type, text): {ok: true, json} (json: the value as JSON text) or {ok: false, error}
export function checkValue(type, text) {
  const t = String(text).trim();
  switch (type) {
    case 'string': {
      const n = new TextEncoder().encode(String(text)).length;
      if (n > MAX_STRING) return { ok: false, error: 'at most ' + MAX_STRING + ' bytes (this is ' + n + ')' };
      return { ok: true, json: JSON.stringify(String(text)) };
    }
    case 'integer': {
      if (!INT_RE.test(t)) return { ok: false, error: 'an integer is expected, like 42 or -7' };
      const v = BigInt(t);
      if (v < INT64_MIN || v > INT64_MAX) return { ok: false, error: 'out of range (-2^63 to 2^63-1)' };
      return { ok: true, json: t };
    }
    case 'number': {
      if (!NUM_RE.test(t) || !Number.isFinite(Number(t))) {
        return { ok: false, error: 'a number is expected, like 3.14 or -2e3' };
      }
      return { ok: true, json: t };
    }
    case 'boolean':
      if (t === 'true' || t === 'false') return { ok: true, json: t };
      return { ok: false, error: 'choose true or false' };
    case 'timestamp': {
      let v;
      if (INT_RE.test(t)) {
        v = BigInt(t);
      } else {
        const ms = parseDate(t);
        if (ms === null) {
          return { ok: false, error: 'Unix seconds (like 1767225600) or a date and time (2026-12-31 23:59) are expected' };
        }
        v = BigInt(Math.floor(ms / 1000));
      }
      if (v < 0n || v > TS_MAX) return { ok: false, error: 'out of range (0 to 2^63-2 seconds)' };
      return { ok: true, json: v.toString() };
    }
    default:
      return { ok: false, error: 'unknown type ' + type };
  }
}

// "YYYY-MM-DD HH:MM[:SS]" or "YYYY-MM-DDTHH:MM[:SS][Z|±HH:MM]", local time unless an
// offset is given: milliseconds, or null.
export function parseDate(t) {
  const m = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?(Z|[+-]\d{2}:\d{2})?$/.exec(t);
  if (!m) return null;
  const [Y, M, D, hh, mm, ss] = [m[1], m[2], m[3], m[4], m[5], m[6] || '0'].map(Number);
  if (M < 1 || M > 12 || D < 1 || D > 31 || hh > 23 || mm > 59 || ss > 59) return null;
  let ms;
  if (m[7]) {
    ms = Date.UTC(Y, M - 1, D, hh, mm, ss);
    if (m[7] !== 'Z') {
      const sign = m[7][0] === '-' ? -1 : 1;
      ms -= sign * (Number(m[7].slice(1, 3)) * 60 + Number(m[7].slice(4, 6))) * 60000;
    }
  } else {
    ms = new Date(Y, M - 1, D, hh, mm, ss).getTime();
  }
  return Number.isFinite(ms) ? ms : null;
}

// A request body's JSON text: fields (plain values) and variables ({name: JSON text}).
export function bodyText(fields, variables) {
  const o = JSON.stringify(fields);
  if (variables === null) return o;
  const v = '{' + Object.entries(variables).map(([k, j]) => JSON.stringify(k) + ':' + j).join(',') + '}';
  return o === '{}' ? '{"variables":' + v + '}' : o.slice(0, -1) + ',"variables":' + v + '}';
}

// Device idents from a text of idents separated by spaces, commas or lines:
// {ok, idents} or {ok: false, error}
export function parseIdents(text) {
  const list = String(text).split(/[\s,;]+/).filter((x) => x);
  if (!list.length) return { ok: false, error: 'give at least one device ident' };
  if (list.length > 10000) return { ok: false, error: 'at most 10,000 devices in one send' };
  for (const x of list) {
    if (!UUID_RE.test(x)) return { ok: false, error: '"' + x.slice(0, 40) + '" is not a device ident (a UUID)' };
  }
  return { ok: true, idents: list };
}
