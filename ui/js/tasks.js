// Tasks: the list, and one task with its variables and the form that sends it, built from
// its variables_info and checked here before anything is sent (send.js).
import { api, get, mayOperate } from './api.js';
import {
  clear, fill, dl, fmtBytes, fmtTime, h, notice, num, pager, shortId, table, timeEl,
} from './dom.js';
import { shortSha } from './artifacts.js';
import { errorText, go, href, retryNotice, setFlash } from './nav.js';
import { nameOf, remember, resolveDevices, unresolvedText } from './names.js';
import { DAYS, TAG_RE, bodyText, checkValue, parseDeviceList, rolloutMembers } from './send.js';

const PER_PAGE = 50;

export async function list(ctx) {
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading tasks…'));
  ctx.el.append(h('h1', {}, 'Tasks'), body);
  const load = async () => {
    const p = await get('/tasks', { signal: ctx.signal, query: { page, per_page: PER_PAGE } });
    const rows = p.items.map((t) => h('tr', { 'data-task': t.ident },
      h('td', {}, h('a', { href: href('tasks/' + t.ident) }, t.name)),
      h('td', {}, h('span', { class: 'mono' }, t.script)),
      h('td', { class: 'opt' }, 'v' + t.version),
      h('td', {}, t.active === 'true' || t.active === true ? 'active' : h('span', { class: 'muted' }, 'inactive')),
      h('td', { class: 'opt' }, Object.keys(t.variables_info || {}).join(', ') || '—'),
      h('td', { class: 'opt' }, t.signature ? 'signed' : h('span', { class: 'muted' }, 'unsigned'))));
    fill(body,
      p.items.length ? table(['Task', 'Script', { text: 'Version', class: 'opt' }, 'State',
        { text: 'Variables', class: 'opt' }, { text: 'Signature', class: 'opt' }], rows, 'tasks')
        : notice('info', 'No tasks yet.'),
      pager(p, (n) => go('tasks', { page: n }), 'tasks'));
  };
  try {
    await load();
  } catch (e) {
    if (e.kind === 'aborted') throw e;
    fill(body, retryNotice(e, 'tasks'));
  }
}

// A task's artifacts ({key: {ident, size, name}}): "fw: firmware.bin (3a7bd3e2360a, 12.3 MiB)",
// linked to the artifacts page; nothing for a task without them.
function taskArtifacts(arts) {
  if (!arts || typeof arts !== 'object' || !Object.keys(arts).length) return undefined;
  return h('ul', { class: 'plain', id: 'task-artifacts' }, Object.entries(arts).map(([k, a]) =>
    h('li', { 'data-artifact-key': k }, h('span', { class: 'mono' }, k), ': ',
      h('a', { href: href('artifacts', { name: a.name }) }, a.name),
      ' (', h('span', { class: 'mono', title: a.ident }, shortSha(a.ident)), ', ', fmtBytes(a.size), ')')));
}

// One field of the form: its label, input, hint and error line.
function field(id, label, input, hint) {
  return h('div', { class: 'field', 'data-field': id },
    h('label', { for: id }, label), input,
    hint ? h('p', { class: 'hint', id: id + '-hint' }, hint) : null,
    h('p', { class: 'field-error', id: id + '-error', role: 'alert' }));
}

function varInput(name, info) {
  const id = 'var-' + name;
  const type = info.type;
  let input;
  if (type === 'boolean') {
    input = h('select', { id, name: id },
      h('option', { value: '' }, info.optional ? '(not given)' : 'choose…'),
      h('option', { value: 'true' }, 'true'), h('option', { value: 'false' }, 'false'));
  } else if (type === 'string') {
    input = h('input', { id, name: id, type: 'text', autocomplete: 'off' });
  } else {
    input = h('input', {
      id, name: id, type: 'text', autocomplete: 'off', spellcheck: 'false',
      inputmode: type === 'integer' ? 'numeric' : type === 'number' ? 'decimal' : null,
    });
  }
  const hints = {
    string: 'text',
    integer: 'an integer',
    number: 'a number',
    boolean: 'true or false',
    timestamp: 'Unix seconds, or a date and time (YYYY-MM-DD HH:MM, local time)',
  };
  const label = [info.alias || name, ' ', h('span', { class: 'type' }, type),
    info.optional ? h('span', { class: 'muted' }, ' optional') : h('span', { class: 'req' }, ' required')];
  const hint = [info.description ? info.description + ' · ' : '', hints[type] || type,
    info.alias ? ' · variable ' + name : ''].join('');
  return field(id, label, input, hint);
}

