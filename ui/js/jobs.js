// Jobs: a paged table (all jobs, or a group's), and one job with its history as a timeline.
import { api, get, mayOperate } from './api.js';
import { HINTS, STATUSES, TERMINAL, LABELS } from './status.js';
import {
  clear, fill, dl, fmtAgo, fmtDuration, fmtTime, h, notice, pager, shortId, sortable, statusBadge,
  statusLegend, table, timeEl,
} from './dom.js';
import { errorText, go, href, retryNotice } from './nav.js';
import { deviceLink, lookup } from './names.js';
import { bytesBar } from './artifacts.js';

const PER_PAGE = 50;

function responseText(r) {
  if (r === null || r === undefined) return '';
  const s = typeof r === 'string' ? r : JSON.stringify(r);
  return s.length > 120 ? s.slice(0, 119) + '…' : s;
}

export function jobRow(j, withTask) {
  return h('tr', { 'data-job': j.ident, 'data-status': j.status },
    h('td', {}, h('a', { href: href('jobs/' + j.ident), class: 'mono' }, shortId(j.ident))),
    h('td', {}, statusBadge(j.status)),
    h('td', { class: 'opt' }, deviceLink(j.entity_ident)),
    withTask ? h('td', { class: 'opt' }, j.task ? h('a', { href: href('tasks/' + j.task.ident) },
      j.task.name) : '') : null,
    h('td', {}, h('time', { title: fmtTime(j.update_at) }, fmtAgo(j.update_at))),
    h('td', { class: 'resp opt' }, responseText(j.response)));
}

// The download of a job's artifacts (its record's last `progress`, docs/dashboard.md
// "Artifacts"): a bar, or nothing when the record has none.
function downloadProgress(j) {
  const p = j.progress;
  if (!p || typeof p !== 'object' || typeof p.done !== 'number' || typeof p.total !== 'number') {
    return undefined;
  }
  return bytesBar('job-progress', p.done, p.total);
}

function statusFilter(value, onchange) {
  const sel = h('select', { id: 'status-filter', name: 'status' },
    h('option', { value: '' }, 'every status'),
    STATUSES.map((s) => h('option', { value: s, selected: s === value, title: HINTS[s] }, LABELS[s])),
    h('option', { value: 'running', selected: value === 'running' }, 'edge_started or edge_running'));
  sel.addEventListener('change', () => onchange(sel.value));
  return h('label', { class: 'filter' }, 'Status ', sel);
}

// The jobs of a query (group_ident, status...) in a box that refreshes itself with poll.
// routePath/routeQuery: where the pager and the filter lead.
export function jobsBox(ctx, filter, routePath, routeQuery, withTask) {
  const box = h('div', { class: 'jobs-box' });
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  const status = ctx.query.get('status') || '';
  const sort = /^-?(created_at|update_at)$/.test(ctx.query.get('sort') || '') ? ctx.query.get('sort') : '';
  const head = h('div', { class: 'toolbar' },
    statusFilter(status, (v) => go(routePath, { ...routeQuery, status: v, sort, page: 1 })));
  const link = (k) => href(routePath, { ...routeQuery, status, sort: k });
  const body = h('div', { class: 'jobs-body', 'aria-live': 'off' }, h('p', { class: 'loading' }, 'Loading jobs…'));
  box.append(head, body, statusLegend());
  const load = async () => {
    let p;
    try {
      p = await get('/jobs', {
        signal: ctx.signal,
        query: { ...filter, status, sort, page, per_page: PER_PAGE },
      });
      await lookup(p.items.map((j) => j.entity_ident), ctx.signal);
    } catch (e) {
      if (e.kind === 'aborted') throw e;
      if (!body.querySelector('table') || e.kind !== 'down') {
        fill(body, retryNotice(e, 'jobs'));
      }
      throw e;
    }
    const rows = p.items.map((j) => jobRow(j, withTask));
    const headers = [sortable('Job', 'created_at', sort, link), 'Status', { text: 'Device', class: 'opt' }];
    if (withTask) headers.push({ text: 'Task', class: 'opt' });
    headers.push(sortable('Updated', 'update_at', sort, link), { text: 'Response', class: 'opt' });
    fill(body,
      p.items.length ? table(headers, rows, 'jobs')
        : notice('info', page > 1 ? 'No jobs on this page.' : 'No jobs' + (status ? ' with this status.' : '.')),
      pager(p, (n) => go(routePath, { ...routeQuery, status, sort, page: n }), 'jobs'));
  };
  return { box, load };
}

