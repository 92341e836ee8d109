// Groups (bulk sends): the list with a progress bar each, and one group with a bar per
// status and its jobs, both refreshed by polling the REST API.
import { get } from './api.js';
import {
  clear, fill, dl, finishedCount, fmtTime, groupBadge, groupCounts, h, notice, num, pager,
  shortId, stackedBar, statusBars, table, timeEl,
} from './dom.js';
import { jobsBox } from './jobs.js';
import { errorText, go, href } from './nav.js';

const PER_PAGE = 20;

function progressText(g) {
  const counts = groupCounts(g);
  const total = g.total !== undefined ? g.total : Object.values(counts).reduce((a, b) => a + b, 0);
  return num(finishedCount(counts)) + ' / ' + num(total) + ' finished';
}

export async function list(ctx) {
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  ctx.el.append(h('h1', {}, 'Groups'),
    h('p', { class: 'muted' }, 'Every bulk send with a group name. Bars show the jobs per status.'));
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading groups…'));
  ctx.el.append(body);
  const load = async () => {
    const p = await get('/groups', { signal: ctx.signal, query: { page, per_page: PER_PAGE } });
    // the counts of each group on this page (at most PER_PAGE requests, in parallel)
    const details = await Promise.all(p.items.map((g) =>
      get('/groups/' + g.ident, { signal: ctx.signal }).catch((e) => {
        if (e.kind === 'aborted') throw e;
        return null;
      })));
    const rows = p.items.map((g, i) => {
      const d = details[i] || g;
      const counts = groupCounts(d);
      return h('tr', { 'data-group': g.ident },
        h('td', {}, h('a', { href: href('groups/' + g.ident) }, g.name),
          d.status ? [' ', groupBadge(d.status)] : null),
        h('td', { class: 'wide' }, details[i] ? stackedBar(counts, d.total) : h('span', { class: 'muted' }, 'counts unavailable'),
          details[i] ? h('div', { class: 'small muted' }, progressText(d)) : null),
        h('td', { class: 'opt' }, g.created_user),
        h('td', { class: 'opt' }, timeEl(g.created_at)));
    });
    fill(body,
      p.items.length ? table(['Group', 'Progress', { text: 'By', class: 'opt' },
        { text: 'Created', class: 'opt' }], rows, 'groups')
        : notice('info', page > 1 ? 'No groups on this page.' : 'No groups yet: a bulk send with a group name makes one (Tasks → a task → Send).'),
      pager(p, (n) => go('groups', { page: n }), 'groups'));
  };
  try {
    await load();
  } catch (e) {
    if (e.kind === 'aborted') throw e;
    fill(body, notice('error', errorText(e, 'groups')));
  }
  ctx.poll(load, 5000);
}

// Members of a group the rollouts add (docs/api.md), shown when the coordinator has them.
const EXTRA = ['rollout', 'abort', 'window', 'retry', 'continuous'];

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
  const draw = () => {
    const counts = groupCounts(g);
    const total = g.total !== undefined ? g.total : Object.values(counts).reduce((a, b) => a + b, 0);
    const done = finishedCount(counts);
    const facts = [
      ['Task', g.task_ident ? h('a', { href: href('tasks/' + g.task_ident), class: taskName ? '' : 'mono' },
        taskName || shortId(g.task_ident)) : null],
      ['Created', h('span', {}, fmtTime(g.created_at), ' by ', g.created_user)],
    ];
    if (g.reason) facts.push(['Reason', g.reason]);
    for (const k of EXTRA) {
      if (g[k] !== undefined && g[k] !== null) {
        facts.push([k, typeof g[k] === 'object' ? h('code', {}, JSON.stringify(g[k])) : String(g[k])]);
      }
    }
    // a send that made no job (a misspelt tag) is completed, but is no success
    const empty = total === 0 && g.reason
      ? notice('warn', 'Nothing was sent: ' + g.reason + '.') : null;
    fill(head,
      h('h1', {}, 'Group ', h('span', { id: 'group-name' }, g.name), g.status ? [' ', groupBadge(g.status)] : null),
      h('p', { class: 'mono muted' }, g.ident), empty, dl(facts));
    fill(summary,
      h('div', { class: 'summary' },
        h('strong', { id: 'group-done', 'data-done': done, 'data-total': total },
          num(done) + ' / ' + num(total) + ' finished'),
        done === total && total > 0 ? h('span', { class: 'badge done' }, 'all ended') : null),
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