// The form's fields of a rollout (docs/api.md "Rollouts"), by the keys of rolloutMembers.
const RO_IDS = {
  rate: 'f-rate', expBase: 'f-exp-base', expFactor: 'f-exp-factor', expAfter: 'f-exp-after',
  abortPct: 'f-abort-pct', abortMin: 'f-abort-min', retryMax: 'f-retry-max',
  retryBackoff: 'f-retry-backoff', retryFactor: 'f-retry-factor', days: 'f-days', start: 'f-win-start',
  duration: 'f-win-duration', offset: 'f-win-offset', continuous: 'f-continuous',
};
// The API's member names (an error's details.field) to the fields.
const RO_API_IDS = {
  'rollout.max_per_minute': 'f-rate', 'rollout.exponential.base_per_minute': 'f-exp-base',
  'rollout.exponential.factor': 'f-exp-factor', 'rollout.exponential.after_succeeded': 'f-exp-after',
  'abort.failure_percent': 'f-abort-pct', 'abort.min_finished': 'f-abort-min',
  'retry.max_attempts': 'f-retry-max', 'retry.backoff_s': 'f-retry-backoff',
  'retry.backoff_factor': 'f-retry-factor', 'window.days': 'f-days', 'window.start': 'f-win-start',
  'window.duration_min': 'f-win-duration', 'window.utc_offset_min': 'f-win-offset', continuous: 'f-continuous',
};

function rolloutValues(form) {
  const v = {};
  for (const [k, id] of Object.entries(RO_IDS)) {
    if (k === 'days') v.days = [...form.querySelectorAll('input[name=day]:checked')].map((x) => x.value);
    else if (k === 'continuous') v.continuous = form.querySelector('#f-continuous').checked && !form.querySelector('#f-continuous').disabled;
    else v[k] = form.querySelector('#' + id).value;
  }
  return v;
}

function rolloutFields() {
  const txt = (id, label, hint, attrs) => field(id, label,
    h('input', { id, name: id, autocomplete: 'off', spellcheck: 'false', ...(attrs || {}) }), hint);
  const offset = -new Date().getTimezoneOffset();
  const days = h('div', { class: 'field', 'data-field': 'f-days' },
    h('span', { class: 'label', id: 'f-days' }, 'Days'),
    h('span', { class: 'days' }, DAYS.map((d) => h('label', { class: 'radio' },
      h('input', { type: 'checkbox', name: 'day', value: d, id: 'f-day-' + d }), ' ' + d))),
    h('p', { class: 'field-error', id: 'f-days-error', role: 'alert' }));
  return h('details', { id: 'rollout' }, h('summary', {}, 'Rollout: pace, abort, retry, window'),
    h('p', { class: 'hint' }, 'Empty fields are not sent. Any of these makes a group (docs/api.md "Rollouts").'),
    h('fieldset', {}, h('legend', {}, 'Pace'),
      txt('f-rate', 'At most, jobs a minute', '1 to 100000; empty: all at once', { inputmode: 'numeric' }),
      txt('f-exp-base', 'Exponential: start at, a minute', '1 to 100000', { inputmode: 'numeric' }),
      txt('f-exp-factor', 'multiplied by', '1 to 10, like 2', { inputmode: 'decimal' }),
      txt('f-exp-after', 'after every N succeeded jobs', '1 to 1000000', { inputmode: 'numeric' })),
    h('fieldset', {}, h('legend', {}, 'Abort'),
      txt('f-abort-pct', 'Stop at failures (%)', '0 to 100: the group is aborted at this share of failures', { inputmode: 'decimal' }),
      txt('f-abort-min', 'once this many have finished', '1 to 1000000; empty: 1', { inputmode: 'numeric' })),
    h('fieldset', {}, h('legend', {}, 'Retry'),
      txt('f-retry-max', 'Attempts in all', '1 to 10 (the first included)', { inputmode: 'numeric' }),
      txt('f-retry-backoff', 'First wait (s)', '0 to 86400; empty: 30', { inputmode: 'numeric' }),
      txt('f-retry-factor', 'Wait multiplied by', '1 to 10; empty: 2', { inputmode: 'decimal' })),
    h('fieldset', {}, h('legend', {}, 'Window'),
      days,
      txt('f-win-start', 'Opens at', 'HH:MM, in the window\'s time zone', { placeholder: '02:00' }),
      txt('f-win-duration', 'For (minutes)', '1 to 1440', { inputmode: 'numeric' }),
      txt('f-win-offset', 'Time zone (minutes from UTC)', '-720 to 840; this browser: ' + offset, { value: String(offset) })),
    h('div', { class: 'field', 'data-field': 'f-continuous' },
      h('label', { class: 'radio' }, h('input', { type: 'checkbox', id: 'f-continuous', name: 'continuous' }),
        ' Continuous: a device that gains the tag later gets the job too (tag sends)'),
      h('p', { class: 'field-error', id: 'f-continuous-error', role: 'alert' })));
}