export async function list(ctx) {
  ctx.el.append(h('h1', {}, 'Jobs'));
  const { box, load } = jobsBox(ctx, {}, 'jobs', {}, true);
  ctx.el.append(box);
  await load().catch((e) => {
    if (e.kind === 'aborted') throw e;
  });
  ctx.poll(load, 5000);
}

// A job that spans a reboot shows the phase of each change (docs/dashboard.md "A job"); the
// first change of a phase says so ("phase verify begins"), the others name it quietly.
function phaseTag(phase, prevPhase) {
  if (typeof phase !== 'string' || !phase) return null;
  return phase !== prevPhase
    ? h('span', { class: 'phase phase-start' }, ' phase ', h('b', {}, phase), ' begins')
    : h('span', { class: 'phase muted' }, ' phase ' + phase);
}

function timeline(items) {
  const ol = h('ol', { class: 'timeline', id: 'timeline' });
  let prev = null;
  let prevPhase = null;
  for (const it of items) {
    const delta = prev === null ? '' : ' (+' + fmtDuration(Math.max(0, it.update_at - prev)) + ')';
    prev = it.update_at;
    const attrs = { class: 'st-' + it.status, 'data-status': it.status };
    if (typeof it.phase === 'string' && it.phase) attrs['data-phase'] = it.phase;
    const tag = phaseTag(it.phase, prevPhase);
    prevPhase = it.phase || null;
    ol.append(h('li', attrs,
      h('span', { class: 'dot st-' + it.status, 'aria-hidden': 'true' }),
      h('div', { class: 'tl-body' },
        h('div', {}, statusBadge(it.status), ' ', h('time', {}, fmtTime(it.update_at)),
          h('span', { class: 'muted' }, delta), tag),
        it.response !== null && it.response !== undefined
          ? h('pre', { class: 'resp' }, typeof it.response === 'string' ? it.response
            : JSON.stringify(it.response, null, 2)) : null)));
  }
  return ol;
}

