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

// The devices of a list send as typed: UUIDs, names or short idents (resolved through the
// API when the form is sent: names.js resolveDevices), separated by spaces, commas,
// semicolons or lines; a name holding any of these is written in double quotes ("pump 7").
// {ok, entries} or {ok: false, error}
export function parseDeviceList(text) {
  const t = String(text);
  const list = [];
  const re = /"([^"]*)"|[^\s,;"]+|"/g;
  let m;
  while ((m = re.exec(t)) !== null) {
    if (m[0] === '"') return { ok: false, error: 'a quote (") is not closed' };
    const v = m[1] !== undefined ? m[1].trim() : m[0];
    if (v) list.push(v);
  }
  if (!list.length) return { ok: false, error: 'give at least one device' };
  if (list.length > 10000) return { ok: false, error: 'at most 10,000 devices in one send' };
  for (const x of list) {
    if (new TextEncoder().encode(x).length > 200) {
      return { ok: false, error: '"' + x.slice(0, 40) + '…" is neither a device ident nor a name (at most 200 bytes)' };
    }
  }
  return { ok: true, entries: list };
}

// ---- rollouts (docs/api.md "Rollouts"): the members of a bulk send, and their words ----

export const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'];
const HHMM_RE = /^([01][0-9]|2[0-3]):[0-5][0-9]$/;

// An integer from min to max, written in digits: {ok, value} or {ok: false, error}
export function checkInt(text, min, max) {
  const t = String(text).trim();
  if (!INT_RE.test(t) || Number(t) < min || Number(t) > max) {
    return { ok: false, error: 'an integer from ' + min + ' to ' + max };
  }
  return { ok: true, value: Number(t) };
}

// A number from min to max: {ok, value} or {ok: false, error}
export function checkNum(text, min, max) {
  const t = String(text).trim();
  if (!NUM_RE.test(t) || !Number.isFinite(Number(t)) || Number(t) < min || Number(t) > max) {
    return { ok: false, error: 'a number from ' + min + ' to ' + max };
  }
  return { ok: true, value: Number(t) };
}

// The rollout members of a bulk send from the form's texts (v: rate, expBase, expFactor,
// expAfter, abortPct, abortMin, retryMax, retryBackoff, retryFactor, days (a list), start,
// duration, offset, continuous (a boolean)); an empty text is "not given". Answers
// {members, errors}: members as the API takes them (only those given), errors {key: text}.
export function rolloutMembers(v) {
  const members = {};
  const errors = {};
  const given = (k) => v[k] !== undefined && String(v[k]).trim() !== '';
  const take = (k, r) => {
    if (!r.ok) errors[k] = r.error;
    return r.value;
  };
  const rollout = {};
  if (given('rate')) rollout.max_per_minute = take('rate', checkInt(v.rate, 1, 100000));
  if (given('expBase') || given('expFactor') || given('expAfter')) {
    const e = {};
    for (const [k, m, lo, hi, num] of [['expBase', 'base_per_minute', 1, 100000, false],
      ['expFactor', 'factor', 1, 10, true], ['expAfter', 'after_succeeded', 1, 1000000, false]]) {
      if (!given(k)) errors[k] = 'needed for an exponential pace (with the two others)';
      else e[m] = take(k, num ? checkNum(v[k], lo, hi) : checkInt(v[k], lo, hi));
    }
    rollout.exponential = e;
  }
  if (Object.keys(rollout).length) members.rollout = rollout;
  if (given('abortPct') || given('abortMin')) {
    const a = {};
    if (!given('abortPct')) errors.abortPct = 'the share of failures that stops the send';
    else a.failure_percent = take('abortPct', checkNum(v.abortPct, 0, 100));
    if (given('abortMin')) a.min_finished = take('abortMin', checkInt(v.abortMin, 1, 1000000));
    members.abort = a;
  }
  if (given('retryMax') || given('retryBackoff') || given('retryFactor')) {
    const r = {};
    if (!given('retryMax')) errors.retryMax = 'the number of attempts in all (1 to 10)';
    else r.max_attempts = take('retryMax', checkInt(v.retryMax, 1, 10));
    if (given('retryBackoff')) r.backoff_s = take('retryBackoff', checkInt(v.retryBackoff, 0, 86400));
    if (given('retryFactor')) r.backoff_factor = take('retryFactor', checkNum(v.retryFactor, 1, 10));
    members.retry = r;
  }
  const days = (v.days || []).filter((d) => DAYS.includes(d));
  if (days.length || given('start') || given('duration')) {
    const w = { days };
    if (!days.length) errors.days = 'choose at least one day';
    if (!given('start')) errors.start = 'the time the window opens (HH:MM)';
    else if (!HHMM_RE.test(String(v.start).trim())) errors.start = 'a time of day as HH:MM, like 02:00';
    else w.start = String(v.start).trim();
    if (!given('duration')) errors.duration = 'the window\'s length in minutes (1 to 1440)';
    else w.duration_min = take('duration', checkInt(v.duration, 1, 1440));
    if (given('offset')) {
      const t = String(v.offset).trim();
      const r = /^[+-]?(0|[1-9][0-9]*)$/.test(t) && Number(t) >= -720 && Number(t) <= 840
        ? { ok: true, value: Number(t) } : { ok: false, error: 'minutes from UTC, from -720 to 840' };
      w.utc_offset_min = take('offset', r);
    }
    members.window = w;
  }
  if (v.continuous) members.continuous = true;
  return { members, errors };
}

