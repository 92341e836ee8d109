// The dashboard's shell: sign-in, navigation, the routes of the pages, polling, and the
// banner that says when the coordinator can't be reached (docs/dashboard.md).
import { api, getKey, on, setKey, whoami } from './api.js';
import { clear, fill, h, notice } from './dom.js';
import { errorText, retryNotice, setRouter, takeFlash } from './nav.js';
import * as groups from './groups.js';
import * as jobs from './jobs.js';
import * as devices from './devices.js';
import * as tasks from './tasks.js';
import * as artifacts from './artifacts.js';

const main = document.getElementById('main');
const banner = document.getElementById('banner');
const navEl = document.getElementById('nav');
let current = null; // { ctl: AbortController }
let signinMessage = null;

const routes = [
  [/^groups$/, groups.list, 'groups'],
  [/^groups\/([0-9a-f-]{36})$/, groups.show, 'groups'],
  [/^jobs$/, jobs.list, 'jobs'],
  [/^jobs\/([0-9a-f-]{36})$/, jobs.show, 'jobs'],
  [/^devices$/, devices.list, 'devices'],
  [/^devices\/([0-9a-f-]{36})$/, devices.show, 'devices'],
  [/^tasks$/, tasks.list, 'tasks'],
  [/^tasks\/([0-9a-f-]{36})$/, tasks.show, 'tasks'],
  [/^artifacts$/, artifacts.list, 'artifacts'],
];

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const qi = raw.indexOf('?');
  const path = qi < 0 ? raw : raw.slice(0, qi);
  const query = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
  return { path, query };
}

function showBanner(up, message) {
  if (up) {
    banner.hidden = true;
    clear(banner);
    document.body.classList.remove('offline');
    return;
  }
  fill(banner, h('strong', {}, 'No connection: '), message +
    '. Retrying; what is shown may be out of date.');
  banner.hidden = false;
  document.body.classList.add('offline');
}

on('reachable', showBanner);
on('unauthorized', () => {
  if (!getKey()) return;
  setKey('');
  signinMessage = {
    kind: 'error',
    text: 'Your session has ended: the coordinator no longer accepts this API key ' +
      '(revoked, or the coordinator lost it). Sign in again.',
  };
  route();
});

function stopPage() {
  if (current) current.ctl.abort();
  current = null;
}

// Runs fn again every ms (a number, or a function giving it) while the page is shown, not
// while the tab is hidden; after a failure it waits longer (up to 30 s), so a down API is
// not hammered.
function makePoll(ctl) {
  return (fn, every) => {
    const period = () => (typeof every === 'function' ? every() : every);
    let wait = period();
    let timer = null;
    const tick = async () => {
      timer = null;
      if (ctl.signal.aborted) return;
      if (document.hidden) {
        timer = setTimeout(tick, period());
        return;
      }
      try {
        await fn();
        wait = period();
      } catch (e) {
        if (ctl.signal.aborted || e.kind === 'aborted') return;
        wait = Math.min(wait * 2, 30000);
      }
      if (!ctl.signal.aborted) timer = setTimeout(tick, wait);
    };
    timer = setTimeout(tick, wait);
    ctl.signal.addEventListener('abort', () => timer && clearTimeout(timer), { once: true });
  };
}

function setNav(active) {
  for (const a of navEl.querySelectorAll('a[data-page]')) {
    if (a.dataset.page === active) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

// Who is signed in, next to Sign out: the user and the key's role.
function navWho(who) {
  const el = document.getElementById('who');
  if (el) el.textContent = who ? who.user + ' · ' + who.role : '';
}

function signOut() {
  setKey('');
  signinMessage = { kind: 'info', text: 'Signed out. The key is no longer kept by this browser.' };
  if (location.hash !== '#/signin') location.hash = '#/signin';
  else route();
}

function renderSignin() {
  document.body.classList.add('signed-out');
  setNav('');
  const msg = h('div', { id: 'signin-msg', 'aria-live': 'polite' });
  if (signinMessage) msg.append(notice(signinMessage.kind, signinMessage.text));
  signinMessage = null;
  const input = h('input', {
    id: 'api-key', name: 'api-key', type: 'password', autocomplete: 'off', required: true,
    spellcheck: 'false', placeholder: 'rcs_…',
  });
  const button = h('button', { type: 'submit', class: 'primary', id: 'signin' }, 'Sign in');
  const form = h('form', { class: 'signin card', novalidate: true },
    h('h1', {}, 'Remote Command Service'),
    h('p', { class: 'muted' }, 'Sign in with an API key. It is kept for this browser session ' +
      'only and sent to the coordinator\'s REST API with each request.'),
    h('label', { for: 'api-key' }, 'API key'), input, msg, button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    clear(msg);
    if (!key) {
      msg.append(notice('error', 'Enter an API key.'));
      input.focus();
      return;
    }
    button.disabled = true;
    button.textContent = 'Signing in…';
    try {
      await api('GET', '/whoami', { key });
      setKey(key);
      const { path } = parseHash();
      if (!path || path === 'signin') location.hash = '#/groups';
      else route();
      return;
    } catch (e) {
      let text;
      if (e.kind === 'auth') text = 'This API key was refused: it is unknown or revoked.';
      else text = errorText(e, 'key');
      msg.append(notice('error', text));
    } finally {
      button.disabled = false;
      button.textContent = 'Sign in';
    }
  });
  fill(main, form);
  input.focus();
}

function route() {
  stopPage();
  window.scrollTo(0, 0);
  if (!getKey()) {
    renderSignin();
    return;
  }
  document.body.classList.remove('signed-out');
  const { path, query } = parseHash();
  if (!path || path === 'signin') {
    location.replace('#/groups');
    return;
  }
  let match = null;
  for (const [re, fn, page] of routes) {
    const m = path.match(re);
    if (m) {
      match = { fn, page, params: m.slice(1) };
      break;
    }
  }
  clear(main);
  const flash = takeFlash();
  if (flash) main.append(notice(flash.kind, flash.text));
  if (!match) {
    setNav('');
    main.append(notice('error', 'There is no page "' + path + '" in the dashboard.'),
      h('p', {}, h('a', { href: '#/groups' }, 'Go to the groups')));
    return;
  }
  setNav(match.page);
  const ctl = new AbortController();
  current = { ctl };
  const section = h('section', { class: 'page page-' + match.page });
  main.append(section);
  const ctx = {
    who: null,
    el: section,
    params: match.params,
    query,
    signal: ctl.signal,
    poll: makePoll(ctl),
    alive: () => !ctl.signal.aborted,
  };
  whoami(ctl.signal).then((who) => {
    ctx.who = who;
    navWho(who);
    return match.fn(ctx);
  }).catch((e) => {
    if (ctl.signal.aborted || e.kind === 'aborted') return;
    fill(section, retryNotice(e, match.page.replace(/s$/, '')));
  });
}

document.getElementById('signout').addEventListener('click', signOut);
setRouter(route);
window.addEventListener('hashchange', route);
route();
