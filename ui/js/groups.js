// Groups (bulk sends): the list with a progress bar each, and one group with a bar per
// status and its jobs, both refreshed by polling the REST API.
import { api, get, mayOperate } from './api.js';
import {
  clear, fill, dl, fmtTime, groupBadge, groupCounts, groupProgress, h, notice, num, pager,
  progressWords, shortId, sortable, stackedBar, statusBars, table, timeEl,
} from './dom.js';
import { GROUP_STATUSES } from './status.js';
import { describeAbort, describeRetry, describeRollout, describeWindow } from './send.js';
import { jobsBox } from './jobs.js';
import { errorText, go, href, retryNotice } from './nav.js';

const PER_PAGE = 20;

// "19 / 25 devices ended · aborted · 5 cancelled before they went out" (docs/dashboard.md)
function progressText(g) {
  const p = groupProgress(g);
  const words = progressWords(g);
  return num(p.ended) + ' / ' + num(p.devices) + ' devices ended' + (words ? ' · ' + words : '');
}

export async function list(ctx) {
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  const sort = /^-?created_at$/.test(ctx.query.get('sort') || '') ? ctx.query.get('sort') : '';
  const name = ctx.query.get('name') || '';
  const status = GROUP_STATUSES.includes(ctx.query.get('status')) ? ctx.query.get('status') : '';
  // filters of GET /groups (docs/api.md "Bulk sends and groups"): "which rollouts are paused?"
  const nameIn = h('input', { id: 'group-name-filter', name: 'name', value: name, placeholder: 'a group name', size: 14, autocomplete: 'off' });
  const statusSel = h('select', { id: 'group-status-filter', name: 'status' },
    h('option', { value: '' }, 'any status'),
    GROUP_STATUSES.map((s) => h('option', { value: s, selected: s === status }, s)));
  const msg = h('span', { class: 'field-error', role: 'alert' });
  const form = h('form', { class: 'toolbar', novalidate: true },
    h('label', { class: 'filter' }, 'Name ', nameIn), h('label', { class: 'filter' }, 'Status ', statusSel),
    h('button', { type: 'submit', id: 'group-filter' }, 'Filter'), msg);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const n = nameIn.value.trim();
    if (new TextEncoder().encode(n).length > 200) {
      msg.textContent = 'A name is at most 200 bytes';
      return;
    }
    go('groups', { name: n, status: statusSel.value, sort, page: 1 });
  });
  statusSel.addEventListener('change', () => form.requestSubmit());
  ctx.el.append(h('h1', {}, 'Groups'),
    h('p', { class: 'muted' }, 'Every bulk send with a group name. Bars show its devices per status, each by its latest attempt.'), form);
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading groups…'));
  ctx.el.append(body);
  const load = async () => {
    const p = await get('/groups', { signal: ctx.signal, query: { name, status, sort, page, per_page: PER_PAGE } });
    // the counts of each group on this page (at most PER_PAGE requests, in parallel)
    const details = await Promise.all(p.items.map((g) =>
      get('/groups/' + g.ident, { signal: ctx.signal }).catch((e) => {
        if (e.kind === 'aborted') throw e;
        return null;
      })));
    const rows = p.items.map((g, i) => {
      const d = details[i] || g;
      const counts = groupCounts(d);
      const p = groupProgress(d);
      return h('tr', { 'data-group': g.ident },
        h('td', {}, h('a', { href: href('groups/' + g.ident) }, g.name),
          d.status ? [' ', groupBadge(d.status)] : null),
        h('td', { class: 'wide' }, details[i] ? stackedBar(counts, p.devices) : h('span', { class: 'muted' }, 'counts unavailable'),
          details[i] ? h('div', { class: 'small muted' }, progressText(d)) : null),
        h('td', { class: 'opt' }, g.created_user),
        h('td', { class: 'opt' }, timeEl(g.created_at)));
    });
    fill(body,
      p.items.length ? table(['Group', 'Progress', { text: 'By', class: 'opt' },
        sortable('Created', 'created_at', sort || '-created_at', (k) => href('groups', { name, status, sort: k }), 'opt')], rows, 'groups')
        : notice('info', page > 1 ? 'No groups on this page.' : name || status ? 'No group matches these filters.' : 'No groups yet: a bulk send with a group name makes one (Tasks → a task → Send).'),
      pager(p, (n) => go('groups', { name, status, sort, page: n }), 'groups'));
  };
  try {
    await load();
  } catch (e) {
    if (e.kind === 'aborted') throw e;
    fill(body, retryNotice(e, 'groups'));
  }
  ctx.poll(load, 5000);
}

// The settings of a rollout (docs/api.md "Rollouts") in words, when the group has them.
const SETTINGS = [
  ['Pace', 'rollout', describeRollout], ['Abort', 'abort', describeAbort],
  ['Window', 'window', describeWindow], ['Retry', 'retry', describeRetry],
  ['Continuous', 'continuous', (v) => (v ? 'yes: a device that gains the tag later gets its job' : '')],
];

