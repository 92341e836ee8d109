// Small DOM helpers: elements are built with textContent only, never from HTML strings.
import { HINTS, LABELS, STATUSES, TERMINAL } from './status.js';

// h('a', {href, class, onclick, 'data-x': 1}, child, ...): an element
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// fill(el, child, ...): el's children replaced by these (nulls left out)
export function fill(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// A status by the API's name, its meaning in plain words as the title (docs/dashboard.md).
export function statusBadge(status) {
  return h('span', { class: 'badge st-' + status, 'data-status': status, title: HINTS[status] || status },
    LABELS[status] || status);
}

// The statuses with their plain words, for the pages that show several.
export function statusLegend() {
  return h('details', { class: 'legend small' }, h('summary', {}, 'What the statuses mean'),
    h('dl', { class: 'facts' }, STATUSES.map((s) => [h('dt', {}, statusBadge(s)), h('dd', {}, HINTS[s])])));
}

export function groupBadge(status) {
  return h('span', { class: 'badge gs-' + status, 'data-group-status': status }, status);
}

export function shortId(id) {
  return id ? id.slice(-12) : '';
}

function pad(n) {
  return String(n).padStart(2, '0');
}

// Unix seconds as local "YYYY-MM-DD HH:MM:SS"
export function fmtTime(s) {
  if (s === null || s === undefined) return '—';
  const d = new Date(s * 1000);
  return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
    pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
}

export function fmtAgo(s) {
  if (s === null || s === undefined) return '—';
  const d = Math.round(Date.now() / 1000 - s);
  if (d < 0) return 'in ' + fmtDuration(-d);
  return fmtDuration(d) + ' ago';
}

export function fmtDuration(d) {
  if (d < 60) return d + ' s';
  if (d < 3600) return Math.floor(d / 60) + ' min';
  if (d < 86400) return Math.floor(d / 3600) + ' h ' + (Math.floor(d / 60) % 60) + ' min';
  return Math.floor(d / 86400) + ' d';
}

export function timeEl(s) {
  return h('time', { title: fmtAgo(s) }, fmtTime(s));
}

// Bytes for people, in units of 1024 as the CLI writes them: "512 B", "12.3 MiB".
export function fmtBytes(n) {
  let v = Math.max(0, Number(n) || 0);
  if (v < 1024) return Math.floor(v) + ' B';
  const units = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let u = 0;
  v /= 1024;
  while (v >= 1023.95 && u + 1 < units.length) {
    v /= 1024;
    u += 1;
  }
  return v.toFixed(1) + ' ' + units[u];
}

export function num(n) {
  return Number(n || 0).toLocaleString('en-US');
}

// The counts of a group: `counts` (latest attempt per device) when the coordinator gives
// it, else `statuses`.
export function groupCounts(g) {
  return (g && (g.counts || g.statuses)) || {};
}

// A group's progress, one count per device by its latest attempt (docs/api.md "Progress"):
// the API's `progress`, or made from the counts of a coordinator without it.
export function groupProgress(g) {
  const counts = groupCounts(g);
  const sum = STATUSES.reduce((a, s) => a + (counts[s] || 0), 0);
  const p = (g && g.progress) || {};
  const failed = (counts.edge_error || 0) + (counts.expired || 0);
  return {
    // without progress: the counts' sum (of devices, or of jobs when there is no total)
    devices: p.devices !== undefined ? p.devices
      : (g && g.counts) || !g || g.total === undefined ? sum : g.total,
    ended: p.ended !== undefined ? p.ended : finishedCount(counts),
    failed: p.failed !== undefined ? p.failed : failed,
    held: p.held || 0,
    notSent: p.not_sent || 0,
    retries: p.retries || 0,
    eta: typeof p.release_eta_s === 'number' ? p.release_eta_s : null,
  };
}

// What a group's progress comes to, in words that follow its status: "completed", never
// "failed" for jobs cancelled one by one; what an abort or a cancel kept from going out;
// the time the rollout's pace still needs.
export function progressWords(g) {
  const p = groupProgress(g);
  const words = [];
  if (g.status === 'completed') words.push(p.failed > 0 ? 'completed with failures' : 'completed');
  else if (g.status === 'aborted' || g.status === 'cancelled') words.push(g.status);
  else if (g.status === 'paused') words.push('paused: nothing is released until it is resumed');
  if (p.notSent > 0) words.push(num(p.notSent) + ' cancelled before they went out');
  if (p.held > 0 && g.status !== 'paused') words.push(num(p.held) + ' held for release');
  if (p.held > 0 && p.eta !== null && g.status === 'running') {
    words.push('all released in about ' + fmtDuration(p.eta) + " at the rollout's pace");
  }
  if (p.retries > 0) words.push(num(p.retries) + (p.retries === 1 ? ' retry' : ' retries'));
  return words.join(' · ');
}

// A stacked bar of counts per status, with a text summary.
export function stackedBar(counts, total) {
  const sum = STATUSES.reduce((a, s) => a + (counts[s] || 0), 0);
  const denom = Math.max(total || 0, sum, 1);
  const bar = h('div', { class: 'stack', role: 'img' });
  const parts = [];
  for (const s of STATUSES) {
    const n = counts[s] || 0;
    if (!n) continue;
    const seg = h('span', { class: 'seg st-' + s, title: (LABELS[s] || s) + ' (' + HINTS[s] + '): ' + num(n) });
    seg.style.width = (100 * n / denom).toFixed(3) + '%';
    bar.append(seg);
    parts.push((LABELS[s] || s) + ' ' + num(n));
  }
  bar.setAttribute('aria-label', parts.join(', ') || 'no jobs');
  return bar;
}

export function finishedCount(counts) {
  let n = 0;
  for (const s of TERMINAL) n += counts[s] || 0;
  return n;
}

// One bar per status present, with its count and share.
export function statusBars(counts, total) {
  const sum = STATUSES.reduce((a, s) => a + (counts[s] || 0), 0);
  const denom = Math.max(total || 0, sum, 1);
  const list = h('div', { class: 'bars' });
  for (const s of STATUSES) {
    const n = counts[s] || 0;
    if (!n) continue;
    const fill = h('span', { class: 'fill st-' + s });
    fill.style.width = (100 * n / denom).toFixed(3) + '%';
    list.append(h('div', { class: 'bar-row', 'data-status': s, 'data-count': n },
      statusBadge(s),
      h('div', { class: 'track' }, fill),
      h('span', { class: 'count' }, num(n),
        h('span', { class: 'pct' }, ' ' + Math.round(100 * n / denom) + ' %'))));
  }
  if (!list.firstChild) list.append(h('p', { class: 'muted' }, 'No jobs in this group.'));
  return list;
}

// A pager: "Page p of n · total items" with previous/next; go(page) navigates.
export function pager(p, go, what) {
  const page = p.page || 1;
  const pages = Math.max(p.total_pages || 0, 1);
  const nav = h('nav', { class: 'pager', 'aria-label': 'pages' });
  nav.append(
    h('button', { type: 'button', disabled: page <= 1, onclick: () => go(page - 1), 'data-go': 'prev' }, '‹ Previous'),
    h('span', { class: 'pageinfo' }, 'Page ' + num(page) + ' of ' + num(pages) + ' · ' +
      num(p.total_items) + ' ' + what),
    h('button', { type: 'button', disabled: page >= pages, onclick: () => go(page + 1), 'data-go': 'next' }, 'Next ›'));
  return nav;
}

// A message in place of a page's content: never a blank page.
export function notice(kind, text, ...more) {
  return h('div', { class: 'notice ' + kind, role: kind === 'error' ? 'alert' : 'status' }, text, ...more);
}

export function chips(list, cls) {
  const el = h('span', { class: 'chips' });
  for (const t of list || []) el.append(h('span', { class: 'chip ' + (cls || '') }, t));
  return el;
}

// A column heading that sorts the list by key (docs/api.md "Lists"): ascending first, then
// descending; link(sort) is the address of the list so sorted. Used as a header of table().
export function sortable(text, key, current, link, cls) {
  const desc = current === '-' + key;
  const asc = current === key;
  const next = asc ? '-' + key : key;
  return {
    class: cls, sort: asc ? 'ascending' : desc ? 'descending' : null,
    text: h('a', { href: link(next), class: 'sort', 'data-sort': key, title: 'sort by ' + text },
      text, h('span', { class: 'arrow', 'aria-hidden': 'true' }, asc ? ' ▲' : desc ? ' ▼' : ' ↕')),
  };
}

export function table(headers, rows, cls) {
  return h('div', { class: 'table-wrap' },
    h('table', { class: cls || '' },
      h('thead', {}, h('tr', {}, headers.map((x) =>
        typeof x === 'string' ? h('th', {}, x)
          : h('th', { class: x.class, 'aria-sort': x.sort }, x.text)))),
      h('tbody', {}, rows)));
}

// A definition list from [label, value] pairs (values: text or nodes); nulls left out.
export function dl(pairs) {
  const el = h('dl', { class: 'facts' });
  for (const [k, v] of pairs) {
    if (v === undefined) continue;
    el.append(h('dt', {}, k), h('dd', {}, v === null ? '—' : v));
  }
  return el;
}