// The message under the device field for the one device typed that resolveDevices could
// not take (unknown, or several devices match).
function deviceError(b) {
  if (b.error === 'ambiguous') return '"' + b.text.slice(0, 60) + '" is ambiguous: ' + b.why;
  return 'no device is named "' + b.text.slice(0, 60) + '"' + (/ident/.test(b.why)
    ? ', and no device ident begins or ends with it' : ' (give a name or an ident)');
}

function sendForm(ctx, task, devices) {
  const vinfo = task.variables_info || {};
  const names = Object.keys(vinfo);
  const dlist = h('datalist', { id: 'device-list' },
    devices.map((d) => h('option', { value: d.name, label: shortId(d.entity_ident) + (d.online ? ' (online)' : ' (offline)') })));
  const mode = (v, text, checked) => h('label', { class: 'radio' },
    h('input', { type: 'radio', name: 'target', value: v, id: 'target-' + v, checked }), ' ' + text);
  const fDevice = field('f-device', 'Device', h('input', {
    id: 'f-device', name: 'device', list: 'device-list', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'device name or ident',
  }), 'the device\'s name, ident, or 6 or more hex digits from its ident\'s start or end (suggestions: the first 500 devices)');
  const fIdents = field('f-idents', 'Devices', h('textarea', { id: 'f-idents', name: 'idents', rows: 4, spellcheck: 'false' }),
    'device names or idents (whole, or 6 or more hex digits from their start or end), separated by ' +
    'spaces, commas or lines (up to 10,000); a name with spaces in "double quotes"');
  const fTag = field('f-tag', 'Tag', h('input', { id: 'f-tag', name: 'tag', autocomplete: 'off' }),
    'every device holding this tag');
  const fGroup = field('f-group', 'Group name', h('input', {
    id: 'f-group', name: 'group', autocomplete: 'off',
    value: task.name + ' ' + fmtTime(Math.floor(Date.now() / 1000)).slice(0, 16),
  }), 'follow the send on its group\'s page (empty: no group)');
  const fComment = field('f-comment', 'Comment', h('input', { id: 'f-comment', name: 'comment', autocomplete: 'off' }));
  const fSchedule = field('f-schedule', 'Scheduled time', h('input', { id: 'f-schedule', name: 'schedule', autocomplete: 'off', placeholder: 'now' }),
    'empty: now; else a date and time (YYYY-MM-DD HH:MM, local time) or Unix seconds');
  const fTtl = field('f-ttl', 'Time to live (s)', h('input', { id: 'f-ttl', name: 'ttl', inputmode: 'numeric', autocomplete: 'off' }),
    'empty: none; 1 to 31536000 seconds for the device to receive the job');
  const summary = h('div', { id: 'send-msg', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'primary', id: 'send' }, 'Send');
  const targetBox = h('div', { class: 'target' });
  const form = h('form', { class: 'card send', id: 'send-form', novalidate: true },
    h('h2', {}, 'Send this task'),
    h('fieldset', {}, h('legend', {}, 'To'),
      mode('device', 'one device', true), mode('list', 'a list of devices', false), mode('tag', 'every device with a tag', false)),
    dlist, targetBox,
    names.length ? h('fieldset', { class: 'vars' }, h('legend', {}, 'Variables'), names.map((n) => varInput(n, vinfo[n]))) : null,
    h('details', { id: 'more' }, h('summary', {}, 'Comment, schedule, time to live'), fComment, fSchedule, fTtl),
    rolloutFields(),
    summary, button);
  const showTarget = () => {
    const m = form.querySelector('input[name=target]:checked').value;
    fill(targetBox, m === 'device' ? fDevice : m === 'list' ? fIdents : fTag);
    if (m !== 'device') targetBox.append(fGroup);
    form.querySelector('#f-continuous').disabled = m !== 'tag';
  };
  form.addEventListener('change', (ev) => {
    if (ev.target.name === 'target') showTarget();
  });
  showTarget();

  const setError = (id, text) => {
    const err = form.querySelector('#' + CSS.escape(id) + '-error');
    const input = form.querySelector('#' + CSS.escape(id));
    if (err) err.textContent = text;
    if (input) {
      if (text) input.setAttribute('aria-invalid', 'true');
      else input.removeAttribute('aria-invalid');
    }
    return !!err;
  };

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(summary);
    for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
    for (const e of form.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
    const bad = [];
    const fail = (id, text) => {
      setError(id, text);
      bad.push(id);
    };
    const m = form.querySelector('input[name=target]:checked').value;
    const fields = {};
    let path = '/tasks/' + task.ident + '/jobs';
    if (m === 'device') {
      const v = form.querySelector('#f-device').value.trim();
      if (!v) fail('f-device', 'choose a device');
      else if (v.length > 200) fail('f-device', 'a device name is at most 200 characters');
      fields.entity_ident = v;
    } else if (m === 'list') {
      const r = parseDeviceList(form.querySelector('#f-idents').value);
      if (!r.ok) fail('f-idents', r.error);
      fields.ident_list = r.entries;
      path += '/list';
    } else {
      const v = form.querySelector('#f-tag').value.trim();
      if (!TAG_RE.test(v)) fail('f-tag', v ? 'a tag is 1-64 letters, digits or _ - . : /' : 'give a tag');
      fields.tag = v;
      path += '/tags';
    }
    if (m !== 'device') {
      const g = form.querySelector('#f-group').value.trim();
      if (g.length > 200) fail('f-group', 'at most 200 characters');
      if (g) fields.group_name = g;
    }
    const vars = names.length ? {} : null;
    for (const n of names) {
      const info = vinfo[n];
      const input = form.querySelector('#' + CSS.escape('var-' + n));
      const raw = input.value;
      if ((info.type === 'string' ? raw === '' : raw.trim() === '')) {
        if (!info.optional) fail('var-' + n, 'required');
        continue;
      }
      const r = checkValue(info.type, raw);
      if (!r.ok) fail('var-' + n, r.error);
      else vars[n] = r.json;
    }
    const comment = form.querySelector('#f-comment').value;
    if (comment) fields.comment = comment;
    const sched = form.querySelector('#f-schedule').value.trim();
    if (sched) {
      const r = checkValue('timestamp', sched);
      if (!r.ok) fail('f-schedule', r.error);
      else fields.scheduled_time = Number(r.json);
    }
    const ttl = form.querySelector('#f-ttl').value.trim();
    if (ttl) {
      if (!/^[0-9]+$/.test(ttl) || Number(ttl) < 1 || Number(ttl) > 31536000) fail('f-ttl', 'an integer from 1 to 31536000');
      else fields.ttl = Number(ttl);
    }
    const ro = rolloutMembers(rolloutValues(form));
    for (const [k, text] of Object.entries(ro.errors)) fail(RO_IDS[k], text);
    const rollout = Object.keys(ro.members).length > 0;
    if (rollout && m === 'device' && !bad.includes('f-device')) {
      // a single device's send with rollout members is a list send of one (as rcs send does)
      fields.ident_list = [fields.entity_ident];
      delete fields.entity_ident;
      path += '/list';
    }
    Object.assign(fields, ro.members);
    if (bad.length) {
      if (bad.some((id) => id === 'f-comment' || id === 'f-schedule' || id === 'f-ttl')) {
        form.querySelector('#more').open = true;
      }
      if (bad.some((id) => Object.values(RO_IDS).includes(id))) form.querySelector('#rollout').open = true;
      summary.append(notice('error', (bad.length === 1 ? 'One field needs' : bad.length + ' fields need') +
        ' attention: nothing was sent.'));
      form.querySelector('#' + CSS.escape(bad[0])).focus();
      return;
    }
    button.disabled = true;
    button.textContent = 'Sending…';
    try {
      // names and short idents to idents, through the API, before anything is sent
      const typed = fields.entity_ident !== undefined ? [fields.entity_ident] : fields.ident_list;
      if (m !== 'tag') {
        button.textContent = 'Finding the devices…';
        const found = await resolveDevices(typed, ctx.signal);
        if (!found.ok) {
          const id = m === 'list' ? 'f-idents' : 'f-device';
          setError(id, m === 'list' ? unresolvedText(found.bad) : deviceError(found.bad[0]));
          summary.append(notice('error', 'One field needs attention: nothing was sent.'));
          form.querySelector('#' + id).focus();
          return;
        }
        if (fields.entity_ident !== undefined) fields.entity_ident = found.idents[0];
        else fields.ident_list = found.idents;
        button.textContent = 'Sending…';
      }
      const r = await api('POST', path, { signal: ctx.signal, bodyText: bodyText(fields, vars) });
      if (path.endsWith('/jobs')) {
        setFlash('ok', 'Job sent.');
        go('jobs/' + r.ident);
        return;
      }
      const rejected = r.rejected || [];
      const text = num((r.items || []).length) + ' job(s) created' +
        (rejected.length ? ', ' + num(rejected.length) + ' device(s) rejected: ' +
          rejected.slice(0, 5).map((x) => (nameOf(x.entity_ident) || shortId(x.entity_ident)) + ' (' + x.error.message + ')').join(', ') +
          (rejected.length > 5 ? '…' : '') : '') + '.';
      if (r.group) {
        setFlash(rejected.length ? 'warn' : 'ok', text);
        go('groups/' + r.group.ident);
        return;
      }
      summary.append(notice(rejected.length ? 'warn' : 'ok', text + ' ',
        h('a', { href: href('jobs', {}) }, 'See the jobs')));
    } catch (e) {
      if (e.kind === 'aborted') return;
      let id = '';
      if (e.field.startsWith('variables.')) id = 'var-' + e.field.slice(10);
      else id = { entity_ident: 'f-device', ident_list: m === 'device' ? 'f-device' : 'f-idents', tag: 'f-tag',
        group_name: 'f-group', comment: 'f-comment', scheduled_time: 'f-schedule', ttl: 'f-ttl',
        ...RO_API_IDS }[e.field.replace(/\[.*$/, '')] || '';
      if (id) setError(id, e.message);
      let text = errorText(e, 'task or device');
      if (e.code === 'device_offline') text = 'The device is offline and this task does not allow offline devices.';
      else if (e.code === 'task_inactive') text = 'This task is inactive: it cannot be sent.';
      summary.append(notice('error', text));
    } finally {
      button.disabled = false;
      button.textContent = 'Send';
    }
  });
  return form;
}