// What each control does, and the words of its confirmation.
const CONTROLS = [
  ['pause', 'Pause', 'running', ''],
  ['resume', 'Resume', 'paused', ''],
  ['cancel', 'Cancel the group', null,
    'Cancel this group? Every job of it that has not ended is cancelled; this cannot be undone.'],
];

// Pause, resume and cancel (PATCH /groups/<id>/...) for the roles that may, while the
// group has not ended; act(what) makes the request.
function controls(g, who, act) {
  if (!mayOperate(who) || !g.status || !['running', 'paused'].includes(g.status)) return null;
  const box = h('div', { class: 'controls', id: 'group-controls' });
  for (const [what, text, when] of CONTROLS) {
    if (when && g.status !== when) continue;
    box.append(h('button', {
      type: 'button', id: 'group-' + what, class: what === 'cancel' ? 'danger' : '', onclick: () => act(what),
    }, text), ' ');
  }
  return box;
}

export async function show(ctx) {
  const id = ctx.params[0];
  const head = h('div', { class: 'group-head' }, h('p', { class: 'loading' }, 'Loading the group…'));
  ctx.el.append(head);
  let g = await get('/groups/' + id, { signal: ctx.signal });
  // the task's name, once (the group names only its ident)
  let taskName = '';
  if (g.task_ident) {
    try {
      taskName = (await get('/tasks/' + g.task_ident, { signal: ctx.signal })).name;
    } catch (e) {
      if (e.kind === 'aborted') throw e;
    }
  }
  const summary = h('div', { class: 'card progress', id: 'group-progress', 'aria-live': 'polite' });
  const msg = h('div', { id: 'group-msg', 'aria-live': 'polite' });
  const act = async (what) => {
    clear(msg);
    const confirmText = CONTROLS.find((c) => c[0] === what)[3];
    if (confirmText && !window.confirm(confirmText)) return;
    for (const b of head.querySelectorAll('#group-controls button')) b.disabled = true;
    try {
      g = { ...g, ...(await api('PATCH', '/groups/' + id + '/' + what, { signal: ctx.signal })) };
      msg.append(notice('ok', { pause: 'Paused: no job is released until it is resumed.',
        resume: 'Resumed: jobs are released again.', cancel: 'Cancelled.' }[what]));
    } catch (e) {
      if (e.kind === 'aborted') return;
      msg.append(notice('error', e.code === 'group_ended' ? 'The group had already ended.' : errorText(e, 'group')));
      try {
        g = await get('/groups/' + id, { signal: ctx.signal });
      } catch (e2) {
        if (e2.kind === 'aborted') return;
      }
    }
    draw();
  };
  const draw = () => {
    const counts = groupCounts(g);
    const p = groupProgress(g);
    const total = p.devices;
    const done = p.ended;
    const facts = [
      ['Task', g.task_ident ? h('a', { href: href('tasks/' + g.task_ident), class: taskName ? '' : 'mono' },
        taskName || shortId(g.task_ident)) : null],
      ['Created', h('span', {}, fmtTime(g.created_at), ' by ', g.created_user)],
    ];
    if (g.reason) facts.push(['Reason', g.reason]);
    // the causes of the latest attempts that failed (docs/api.md "Rollouts": error_codes)
    const codes = Object.entries(g.error_codes || {});
    if (codes.length) {
      facts.push(['Error codes', h('span', { id: 'group-error-codes' },
        codes.map(([c, n]) => c + ': ' + num(n)).join(', '))]);
    }
    for (const [label, k, words] of SETTINGS) {
      const text = g[k] !== undefined && g[k] !== null ? words(g[k]) : '';
      if (text) facts.push([label, h('span', { 'data-setting': k }, text)]);
    }
    // a send that made no job (a misspelt tag) is completed, but is no success
    const empty = total === 0 && g.total === 0 && g.reason
      ? notice('warn', 'Nothing was sent: ' + g.reason + '.') : null;
    fill(head,
      h('h1', {}, 'Group ', h('span', { id: 'group-name' }, g.name), g.status ? [' ', groupBadge(g.status)] : null),
      h('p', { class: 'mono muted' }, g.ident), empty, dl(facts), controls(g, ctx.who, act), msg);
    fill(summary,
      h('div', { class: 'summary' },
        h('strong', { id: 'group-done', 'data-done': done, 'data-total': total },
          num(done) + ' / ' + num(total) + ' devices ended'),
        done === total && total > 0 ? h('span', { class: 'badge done' }, 'all ended') : null),
      h('p', { id: 'group-words', class: 'small muted' }, progressWords(g)),
      stackedBar(counts, total), statusBars(counts, total));
  };
  draw();
  ctx.el.append(summary, h('h2', {}, 'Jobs'));
  const { box, load } = jobsBox(ctx, { group_ident: id }, 'groups/' + id, {}, false);
  ctx.el.append(box);
  await load().catch((e) => {
    if (e.kind === 'aborted') throw e;
  });
  let last = JSON.stringify(g);
  ctx.poll(async () => {
    g = await get('/groups/' + id, { signal: ctx.signal });
    const now = JSON.stringify(g);
    if (now !== last) {
      last = now;
      draw();
    }
    await load();
  }, 2000);
}