export async function show(ctx) {
  const id = ctx.params[0];
  const el = ctx.el;
  el.append(h('p', { class: 'loading' }, 'Loading the job…'));
  const head = h('div');
  const tl = h('div');
  const hpage = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  let job = await get('/jobs/' + id, { signal: ctx.signal });
  await lookup([job.entity_ident], ctx.signal);
  // Cancel asks for an optional reason first (docs/dashboard.md "A job"); the form is made
  // once, so that a refresh of the page while it is open keeps what is typed.
  const reason = h('input', { id: 'cancel-reason', name: 'reason', autocomplete: 'off', maxlength: 500 });
  const askBox = h('form', { class: 'card cancel-form', id: 'cancel-form', novalidate: true },
    h('div', { class: 'field' },
      h('label', { for: 'cancel-reason' }, 'Why cancel it? (optional)'), reason,
      h('p', { class: 'hint' }, 'kept with the job: its response says "cancelled by ' +
        (ctx.who ? ctx.who.user : 'you') + ': <reason>"'),
      h('p', { class: 'field-error', id: 'cancel-reason-error', role: 'alert' })),
    h('button', { type: 'submit', class: 'danger', id: 'cancel-confirm' }, 'Cancel the job'), ' ',
    h('button', { type: 'button', id: 'cancel-keep', onclick: () => {
      asking = false;
      draw(job);
    } }, 'Keep it'));
  askBox.addEventListener('submit', (ev) => {
    ev.preventDefault();
    doCancel();
  });
  let asking = false;
  const draw = (j) => {
    let cancel = null;
    if (!TERMINAL.has(j.status) && mayOperate(ctx.who)) {
      cancel = asking ? askBox : h('button', { type: 'button', class: 'danger', id: 'cancel-job', onclick: () => {
        asking = true;
        draw(job);
        reason.focus();
      } }, 'Cancel the job');
    }
    const facts = [
      ['Status', statusBadge(j.status)],
      ['Task', j.task ? h('a', { href: href('tasks/' + j.task.ident) }, j.task.name + ' (v' + j.task.version + ')') : null],
      ['Group', j.group ? h('a', { href: href('groups/' + j.group.ident) }, j.group.name) : null],
      ['Device', h('span', {}, deviceLink(j.entity_ident), ' ', h('span', { class: 'mono small muted' }, j.entity_ident))],
      ['Created', h('span', {}, fmtTime(j.created_at), ' by ', j.created_user)],
      ['Updated', timeEl(j.update_at)],
      ['Scheduled', j.scheduled_time ? fmtTime(j.scheduled_time) : undefined],
      ['TTL', j.ttl ? fmtDuration(j.ttl) : undefined],
      ['Attempt', j.attempt !== undefined ? String(j.attempt) : undefined],
      ['Retry of', j.retry_of ? h('a', { href: href('jobs/' + j.retry_of), class: 'mono' }, shortId(j.retry_of)) : undefined],
      ['Phase', j.phase ? h('span', { id: 'job-phase', class: 'mono' }, j.phase) : undefined],
      ['Error code', j.error_code || undefined],
      ['Download', downloadProgress(j)],
      ['Comment', j.comment || undefined],
      ['Variables', j.variables && Object.keys(j.variables).length
        ? h('pre', {}, JSON.stringify(j.variables, null, 2)) : undefined],
      ['Response', j.response !== null && j.response !== undefined
        ? h('pre', { class: 'resp' }, typeof j.response === 'string' ? j.response : JSON.stringify(j.response, null, 2))
        : undefined],
    ];
    fill(head,
      h('h1', {}, 'Job ', h('span', { class: 'mono' }, shortId(j.ident))),
      h('p', { class: 'mono muted' }, j.ident),
      dl(facts), cancel, h('div', { id: 'cancel-msg', 'aria-live': 'polite' }));
  };
  const doCancel = async () => {
    const msg = head.querySelector('#cancel-msg');
    const err = askBox.querySelector('#cancel-reason-error');
    clear(msg);
    err.textContent = '';
    const why = reason.value.trim();
    const n = new TextEncoder().encode(why).length;
    if (n > 500) {
      err.textContent = 'at most 500 bytes (this is ' + n + ')';
      reason.focus();
      return;
    }
    try {
      job = await api('PATCH', '/jobs/' + id + '/cancel', { signal: ctx.signal, body: why ? { reason: why } : undefined });
      asking = false;
      reason.value = '';
      draw(job);
      await loadHistory();
    } catch (e) {
      if (e.kind === 'aborted') return;
      const text = e.code === 'job_terminal' ? 'The job had already ended.' : errorText(e, 'job');
      if (e.field === 'reason') err.textContent = e.message;
      fill(head.querySelector('#cancel-msg'), notice('error', text));
    }
  };
  const loadHistory = async () => {
    const p = await get('/jobs/' + id + '/history', {
      signal: ctx.signal, query: { sort: 'update_at', per_page: 500, page: hpage },
    });
    fill(tl, h('h2', {}, 'History'),
      p.items.length ? timeline(p.items) : notice('info', 'No history on this page.'),
      p.total_pages > 1 ? pager(p, (n) => go('jobs/' + id, { page: n }), 'changes') : null);
  };
  draw(job);
  await loadHistory().catch((e) => {
    if (e.kind === 'aborted') throw e;
    fill(tl, notice('error', errorText(e, 'history')));
  });
  fill(el, head, tl);
  // until the job ends, every 2 s; afterwards slower (late reports still join its history)
  let last = '';
  const refresh = async () => {
    job = await get('/jobs/' + id, { signal: ctx.signal });
    const stamp = job.status + job.update_at + JSON.stringify(job.progress || null) + (job.phase || '');
    if (stamp !== last) {
      last = stamp;
      draw(job);
    }
    await loadHistory();
  };
  last = job.status + job.update_at + JSON.stringify(job.progress || null) + (job.phase || '');
  ctx.poll(refresh, () => (TERMINAL.has(job.status) ? 15000 : 2000));
}
