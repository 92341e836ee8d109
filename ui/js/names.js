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
