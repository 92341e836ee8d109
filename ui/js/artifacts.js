// Artifacts: the files tasks bring to devices (docs/dashboard.md "Artifacts"). The list,
// paged, with the tasks that use each; an upload with its progress (admin keys); delete,
// with the API's refusal while the artifact is in use.
import { BASE, api, get, getKey, mayAdmin } from './api.js';
import { clear, fill, fmtBytes, h, notice, pager, table, timeEl } from './dom.js';
import { errorText, go, href, retryNotice } from './nav.js';

const PER_PAGE = 50;
const NAME_MAX = 128; // bytes of a label (docs/api.md "Artifacts")
const taskNames = new Map(); // task ident -> its name, or null when it can't be read

// "3a7bd3e2360a" for sha256:3a7bd3e2360a...: the start of the digits, random from the first.
export function shortSha(ident) {
  const hex = String(ident || '').replace(/^sha256:/, '');
  return hex.slice(0, 12);
}

// Whether a label is one the API takes: 1 to 128 bytes, no control character.
export function nameProblem(name) {
  if (!name) return 'give the artifact a name';
  if (new TextEncoder().encode(name).length > NAME_MAX) return 'a name is at most 128 bytes';
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) return 'a name holds no control character';
  return '';
}

async function lookupTasks(idents, signal) {
  const missing = [...new Set(idents)].filter((i) => i && !taskNames.has(i));
  await Promise.all(missing.map((i) => get('/tasks/' + i, { signal }).then(
    (t) => taskNames.set(i, t.name),
    (e) => {
      if (e.kind === 'aborted') throw e;
      taskNames.set(i, null);
    })));
}

function taskLink(ident) {
  const n = taskNames.get(ident);
  return h('a', { href: href('tasks/' + ident), class: 'task', 'data-task': ident, title: ident },
    n || h('span', { class: 'mono' }, ident.slice(-12)));
}

function usedBy(a) {
  if (!Array.isArray(a.used_by)) return h('span', { class: 'muted' }, '—');
  if (!a.used_by.length) return h('span', { class: 'muted' }, 'no task');
  const out = h('span', { class: 'used-by' });
  a.used_by.forEach((t, i) => out.append(i ? ', ' : '', taskLink(t)));
  return out;
}

// A bar of done out of total bytes, with "42 % · 1.2 MiB of 3.0 MiB".
export function bytesBar(id, done, total) {
  const pct = total > 0 ? Math.min(100, Math.floor((100 * done) / total)) : 100;
  const fillEl = h('span', { class: 'fill' });
  fillEl.style.width = pct + '%';
  return h('div', {
    class: 'bytes-bar', id, role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100,
    'aria-valuenow': pct, 'data-done': done, 'data-total': total,
  }, h('span', { class: 'track' }, fillEl),
  h('span', { class: 'bytes-text' }, pct + ' % · ' + fmtBytes(done) + ' of ' + fmtBytes(total)));
}

// The API's error of an upload's answer (a JSON error object, or only a status).
function uploadError(xhr) {
  let err = {};
  try {
    err = (JSON.parse(xhr.responseText || 'null') || {}).error || {};
  } catch (e) {
    err = {};
  }
  const msg = err.message || 'HTTP ' + xhr.status;
  switch (err.code || xhr.status) {
    case 'payload_too_large':
    case 413:
      return 'The file is too large for this coordinator: ' + msg + '.';
    case 'quota_exceeded':
      return 'The tenant\'s artifacts would pass their quota: ' + msg + '.';
    case 'storage_full':
    case 507:
      return 'The coordinator\'s storage is full: ' + msg + '.';
    default:
      if (xhr.status === 401) return 'This API key was refused: sign in again.';
      if (xhr.status === 403) return 'This API key\'s role may not upload: ' + msg + '.';
      return 'The upload was refused: ' + msg + ' (HTTP ' + xhr.status + ').';
  }
}