function fmtNum(n) {
  return Number(n).toLocaleString('en-US');
}

function fmtMinutes(m) {
  if (m < 60 || m % 60 !== 0 && m < 120) return m + ' min';
  return Math.floor(m / 60) + ' h' + (m % 60 ? ' ' + (m % 60) + ' min' : '');
}

function fmtSeconds(s) {
  if (s < 60 || s % 60) return s + ' s';
  if (s < 3600 || s % 3600) return s / 60 + ' min';
  return s / 3600 + ' h';
}

// A group's settings in words, as the group page shows them.
export function describeRollout(r) {
  if (!r) return '';
  const e = r.exponential;
  if (!e) return fmtNum(r.max_per_minute) + ' a minute';
  const mult = { 2: 'doubling', 3: 'tripling' }[e.factor] || 'times ' + e.factor;
  return fmtNum(e.base_per_minute) + ' a minute, ' + mult + ' with every ' + fmtNum(e.after_succeeded) +
    ' succeeded job' + (e.after_succeeded === 1 ? '' : 's') +
    (r.max_per_minute ? ', up to ' + fmtNum(r.max_per_minute) + ' a minute' : '');
}

export function describeAbort(a) {
  if (!a) return '';
  const min = a.min_finished || 1;
  return 'stop when ' + a.failure_percent + ' % or more have failed, once ' + fmtNum(min) +
    ' device' + (min === 1 ? ' has' : 's have') + ' finished';
}

export function describeRetry(r) {
  if (!r) return '';
  const n = r.max_attempts;
  const b = r.backoff_s !== undefined ? r.backoff_s : 30;
  const f = r.backoff_factor !== undefined ? r.backoff_factor : 2;
  if (n <= 1) return 'no retry (1 attempt)';
  return 'up to ' + n + ' attempts, the next after ' + fmtSeconds(b) +
    (f !== 1 && n > 2 ? ', then ' + f + ' times longer each time' : '');
}

export function describeWindow(w) {
  if (!w) return '';
  const o = w.utc_offset_min || 0;
  const abs = Math.abs(o);
  const zone = 'UTC' + (o < 0 ? '-' : '+') + String(Math.floor(abs / 60)).padStart(2, '0') + ':' +
    String(abs % 60).padStart(2, '0');
  const days = w.days.length === 7 ? 'every day' : w.days.join(', ');
  return days + ', from ' + w.start + ' for ' + fmtMinutes(w.duration_min) + ' (' + zone + ')';
}
