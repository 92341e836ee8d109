// Devices: the inventory, paged, with online state and tags; filters by tag and state.
import { get } from './api.js';
import { chips, clear, fill, fmtAgo, fmtTime, h, notice, pager, shortId, table } from './dom.js';
import { errorText, go } from './nav.js';

const PER_PAGE = 50;
const TAG_RE = /^[A-Za-z0-9_.:/-]{1,64}$/;

export async function list(ctx) {
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  const tag = ctx.query.get('tag') || '';
  const online = ctx.query.get('online') || '';
  const tagIn = h('input', { id: 'tag-filter', name: 'tag', value: tag, placeholder: 'any tag', size: 12 });
  const onlineSel = h('select', { id: 'online-filter', name: 'online' },
    h('option', { value: '' }, 'online or not'),
    h('option', { value: 'true', selected: online === 'true' }, 'online'),
    h('option', { value: 'false', selected: online === 'false' }, 'offline'));
  const msg = h('span', { class: 'field-error', role: 'alert' });
  const form = h('form', { class: 'toolbar', novalidate: true },
    h('label', { class: 'filter' }, 'Tag ', tagIn), h('label', { class: 'filter' }, 'State ', onlineSel),
    h('button', { type: 'submit' }, 'Filter'), msg);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = tagIn.value.trim();
    if (t && !TAG_RE.test(t)) {
      msg.textContent = 'A tag is 1-64 letters, digits or _ - . : /';
      return;
    }
    go('devices', { tag: t, online: onlineSel.value, page: 1 });
  });
  onlineSel.addEventListener('change', () => form.requestSubmit());
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading devices…'));
  ctx.el.append(h('h1', {}, 'Devices'), form, body);
  const load = async () => {
    const p = await get('/devices', {
      signal: ctx.signal, query: { tag, online, page, per_page: PER_PAGE },
    });
    const rows = p.items.map((d) => h('tr', { 'data-device': d.entity_ident },
      h('td', {}, h('strong', {}, d.name), h('div', { class: 'mono small muted' }, shortId(d.entity_ident))),
      h('td', {}, h('span', { class: 'online ' + (d.online ? 'on' : 'off'), 'data-online': d.online ? 'true' : 'false' },
        d.online ? 'online' : 'offline')),
      h('td', {}, chips(d.tags), chips(d.reported_tags, 'reported')),
      h('td', { class: 'opt' }, d.last_seen ? h('time', { title: fmtTime(d.last_seen) }, fmtAgo(d.last_seen)) : 'never'),
      h('td', { class: 'opt' }, d.agent_version || '—')));
    fill(body,
      p.items.length ? table(['Device', 'State', 'Tags (reported in grey)', { text: 'Last seen', class: 'opt' },
        { text: 'Agent', class: 'opt' }], rows, 'devices')
        : notice('info', tag || online ? 'No device matches these filters.' : 'No devices in the inventory yet.'),
      pager(p, (n) => go('devices', { tag, online, page: n }), 'devices'));
  };
  try {
    await load();
  } catch (e) {
    if (e.kind === 'aborted') throw e;
    fill(body, notice('error', errorText(e, 'devices')));
  }
  ctx.poll(load, 10000);
}