export async function show(ctx) {
  const id = ctx.params[0];
  ctx.el.append(h('p', { class: 'loading' }, 'Loading the task…'));
  const [task, devs] = await Promise.all([
    get('/tasks/' + id, { signal: ctx.signal }),
    get('/devices', { signal: ctx.signal, query: { per_page: 500 } }).catch((e) => {
      if (e.kind === 'aborted') throw e;
      return { items: [] };
    }),
  ]);
  for (const d of devs.items || []) remember(d);
  const vinfo = task.variables_info || {};
  const vrows = Object.entries(vinfo).map(([n, i]) => h('tr', {},
    h('td', { class: 'mono' }, n), h('td', {}, i.type), h('td', {}, i.alias || ''),
    h('td', {}, i.optional ? 'optional' : 'required'), h('td', { class: 'opt' }, i.description || '')));
  fill(ctx.el,
    h('h1', {}, 'Task ', h('span', { id: 'task-name' }, task.name)),
    h('p', { class: 'mono muted' }, task.ident),
    dl([
      ['Script', h('span', { class: 'mono' }, task.script)],
      ['Version', 'v' + task.version],
      ['State', task.active === 'true' || task.active === true ? 'active' : 'inactive'],
      ['Signature', task.signature ? 'ES256, key ' + task.signature.key_id : 'none'],
      ['Timeout', task.timeout + ' s'],
      ['Offline devices', task.allow_offline ? 'jobs wait for them' : 'refused'],
      ['Updated', timeEl(task.update_at)],
      ['Artifacts', taskArtifacts(task.artifacts)],
      ['Comment', task.comment || undefined],
      ['Constants', task.constants && Object.keys(task.constants).length
        ? h('pre', {}, JSON.stringify(task.constants, null, 2)) : undefined],
    ]),
    h('h2', {}, 'Variables'),
    vrows.length ? table(['Name', 'Type', 'Alias', '', { text: 'Description', class: 'opt' }], vrows, 'vars')
      : h('p', { class: 'muted' }, 'This task takes no variables.'),
    mayOperate(ctx.who) ? sendForm(ctx, task, devs.items || [])
      : h('div', { class: 'card', id: 'no-send' }, h('h2', {}, 'Send this task'),
        h('p', {}, 'Your API key\'s role (' + (ctx.who ? ctx.who.role : 'unknown') + ') may not send jobs: ' +
          'an operator or admin key can.')));
}
