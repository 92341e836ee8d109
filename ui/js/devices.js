// Devices: the inventory, paged, with online state and tags; filters by name, tag and state,
// sorts by a column; and one device with its record and its jobs.
import { get } from './api.js';
import {
  chips, dl, fill, fmtAgo, fmtTime, h, notice, pager, shortId, sortable, table, timeEl,
} from './dom.js';
import { jobsBox } from './jobs.js';
import { go, href, retryNotice } from './nav.js';
import { remember } from './names.js';

const PER_PAGE = 50;
const TAG_RE = /^[A-Za-z0-9_.:/-]{1,64}$/;
const SORT_RE = /^-?(created_at|update_at|name)$/;

function lastSeen(d) {
  return d.last_seen ? h('time', { title: fmtTime(d.last_seen) }, fmtAgo(d.last_seen)) : 'never';
}

function onlineBadge(d) {
  return h('span', { class: 'online ' + (d.online ? 'on' : 'off'), 'data-online': d.online ? 'true' : 'false' },
    d.online ? 'online' : 'offline');
}

export async function list(ctx) {
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  const tag = ctx.query.get('tag') || '';
  const name = ctx.query.get('name') || '';
  const online = ctx.query.get('online') || '';
  const sort = SORT_RE.test(ctx.query.get('sort') || '') ? ctx.query.get('sort') : '';
  const nameIn = h('input', { id: 'name-filter', name: 'name', value: name, placeholder: 'a device name', size: 14, autocomplete: 'off' });
  const tagIn = h('input', { id: 'tag-filter', name: 'tag', value: tag, placeholder: 'any tag', size: 12 });
  const onlineSel = h('select', { id: 'online-filter', name: 'online' },
    h('option', { value: '' }, 'online or not'),
    h('option', { value: 'true', selected: online === 'true' }, 'online'),
    h('option', { value: 'false', selected: online === 'false' }, 'offline'));
  const msg = h('span', { class: 'field-error', role: 'alert' });
  const form = h('form', { class: 'toolbar', novalidate: true },
    h('label', { class: 'filter' }, 'Name ', nameIn),
    h('label', { class: 'filter' }, 'Tag ', tagIn), h('label', { class: 'filter' }, 'State ', onlineSel),
    h('button', { type: 'submit', id: 'filter' }, 'Filter'), msg);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = tagIn.value.trim();
    const n = nameIn.value.trim();
    if (t && !TAG_RE.test(t)) {
      msg.textContent = 'A tag is 1-64 letters, digits or _ - . : /';
      return;
    }
    if (new TextEncoder().encode(n).length > 200) {
      msg.textContent = 'A name is at most 200 bytes';
      return;
    }
    go('devices', { name: n, tag: t, online: onlineSel.value, sort, page: 1 });
  });
  onlineSel.addEventListener('change', () => form.requestSubmit());
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading devices…'));
  ctx.el.append(h('h1', {}, 'Devices'), form,
    h('p', { class: 'small muted' }, 'The name filter finds the devices of exactly this name.'), body);
  const link = (k) => href('devices', { name, tag, online, sort: k });
  const load = async () => {
    const p = await get('/devices', {
      signal: ctx.signal, query: { name, tag, online, sort, page, per_page: PER_PAGE },
    });
    for (const d of p.items) remember(d);
    const rows = p.items.map((d) => h('tr', { 'data-device': d.entity_ident },
      h('td', {}, h('a', { href: href('devices/' + d.entity_ident) }, h('strong', {}, d.name)),
        h('div', { class: 'mono small muted' }, shortId(d.entity_ident))),
      h('td', {}, onlineBadge(d)),
      h('td', {}, chips(d.tags), chips(d.reported_tags, 'reported')),
      h('td', { class: 'opt' }, lastSeen(d)),
      h('td', { class: 'opt' }, d.agent_version || '—'),
      h('td', { class: 'opt' }, timeEl(d.created_at))));
    fill(body,
      p.items.length ? table([sortable('Device', 'name', sort, link), 'State', 'Tags (reported in grey)',
        { text: 'Last seen', class: 'opt' }, { text: 'Agent', class: 'opt' },
        sortable('Added', 'created_at', sort, link, 'opt')], rows, 'devices')
        : notice('info', tag || online || name ? 'No device matches these filters.' : 'No devices in the inventory yet.'),
      pager(p, (n) => go('devices', { name, tag, online, sort, page: n }), 'devices'));
  };
  try {
    await load();
  } catch (e) {
    if (e.kind === 'aborted') throw e;
    fill(body, retryNotice(e, 'devices'));
  }
  ctx.poll(load, 10000);
}

// What the device says it runs (docs/api.md "Devices"): its attributes, one key a line.
function attributes(a) {
  const pairs = Object.entries(a || {});
  if (!pairs.length) return '—';
  const el = dl(pairs.map(([k, v]) => [k, v]));
  el.classList.add('attributes');
  return el;
}

// One device: its record and its jobs (GET /jobs?entity_ident=), both refreshed.
export async function show(ctx) {
  const id = ctx.params[0];
  ctx.el.append(h('p', { class: 'loading' }, 'Loading the device…'));
  let d = await get('/devices/' + id, { signal: ctx.signal });
  remember(d);
  const head = h('div', { class: 'device-head' });
  const draw = () => {
    fill(head,
      h('h1', {}, 'Device ', h('span', { id: 'device-name' }, d.name), ' ', onlineBadge(d)),
      h('p', { class: 'mono muted' }, d.entity_ident),
      dl([
        ['Operator tags', d.tags && d.tags.length ? chips(d.tags) : '—'],
        ['Reported tags', d.reported_tags && d.reported_tags.length ? chips(d.reported_tags, 'reported') : '—'],
        ['Last seen', d.last_seen ? h('span', {}, fmtTime(d.last_seen), ' (', fmtAgo(d.last_seen), ')') : 'never'],
        ['Agent', d.agent_version || '—'],
        ['Attributes', attributes(d.attributes)],
        ['Added', timeEl(d.created_at)],
        ['Updated', timeEl(d.update_at)],
      ]));
  };
  draw();
  const { box, load } = jobsBox(ctx, { entity_ident: id }, 'devices/' + id, {}, true);
  fill(ctx.el, head, h('h2', {}, 'Jobs'), box);
  await load().catch((e) => {
    if (e.kind === 'aborted') throw e;
  });
  let last = JSON.stringify(d);
  ctx.poll(async () => {
    d = await get('/devices/' + id, { signal: ctx.signal });
    const now = JSON.stringify(d);
    if (now !== last) {
      last = now;
      draw();
    }
    await load();
  }, 5000);
}