// The upload form (admin keys): the file sent as the request's raw body, its progress from
// XMLHttpRequest's upload events (fetch() has none), Cancel while it goes.
function uploadForm(onDone) {
  const file = h('input', { id: 'artifact-file', name: 'file', type: 'file', required: true });
  const name = h('input', {
    id: 'artifact-name', name: 'name', type: 'text', autocomplete: 'off', size: 30,
    placeholder: 'the file\'s name', maxlength: NAME_MAX,
  });
  const send = h('button', { type: 'submit', class: 'primary', id: 'artifact-upload' }, 'Upload');
  const cancel = h('button', { type: 'button', id: 'artifact-cancel', hidden: true }, 'Cancel');
  const progress = h('div', { id: 'upload-progress-box', 'aria-live': 'polite' });
  const msg = h('div', { id: 'upload-msg', 'aria-live': 'polite' });
  let xhr = null;
  file.addEventListener('change', () => {
    if (file.files.length && !name.value) name.value = file.files[0].name.slice(0, NAME_MAX);
  });
  cancel.addEventListener('click', () => xhr && xhr.abort());
  const form = h('form', { class: 'card upload', id: 'upload-form', novalidate: true },
    h('h2', {}, 'Upload'),
    h('div', { class: 'field' }, h('label', { for: 'artifact-file' }, 'File'), file),
    h('div', { class: 'field' }, h('label', { for: 'artifact-name' }, 'Name'), name,
      h('p', { class: 'hint' }, 'A label, not unique; the file\'s name by default.'),
      h('p', { class: 'field-error', id: 'artifact-name-error', role: 'alert' })),
    h('div', { class: 'controls' }, send, cancel), progress, msg);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    clear(msg);
    const nameErr = form.querySelector('#artifact-name-error');
    nameErr.textContent = '';
    if (!file.files.length) {
      msg.append(notice('error', 'Choose a file to upload.'));
      return;
    }
    const f = file.files[0];
    const label = name.value.trim() || f.name;
    const bad = nameProblem(label);
    if (bad) {
      nameErr.textContent = bad;
      return;
    }
    xhr = new XMLHttpRequest();
    xhr.open('POST', BASE + '/artifacts?name=' + encodeURIComponent(label));
    xhr.setRequestHeader('api-key', getKey());
    xhr.setRequestHeader('Content-Type', 'application/octet-stream');
    xhr.setRequestHeader('Accept', 'application/json');
    const started = Date.now();
    xhr.upload.addEventListener('progress', (e) => {
      const total = e.lengthComputable ? e.total : f.size;
      const secs = (Date.now() - started) / 1000;
      fill(progress, bytesBar('upload-progress', e.loaded, total),
        secs > 0.5 ? h('span', { class: 'small muted' }, ' ' + fmtBytes(e.loaded / secs) + '/s') : null);
    });
    const finish = () => {
      xhr = null;
      send.disabled = false;
      cancel.hidden = true;
    };
    xhr.addEventListener('load', () => {
      const x = xhr;
      finish();
      let rec = null;
      try {
        rec = JSON.parse(x.responseText || 'null');
      } catch (e) {
        rec = null;
      }
      if ((x.status === 201 || x.status === 200) && rec && rec.ident) {
        fill(progress, bytesBar('upload-progress', f.size, f.size));
        msg.append(notice('ok', x.status === 201
          ? 'Uploaded ' + rec.name + ' (' + shortSha(rec.ident) + ', ' + fmtBytes(rec.size) + ').'
          : 'The same bytes are there already: ' + rec.name + ' (' + shortSha(rec.ident) +
            '), its name kept.'));
        form.reset();
        onDone(rec);
      } else {
        clear(progress);
        msg.append(notice('error', uploadError(x) + ' Nothing was kept.'));
      }
    });
    xhr.addEventListener('error', () => {
      finish();
      clear(progress);
      msg.append(notice('error', 'The upload did not reach the coordinator (the connection ' +
        'was lost). Nothing was kept.'));
    });
    xhr.addEventListener('abort', () => {
      finish();
      clear(progress);
      msg.append(notice('info', 'Upload cancelled: nothing was kept.'));
    });
    send.disabled = true;
    cancel.hidden = false;
    fill(progress, bytesBar('upload-progress', 0, f.size));
    xhr.send(f);
  });
  return form;
}

