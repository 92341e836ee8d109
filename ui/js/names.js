// Device names for the idents the pages show (a job names only its device's ident): each
// ident is looked up once (GET /devices/<id>) and kept for the page's session, so that a
// page of 50 jobs polled every 2 s costs no request once its devices are known.
import { get } from './api.js';
import { h, shortId } from './dom.js';
import { href } from './nav.js';

const names = new Map(); // ident -> name, or null for a device that is gone

export function remember(d) {
  if (d && d.entity_ident) names.set(d.entity_ident, d.name);
}

// Looks up the idents not known yet; a device that is gone is remembered as such.
export async function lookup(idents, signal) {
  const missing = [...new Set(idents)].filter((i) => i && !names.has(i));
  await Promise.all(missing.map((i) => get('/devices/' + i, { signal }).then(remember, (e) => {
    if (e.kind === 'notfound') names.set(i, null);
    else if (e.kind === 'aborted') throw e;
  })));
}

export function nameOf(ident) {
  return names.get(ident);
}

// A device as the pages show it: its name, linked to its page (its ident as the title).
export function deviceLink(ident) {
  const n = names.get(ident);
  return h('a', { href: href('devices/' + ident), class: 'device', 'data-device': ident, title: ident },
    n ? n : h('span', { class: 'mono' }, shortId(ident)));
}

// ---- devices from what a person types (docs/dashboard.md "The send form") ----

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SHORT_MIN = 6; // hex digits of a short ident, as docs/cli.md "Short idents"
const PARALLEL = 6; // look-ups in flight at once

// A short ident's digits with the dashes where a UUID has them, from its start (prefix) or
// its end: the text for ident_prefix / ident_suffix (docs/api.md "Lists"), or null.
export function shortPart(text, prefix) {
  const hex = String(text).replace(/-/g, '').toLowerCase();
  if (!/^[0-9a-f]+$/.test(hex) || hex.length < SHORT_MIN || hex.length > 32) return null;
  let out = '';
  for (let i = 0, k = prefix ? 0 : 32 - hex.length; i < hex.length; i++, k++) {
    if (i > 0 && (k === 8 || k === 12 || k === 16 || k === 20)) out += '-';
    out += hex[i];
  }
  return out;
}

// One entry: {ident} or {error} (unknown: 'unknown', several: 'ambiguous' with why).
// A UUID is taken as it is; else a device's name (a name wins over a short ident, as in
// rcs), else a short ident: 6 or more hex digits from the start or the end of exactly one
// device's ident.
async function resolveOne(text, signal) {
  if (UUID_RE.test(text)) return { ident: text.toLowerCase() };
  if (new TextEncoder().encode(text).length > 200) return { error: 'unknown', why: 'not a device name (at most 200 bytes)' };
  const byName = await get('/devices', { signal, query: { name: text, per_page: 2 } });
  if (byName.items.length === 1 && byName.total_items === 1) {
    remember(byName.items[0]);
    return { ident: byName.items[0].entity_ident };
  }
  if (byName.items.length > 1) {
    return { error: 'ambiguous', why: byName.total_items + ' devices have this name: give an ident' };
  }
  const found = new Set();
  let more = false;
  for (const [param, prefix] of [['ident_prefix', true], ['ident_suffix', false]]) {
    const part = shortPart(text, prefix);
    if (!part) continue;
    const p = await get('/devices', { signal, query: { [param]: part, per_page: 5 } });
    for (const d of p.items) {
      remember(d);
      found.add(d.entity_ident);
    }
    if (p.total_items > p.items.length) more = true;
  }
  if (found.size === 1 && !more) return { ident: [...found][0] };
  if (found.size) {
    return { error: 'ambiguous', why: (more ? 'more than ' + found.size : found.size) +
      ' device idents begin or end with it: give more of its digits' };
  }
  return { error: 'unknown', why: shortPart(text, true) ? 'no device has this name, nor an ident beginning or ending so'
    : 'no device has this name' };
}

// Resolves what a person typed (UUIDs, names, short idents) to device idents through the
// API, each distinct entry once, PARALLEL at a time. Answers {ok: true, idents} (in the
// order typed, each device once) or {ok: false, bad: [{text, error, why}]}: every unknown
// or ambiguous entry, in the order typed.
export async function resolveDevices(entries, signal) {
  const distinct = [...new Set(entries)];
  const out = new Map();
  let next = 0;
  const worker = async () => {
    while (next < distinct.length) {
      const t = distinct[next++];
      out.set(t, await resolveOne(t, signal));
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL, distinct.length) }, worker));
  const bad = distinct.filter((t) => out.get(t).error).map((t) => ({ text: t, ...out.get(t) }));
  if (bad.length) return { ok: false, bad };
  return { ok: true, idents: [...new Set(distinct.map((t) => out.get(t).ident))] };
}

// The field's message for resolveDevices' bad entries: the unknown ones, then the
// ambiguous ones, each named (the first 5 of each, and how many more).
export function unresolvedText(bad) {
  const part = (kind, head) => {
    const list = bad.filter((b) => b.error === kind);
    if (!list.length) return '';
    const shown = list.slice(0, 5).map((b) => '"' + b.text.slice(0, 60) + '"' +
      (list.length === 1 || kind === 'ambiguous' ? ' (' + b.why + ')' : ''));
    return head + ': ' + shown.join(', ') + (list.length > 5 ? ' and ' + (list.length - 5) + ' more' : '');
  };
  return [part('unknown', 'no such device'), part('ambiguous', 'ambiguous')].filter((x) => x).join('; ');
}
