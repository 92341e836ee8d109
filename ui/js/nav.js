// Links between the pages (hash routes), the message carried to the next page, and the
// words for an error that ends a page's load.
import { h, notice } from './dom.js';

let router = () => {};
let flash = null;

export function setRouter(fn) {
  router = fn;
}

export function href(path, query) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return '#/' + path + (s ? '?' + s : '');
}

export function go(path, query) {
  const target = href(path, query);
  if (location.hash === target) router();
  else location.hash = target;
}

// A message ({kind, text}) shown at the top of the next page.
export function setFlash(kind, text) {
  flash = { kind, text };
}

export function takeFlash() {
  const f = flash;
  flash = null;
  return f;
}

export function errorText(e, what) {
  switch (e.kind) {
    case 'notfound':
      return 'No such ' + what + ', or it is not visible to this API key.';
    case 'forbidden':
      return 'This API key\'s role may not do this: ' + e.message + '.';
    case 'down':
      return 'The coordinator did not answer: ' + e.message + '.';
    case 'throttled':
      return 'Too many requests with wrong keys from this address: retry in ' +
        (e.retryAfter || 60) + ' s.';
    case 'invalid':
      return 'The request was refused: ' + e.message + '.';
    default:
      return 'Error: ' + e.message + (e.status ? ' (HTTP ' + e.status + ')' : '') + '.';
  }
}

// The error that stopped a page's load, in place of its content, with Try again (which
// loads the page anew): never a blank page (docs/dashboard.md "Live updates").
export function retryNotice(e, what) {
  return notice('error', errorText(e, what), ' ',
    h('button', { type: 'button', id: 'try-again', onclick: () => router() }, 'Try again'));
}