export async function list(ctx) {
  const page = Math.max(1, parseInt(ctx.query.get('page') || '1', 10) || 1);
  const name = ctx.query.get('name') || '';
  const admin = mayAdmin(ctx.who);
  const msg = h('div', { id: 'artifacts-msg', 'aria-live': 'polite' });
  const nameIn = h('input', {
    id: 'artifact-filter', name: 'name', value: name, placeholder: 'an artifact name', size: 16,
    autocomplete: 'off',
  });
  const filter = h('form', { class: 'toolbar', novalidate: true },
    h('label', { class: 'filter' }, 'Name ', nameIn),
    h('button', { type: 'submit', id: 'artifact-filter-go' }, 'Filter'));
  filter.addEventListener('submit', (ev) => {
    ev.preventDefault();
    go('artifacts', { name: nameIn.value.trim(), page: 1 });
  });
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading artifacts…'));
  const load = async () => {
    const p = await get('/artifacts', {
      signal: ctx.signal, query: { name, page, per_page: PER_PAGE },
    });
    await lookupTasks(p.items.flatMap((a) => (Array.isArray(a.used_by) ? a.used_by : [])),
      ctx.signal);
    const rows = p.items.map((a) => h('tr', { 'data-artifact': a.sha256 },
      h('td', {}, h('strong', { class: 'art-name' }, a.name),
        h('div', { class: 'mono small muted', title: a.ident }, shortSha(a.ident))),
      h('td', { class: 'num' }, h('span', { title: a.size + ' bytes' }, fmtBytes(a.size))),
      h('td', {}, usedBy(a)),
      h('td', { class: 'opt' }, timeEl(a.created_at),
        h('div', { class: 'small muted' }, 'by ' + a.created_user)),
      admin ? h('td', {}, h('button', {
        type: 'button', class: 'danger small-btn', 'data-delete': a.sha256,
        onclick: () => remove(a),
      }, 'Delete')) : null));
    const heads = ['Artifact', 'Size', 'Used by', { text: 'Uploaded', class: 'opt' }];
    if (admin) heads.push('');
    fill(body,
      p.items.length ? table(heads, rows, 'artifacts')
        : notice('info', name ? 'No artifact has this name.' : 'No artifacts yet.'),
      pager(p, (n) => go('artifacts', { name, page: n }), 'artifacts'));
  };
  const remove = async (a) => {
    clear(msg);
    if (!window.confirm('Delete the artifact ' + a.name + ' (' + shortSha(a.ident) + ')?')) return;
    try {
      await api('DELETE', '/artifacts/' + a.ident, { signal: ctx.signal });
      msg.append(notice('ok', 'Deleted ' + a.name + ' (' + shortSha(a.ident) + ').'));
    } catch (e) {
      if (e.kind === 'aborted') return;
      msg.append(notice('error', e.code === 'artifact_in_use'
        ? a.name + ' is in use, so it was not deleted: ' + e.message + '. A task\'s current ' +
          'version pins it, or a job that has not ended needs it.'
        : errorText(e, 'artifact')));
    }
    await load().catch(() => {});
  };
  ctx.el.append(h('h1', {}, 'Artifacts'),
    h('p', { class: 'small muted' }, 'Files that tasks bring to devices, named by their ' +
      'SHA-256: a job downloads them before its script runs.'),
    admin ? uploadForm(() => load().catch(() => {})) : h('p', { class: 'notice info', id: 'no-upload' }, 'This key\'s role (' +
      (ctx.who ? ctx.who.role : '?') + ') may not upload or delete artifacts: an admin key may.'),
    msg, filter, body);
  try {
    await load();
  } catch (e) {
    if (e.kind === 'aborted') throw e;
    fill(body, retryNotice(e, 'artifacts'));
  }
  ctx.poll(load, 10000);
}
