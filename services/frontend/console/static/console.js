// Switchyard console. Reads one snapshot from /console/state, then follows
// /console/events (server-sent events, one `state` frame a second) and draws
// every frame. fetch() rather than EventSource, because EventSource cannot
// send the Authorization header, and the key must never be in a URL.
'use strict';

(() => {
  // ?tenant= on the page narrows an operator's view; it is not a secret.
  const NARROW = (() => {
    const t = new URLSearchParams(location.search).get('tenant');
    return t ? '?tenant=' + encodeURIComponent(t) : '';
  })();
  const STATE_URL = '/console/state' + NARROW;
  const EVENTS_URL = '/console/events' + NARROW;
  const KEY_STORAGE = 'switchyard.console.key';
  // The server sends a frame a second: this long without a byte means the
  // stream is dead even if the connection looks open.
  const STALL_MS = 6000;
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 15000;
  // How much cache history the chart keeps.
  const HISTORY_MS = 15 * 60 * 1000;
  // A lease with less than this share of the fleet's lease left has missed
  // heartbeats (shims renew at a third of it).
  const LEASE_EXPIRING_SHARE = 0.4;

  const $ = (id) => document.getElementById(id);
  const nf = new Intl.NumberFormat();
  const pf = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 1 });

  const ui = {
    key: sessionStorage.getItem(KEY_STORAGE) || '',
    state: null,
    expanded: new Set(), // session keys whose turns are shown
    workersKey: '',
    sessionsKey: '',
    samples: [], // {t, prompt, cached, ideal}: the cache totals of each frame
    points: [], // {t, hit, ideal}: the hit rate between two frames
    leaseTTL: 0, // seconds: the longest lease left seen, the fleet's lease
    stream: null, // the AbortController of the events stream
    retryTimer: 0,
    backoff: BACKOFF_MIN_MS,
    starts: 0, // counts start(): a start that a newer one replaced stops
  };

  // ---- DOM helpers: every value goes in as text, never as HTML.

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, text) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = text;
    return el;
  }

  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const fmt = (v) => (isNum(v) ? nf.format(v) : '—');
  const pct = (v) => (isNum(v) ? pf.format(v) : '—');
  const ratio = (a, b) => (isNum(a) && isNum(b) && b > 0 ? a / b : null);

  // numCell is a right-aligned number: the display text has thousands
  // separators, data-value the plain number ("" when unknown).
  function numCell(v, attrs) {
    return h('td', { class: 'num', 'data-value': isNum(v) ? String(v) : '', title: isNum(v) ? null : 'not reported', ...attrs }, fmt(v));
  }

  function timeOf(iso) {
    const t = Date.parse(iso);
    if (!Number.isFinite(t)) return '—';
    return new Date(t).toLocaleTimeString(undefined, { hour12: false });
  }

  // ---- Key

  function authHeaders() {
    return ui.key ? { Authorization: 'Bearer ' + ui.key } : {};
  }

  function setKey(value) {
    ui.key = (value || '').trim();
    if (ui.key) sessionStorage.setItem(KEY_STORAGE, ui.key);
    else sessionStorage.removeItem(KEY_STORAGE);
    $('key-input').value = '';
    $('key-needed-input').value = '';
    showKeyState();
    resetData();
    start();
  }

  function showKeyState() {
    $('key-input').placeholder = ui.key ? 'key set (this tab)' : 'none';
    $('key-forget').hidden = !ui.key;
  }

  async function needKey(resp) {
    let detail = '';
    try {
      const body = await resp.json();
      const err = body && body.error;
      detail = (err && typeof err === 'object' ? err.message : err) || (body && body.message) || '';
      if (typeof detail !== 'string') detail = '';
    } catch (_) {
      // Not JSON: the status says enough.
    }
    $('key-needed-detail').textContent = ui.key
      ? 'The key was not accepted' + (detail ? ': ' + detail : '.') + ' Enter another one.'
      : 'This frontend has API keys configured. Enter one to see the fleet and your tenant\'s sessions.';
    $('main').hidden = true;
    $('key-form').hidden = true; // the panel has the field
    $('key-needed').hidden = false;
    setLive('stopped', 'needs a key');
    $('key-needed-input').focus();
  }

  // ---- Banner

  const problems = new Map();
  function problem(name, text) {
    if (text) problems.set(name, text);
    else problems.delete(name);
    const b = $('banner');
    b.textContent = [...problems.values()].join(' · ');
    b.hidden = problems.size === 0;
  }

  // ---- Live indicator

  function setLive(state, label, title) {
    const el = $('live');
    el.dataset.state = state;
    el.querySelector('.live-label').textContent = label || state;
    el.title = title || '';
  }

  // ---- Data flow

  function resetData() {
    ui.state = null;
    ui.samples = [];
    ui.points = [];
    ui.workersKey = ui.sessionsKey = '';
    ui.leaseTTL = 0;
  }

  async function start() {
    const run = ++ui.starts;
    stopStream();
    $('key-needed').hidden = true;
    setLive('connecting', 'connecting');
    let resp;
    try {
      resp = await fetch(STATE_URL, { headers: authHeaders(), cache: 'no-store' });
    } catch (_) {
      resp = null; // the events stream retries with backoff
    }
    if (run !== ui.starts) return; // a new key started again meanwhile
    if (resp && (resp.status === 401 || resp.status === 403)) {
      await needKey(resp);
      return;
    }
    if (resp && resp.ok) {
      problem('state', '');
      try {
        const st = await resp.json();
        if (run !== ui.starts) return;
        apply(st);
      } catch (e) {
        problem('state', 'The state could not be read: ' + e.message);
      }
    } else if (resp) {
      problem('state', 'GET /console/state answered ' + resp.status + '.');
    }
    follow();
  }

  function stopStream() {
    clearTimeout(ui.retryTimer);
    if (ui.stream) ui.stream.abort();
    ui.stream = null;
  }

  async function follow() {
    stopStream();
    const ctl = new AbortController();
    ui.stream = ctl;
    let stall = 0;
    const kick = () => {
      clearTimeout(stall);
      stall = setTimeout(() => ctl.abort(), STALL_MS);
    };
    let unauthorized = false;
    try {
      kick();
      const resp = await fetch(EVENTS_URL, {
        headers: { ...authHeaders(), Accept: 'text/event-stream' },
        cache: 'no-store',
        signal: ctl.signal,
      });
      if (resp.status === 401 || resp.status === 403) {
        unauthorized = true;
        if (ui.stream === ctl) await needKey(resp);
        return;
      }
      if (!resp.ok || !resp.body) throw new Error('HTTP ' + resp.status);
      await readEvents(resp.body, kick, (ev) => {
        if (ui.stream !== ctl) return;
        if (ev.event === 'unavailable') {
          // The frontend could not gather a state this second; it keeps
          // the stream and tries again at the next.
          let msg = '';
          try {
            msg = JSON.parse(ev.data).message || '';
          } catch (_) {
            msg = ev.data;
          }
          problem('frame', 'The frontend could not gather the state' + (msg ? ': ' + msg : '') + '. The page shows the last one.');
          setLive('live', 'live (stale)');
          return;
        }
        if (ev.event !== 'state') return;
        let st;
        try {
          st = JSON.parse(ev.data);
        } catch (e) {
          problem('frame', 'A frame could not be read: ' + e.message);
          return;
        }
        problem('frame', '');
        ui.backoff = BACKOFF_MIN_MS;
        setLive('live', 'live');
        apply(st);
      });
    } catch (_) {
      // Aborted or the connection broke: retried below.
    } finally {
      clearTimeout(stall);
    }
    if (ui.stream !== ctl || unauthorized) return; // superseded or stopped
    const delay = Math.round(ui.backoff * (0.8 + 0.4 * Math.random()));
    ui.backoff = Math.min(ui.backoff * 2, BACKOFF_MAX_MS);
    setLive('reconnecting', 'reconnecting', 'the next attempt in ' + (delay / 1000).toFixed(1) + ' s');
    ui.retryTimer = setTimeout(follow, delay);
  }

  // readEvents parses a text/event-stream body (the WHATWG rules: lines end
  // in CRLF, LF or CR; a blank line dispatches; comments start with ':'),
  // calling onChunk for every chunk read and onEvent for every event.
  async function readEvents(body, onChunk, onEvent) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let data = [];
    let event = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onChunk();
      buf += value;
      for (;;) {
        const i = buf.search(/[\r\n]/);
        if (i < 0) break;
        if (buf[i] === '\r' && i === buf.length - 1) break; // maybe half a CRLF
        const line = buf.slice(0, i);
        buf = buf.slice(buf.startsWith('\r\n', i) ? i + 2 : i + 1);
        if (line === '') {
          if (data.length > 0) onEvent({ event: event || 'message', data: data.join('\n') });
          data = [];
          event = '';
          continue;
        }
        if (line[0] === ':') continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? '' : line.slice(colon + 1);
        if (v[0] === ' ') v = v.slice(1);
        if (field === 'data') data.push(v);
        else if (field === 'event') event = v;
      }
    }
  }

  function apply(st) {
    ui.state = st;
    $('key-needed').hidden = true;
    $('key-form').hidden = false;
    $('main').hidden = false;
    sample(st);
    render(st);
  }

  // sample turns successive cache totals into hit rates between frames.
  function sample(st) {
    const c = st.cache || {};
    const t = Date.parse(st.at);
    if (!Number.isFinite(t) || !isNum(c.promptTokens)) return;
    const cur = { t, prompt: c.promptTokens, cached: c.cachedTokens || 0, ideal: c.idealCachedTokens || 0,
      missing: st.schedulersMissing || 0 };
    const prev = ui.samples[ui.samples.length - 1];
    if (prev && t <= prev.t) return; // the same frame twice (state, then the stream's first)
    if (prev && (cur.missing !== prev.missing || cur.prompt < prev.prompt || cur.cached < prev.cached || cur.ideal < prev.ideal)) {
      // A scheduler replica stopped or started answering (its totals, since
      // it started, left or joined the sums), or one restarted (totals went
      // down): this interval says nothing; the next one starts from here.
    } else if (prev && cur.prompt > prev.prompt) {
      const dp = cur.prompt - prev.prompt;
      ui.points.push({
        t,
        hit: Math.min(1, Math.max(0, (cur.cached - prev.cached) / dp)),
        ideal: Math.min(1, Math.max(0, (cur.ideal - prev.ideal) / dp)),
      });
    }
    ui.samples.push(cur);
    const cutoff = t - HISTORY_MS;
    while (ui.samples.length > 2 && ui.samples[0].t < cutoff) ui.samples.shift();
    while (ui.points.length > 0 && ui.points[0].t < cutoff) ui.points.shift();
  }

  // ---- Rendering

  function render(st) {
    $('tenant').textContent = st.tenant ? 'tenant ' + st.tenant : 'all tenants';
    $('at').textContent = 'as of ' + timeOf(st.at);
    $('at').title = st.at || '';
    const missing = st.schedulersMissing || 0;
    problem('schedulers', missing > 0
      ? missing + (missing === 1 ? ' scheduler replica did' : ' scheduler replicas did') + ' not answer: the fleet and the sessions may be incomplete.'
      : '');

    const workers = st.workers || [];
    const wk = JSON.stringify([workers, st.at]);
    if (wk !== ui.workersKey) {
      ui.workersKey = wk;
      renderFleet(st, workers);
    }
    const sessions = st.sessions || [];
    const sk = JSON.stringify([sessions, [...ui.expanded]]);
    if (sk !== ui.sessionsKey) {
      ui.sessionsKey = sk;
      renderSessions(sessions);
    }
    renderCache(st);
  }

  function renderFleet(st, workers) {
    const at = Date.parse(st.at);
    const left = new Map();
    for (const w of workers) {
      const exp = Date.parse(w.leaseExpiresAt);
      if (Number.isFinite(exp) && Number.isFinite(at)) {
        left.set(w.id, (exp - at) / 1000);
        // The scheduler's lease when it says; else the longest left seen.
        ui.leaseTTL = isNum(st.leaseTtlS) && st.leaseTtlS > 0 ? st.leaseTtlS : Math.max(ui.leaseTTL, (exp - at) / 1000);
      }
    }
    const running = workers.reduce((n, w) => n + (w.running || 0), 0);
    const waiting = workers.reduce((n, w) => n + (w.waiting || 0), 0);
    $('fleet-summary').textContent = workers.length + (workers.length === 1 ? ' worker' : ' workers') +
      ' · ' + fmt(running) + ' running · ' + fmt(waiting) + ' waiting';
    const cards = [...workers]
      .sort((a, b) => String(a.id).localeCompare(String(b.id), undefined, { numeric: true }))
      .map((w) => workerCard(w, left.get(w.id)));
    if (cards.length === 0) cards.push(h('p', { class: 'empty' }, 'No workers hold a lease.'));
    $('workers').replaceChildren(...cards);
  }

  function leaseBadge(secondsLeft) {
    if (!isNum(secondsLeft)) return h('span', { class: 'badge', title: 'lease not reported' }, 'lease unknown');
    const title = 'lease ' + (secondsLeft > 0 ? 'expires in ' + secondsLeft.toFixed(1) + ' s' : 'expired');
    if (secondsLeft <= 0) return h('span', { class: 'badge bad', 'data-lease': 'expired', title }, 'expired');
    if (ui.leaseTTL > 0 && secondsLeft < LEASE_EXPIRING_SHARE * ui.leaseTTL) {
      return h('span', { class: 'badge warn', 'data-lease': 'expiring', title }, 'expiring · ' + Math.ceil(secondsLeft) + ' s');
    }
    return h('span', { class: 'badge ok', 'data-lease': 'healthy', title }, 'healthy');
  }

  // known is fmt for a count an engine may not report (null: not reported).
  function known(v) {
    return isNum(v) ? fmt(v) : 'not reported';
  }

  function workerCard(w, secondsLeft) {
    const p = w.programs || {};
    const count = (v, paused) => h('td', { class: 'num' + (v ? '' : ' zero') + (paused ? ' paused-count' : '') }, fmt(v || 0));
    return h('article', { class: 'card', 'data-testid': 'worker-card', 'data-worker-id': w.id },
      h('div', { class: 'card-head' }, h('h3', { text: w.id }), leaseBadge(secondsLeft)),
      h('div', { class: 'card-sub', title: w.address || '' }, [w.engine, w.model, w.address].filter(Boolean).join(' · ')),
      h('dl', { class: 'stats' },
        h('div', {}, h('dt', {}, 'running'), h('dd', { 'data-value': w.running ?? '' }, fmt(w.running))),
        h('div', {}, h('dt', {}, 'waiting'), h('dd', { 'data-value': w.waiting ?? '' }, fmt(w.waiting))),
        h('div', {}, h('dt', {}, 'prefix hit'), h('dd', { 'data-value': w.prefixHitRate ?? '' }, pct(w.prefixHitRate)))),
      h('dl', { class: 'stats' },
        h('div', {}, h('dt', {}, 'evicted blocks'), h('dd', { 'data-testid': 'worker-evicted', 'data-value': w.evictedBlocks ?? '' }, known(w.evictedBlocks))),
        h('div', {}, h('dt', {}, 're-prefilled'), h('dd', { 'data-value': w.rePrefilledTokens ?? '' }, known(w.rePrefilledTokens))),
        h('div', {}, h('dt', {}, 'preemptions'), h('dd', { 'data-value': w.preemptions ?? '' }, fmt(w.preemptions)))),
      h('div', { class: 'kv' }, (w.kv || []).map(tierRow)),
      h('table', { class: 'programs' },
        h('thead', {}, h('tr', {}, h('th', {}, 'programs'), h('th', { class: 'num' }, 'active'), h('th', { class: 'num' }, 'paused'))),
        h('tbody', {},
          h('tr', {}, h('td', {}, 'reasoning'), count(p.reasoningActive), count(p.reasoningPaused, true)),
          h('tr', {}, h('td', {}, 'acting'), count(p.actingActive), count(p.actingPaused, true))),
        h('tfoot', {}, h('tr', {}, h('td', {}, 'tokens'), h('td', { class: 'num', colspan: 2, 'data-value': p.tokens ?? '' }, fmt(p.tokens))))));
  }

  function tierRow(k) {
    const used = k.usedBlocks;
    const total = k.totalBlocks;
    const row = (bar, value, cls, title) =>
      h('div', { class: 'tier', 'data-tier': k.tier, title },
        h('span', { class: 'tier-name' }, k.tier), bar, h('span', { class: 'tier-value' + (cls ? ' ' + cls : '') }, value));
    if (!isNum(total) || total <= 0) {
      if (isNum(used) && used > 0) return row(h('div', { class: 'bar unknown' }), fmt(used) + ' blocks', '', 'capacity not reported');
      return row(h('div', { class: 'bar absent' }), 'none', 'muted', 'this worker has no ' + k.tier + ' tier');
    }
    if (!isNum(used)) {
      return row(h('div', { class: 'bar unknown' }), fmt(total) + ' · use not reported', 'muted', fmt(total) + ' blocks; the engine does not report their use');
    }
    const share = Math.min(1, Math.max(0, used / total));
    const fill = h('div', { class: 'fill' + (share >= 0.9 ? ' bad' : share >= 0.7 ? ' warn' : '') });
    fill.style.width = (share * 100).toFixed(1) + '%';
    return row(h('div', { class: 'bar' }, fill), fmt(used) + ' / ' + fmt(total), '', pct(share) + ' of ' + fmt(total) + ' blocks');
  }

  const sessionKey = (tenant, id) => tenant + '\u0000' + id;
  const byTime = (field, dir) => (a, b) => dir * ((Date.parse(a[field]) || 0) - (Date.parse(b[field]) || 0)) ||
    String(a.sessionId).localeCompare(String(b.sessionId));

  function renderSessions(sessions) {
    const byKey = new Map(sessions.map((x) => [sessionKey(x.tenant, x.sessionId), x]));
    const children = new Map();
    const roots = [];
    for (const x of sessions) {
      const pk = x.parentSessionId ? sessionKey(x.tenant, x.parentSessionId) : '';
      if (pk && byKey.has(pk) && pk !== sessionKey(x.tenant, x.sessionId)) {
        if (!children.has(pk)) children.set(pk, []);
        children.get(pk).push(x);
      } else {
        roots.push({ x, orphan: Boolean(pk) });
      }
    }
    const rows = [];
    const seen = new Set();
    const walk = (x, depth, orphan) => {
      const k = sessionKey(x.tenant, x.sessionId);
      if (seen.has(k)) return;
      seen.add(k);
      rows.push(...sessionRows(x, depth, orphan));
      for (const c of (children.get(k) || []).sort(byTime('firstSeen', 1))) walk(c, depth + 1, false);
    };
    roots.sort((a, b) => byTime('firstSeen', -1)(a.x, b.x));
    for (const r of roots) walk(r.x, 0, r.orphan);
    // A parent cycle has no root: show what it left out at the top level.
    for (const x of sessions) walk(x, 0, true);

    $('session-rows').replaceChildren(...rows);
    $('sessions-empty').hidden = sessions.length > 0;
    const subs = sessions.filter((x) => x.parentSessionId).length;
    const paused = sessions.filter((x) => x.program && x.program.lifecycle === 'PAUSED').length;
    $('sessions-summary').textContent = sessions.length + (sessions.length === 1 ? ' session' : ' sessions') +
      (subs ? ' · ' + subs + ' sub-agent' + (subs === 1 ? '' : 's') : '') + (paused ? ' · ' + paused + ' paused' : '');
    const all = sessions.length > 0 && sessions.every((x) => ui.expanded.has(sessionKey(x.tenant, x.sessionId)));
    $('expand-all').textContent = all ? 'Collapse all' : 'Expand all';
  }

  const COLUMNS = 11;

  function sessionRows(x, depth, orphan) {
    const k = sessionKey(x.tenant, x.sessionId);
    const open = ui.expanded.has(k);
    const prog = x.program;
    const paused = prog && prog.lifecycle === 'PAUSED';
    const name = h('td', { class: 'name' },
      h('button', {
        type: 'button', class: 'toggle', 'aria-expanded': open ? 'true' : 'false', 'data-testid': 'session-toggle',
        title: open ? 'hide the turns' : 'show the turns',
        onclick: () => {
          if (ui.expanded.has(k)) ui.expanded.delete(k);
          else ui.expanded.add(k);
          render(ui.state);
        },
      }, h('span', { class: 'chev' }, '▶')),
      depth > 0 ? h('span', { class: 'branch' }, '└') : null,
      h('span', { class: 'sid', title: x.sessionId }, x.sessionId),
      orphan ? h('span', { class: 'tag orphan', title: 'parent ' + x.parentSessionId + ' is not listed' }, 'parent not listed') : null,
      depth > 0 ? h('span', { class: 'tag' }, 'sub-agent') : null);
    name.style.paddingLeft = (4 + depth * 22) + 'px';
    const row = h('tr', {
      class: 'session-row' + (paused ? ' paused' : ''),
      'data-testid': 'session-row',
      'data-session-id': x.sessionId,
      'data-parent-id': x.parentSessionId || null,
      'data-tenant': x.tenant,
      'data-depth': depth,
    },
    name,
    h('td', {}, x.tenant),
    h('td', {}, x.harness || '—'),
    numCell(x.turns, { 'data-testid': 'session-turns' }),
    numCell(x.promptTokens),
    numCell(x.cachedTokens),
    numCell(x.completionTokens),
    h('td', { class: 'num', title: 'ideal ' + pct(ratio(x.idealCachedTokens, x.promptTokens)) }, pct(ratio(x.cachedTokens, x.promptTokens))),
    h('td', { class: 'mono' }, x.lastWorkerId || '—'),
    h('td', { class: 'program' }, programCell(prog)),
    h('td', {}, traceLink(x)));
    if (!open) return [row];
    return [row, h('tr', { class: 'turns-row', 'data-session-id': x.sessionId }, h('td', { colspan: COLUMNS }, sessionDetail(x)))];
  }

  function programCell(p) {
    if (!p) return h('span', { class: 'muted' }, '—');
    const paused = p.lifecycle === 'PAUSED';
    const parts = [
      h('span', { class: 'state ' + (paused ? 'paused' : 'active') }, (p.phase || '?') + ' · ' + (p.lifecycle || '?')),
      ' ',
      h('span', { class: 'muted' }, p.workerId ? 'on ' + p.workerId : 'no worker'),
      ' · ',
      h('span', { class: 'num', 'data-value': p.tokens ?? '' }, fmt(p.tokens) + ' tok'),
    ];
    const pausedFor = isNum(p.pausedTotalS) && p.pausedTotalS > 0 ? 'paused ' + p.pausedTotalS.toFixed(1) + ' s in all' : '';
    const reason = [paused ? p.reason : '', pausedFor].filter(Boolean).join(' · ');
    return h('div', {}, h('div', {}, parts), reason ? h('div', { class: 'reason', 'data-testid': 'pause-reason' }, reason) : null);
  }

  function traceLink(x) {
    const href = '/console/sessions/' + encodeURIComponent(x.tenant) + '/' + encodeURIComponent(x.sessionId) + '/perfetto';
    return h('a', {
      href,
      download: 'session-' + x.sessionId + '.perfetto.json',
      'data-testid': 'perfetto-link',
      title: 'download the trace of this session, for ui.perfetto.dev',
      onclick: (e) => {
        // A plain link cannot carry the key: with one, fetch the trace.
        if (!ui.key) return;
        e.preventDefault();
        download(href, 'session-' + x.sessionId + '.perfetto.json');
      },
    }, 'download trace (Perfetto)');
  }

  async function download(href, name) {
    try {
      const resp = await fetch(href, { headers: authHeaders(), cache: 'no-store' });
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      const url = URL.createObjectURL(await resp.blob());
      const a = h('a', { href: url, download: name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
      problem('trace', '');
    } catch (e) {
      problem('trace', 'The trace could not be downloaded: ' + e.message + '.');
    }
  }

  function sessionDetail(x) {
    return h('div', { class: 'detail' }, admissionsList(x), turnsTable(x));
  }

  // admissionsList is the latest admission decisions about the session's
  // program (pauses, resumes, …, with their reasons), oldest first.
  function admissionsList(x) {
    const list = x.admissions || [];
    if (list.length === 0) return null;
    return h('div', { class: 'admissions', 'data-testid': 'admissions' },
      h('span', { class: 'muted' }, 'admission'),
      list.map((a) => h('span', {
        class: 'admission' + (a.lifecycle === 'PAUSED' ? ' paused' : ''),
        'data-testid': 'admission',
        title: a.at + (a.workerId ? ' · ' + a.workerId : ''),
      }, h('span', { class: 'when' }, timeOf(a.at)), ' ', h('b', {}, a.reason || '?'), ' → ', a.lifecycle || '?',
      a.workerId ? ' on ' + a.workerId : '')));
  }

  function turnsTable(x) {
    const turns = [...(x.recentTurns || [])].sort((a, b) => (Date.parse(a.at) || 0) - (Date.parse(b.at) || 0));
    if (turns.length === 0) return h('p', { class: 'turns-note' }, 'No recent turns kept for this session.');
    const rows = turns.map((t) => h('tr', { 'data-testid': 'turn-row', 'data-request-id': t.requestId, 'data-session-id': x.sessionId },
      h('td', { title: t.at }, timeOf(t.at)),
      h('td', { class: 'mono' }, t.workerId || '—'),
      numCell(t.promptTokens),
      numCell(t.cachedTokens, { 'data-testid': 'turn-cached', class: 'num' + (t.cachedTokens > 0 ? ' cached-hit' : '') }),
      numCell(t.completionTokens),
      h('td', { class: 'num', 'data-value': t.ttftMs ?? '' }, isNum(t.ttftMs) ? t.ttftMs.toFixed(1) : '—'),
      h('td', { class: 'num', 'data-value': t.totalMs ?? '' }, isNum(t.totalMs) ? t.totalMs.toFixed(1) : '—'),
      h('td', {}, t.finishReason || '—'),
      h('td', {}, (t.tools || []).length ? (t.tools || []).map((n) => h('span', { class: 'tool' }, n)) : h('span', { class: 'muted' }, '—')),
      h('td', { class: 'reqid' }, t.requestId)));
    const table = h('table', { class: 'turns' },
      h('thead', {}, h('tr', {},
        h('th', {}, 'Time'), h('th', {}, 'Worker'), h('th', { class: 'num' }, 'Prompt'), h('th', { class: 'num' }, 'Cached'),
        h('th', { class: 'num' }, 'Completion'), h('th', { class: 'num' }, 'TTFT ms'), h('th', { class: 'num' }, 'Total ms'), h('th', {}, 'Finish'), h('th', {}, 'Tools'),
        h('th', {}, 'Request'))),
      h('tbody', {}, rows));
    const note = isNum(x.turns) && x.turns > turns.length
      ? h('p', { class: 'turns-note' }, 'The last ' + turns.length + ' of ' + fmt(x.turns) + ' turns.')
      : null;
    return h('div', {}, table, note);
  }

  function renderCache(st) {
    const c = st.cache || {};
    const hit = ratio(c.cachedTokens, c.promptTokens);
    const ideal = ratio(c.idealCachedTokens, c.promptTokens);
    const missed = isNum(c.idealCachedTokens) && isNum(c.cachedTokens) ? Math.max(0, c.idealCachedTokens - c.cachedTokens) : null;
    const pair = (label, value, attrs) => [h('dt', {}, label), h('dd', attrs || {}, value)];
    $('cache-totals').replaceChildren(
      ...pair('hit rate', pct(hit), { class: 'strong', 'data-testid': 'cache-hit-rate', 'data-value': hit ?? '' }),
      ...pair('ideal', pct(ideal), { 'data-value': ideal ?? '' }),
      ...pair('prompt tokens', fmt(c.promptTokens), { 'data-value': c.promptTokens ?? '' }),
      ...pair('cached tokens', fmt(c.cachedTokens), { 'data-value': c.cachedTokens ?? '' }),
      ...pair('ideal cached tokens', fmt(c.idealCachedTokens), { 'data-value': c.idealCachedTokens ?? '' }),
      ...pair('missed against ideal', fmt(missed), { 'data-value': missed ?? '' }),
      ...pair('evicted blocks', known(c.evictedBlocks), { 'data-testid': 'cache-evicted', 'data-value': c.evictedBlocks ?? '' }),
      ...pair('re-prefilled tokens', known(c.rePrefilledTokens), { 'data-value': c.rePrefilledTokens ?? '' }));
    $('cache-chart').replaceChildren(chart(Date.parse(st.at)), legend());
    renderHints(st.hints);
  }

  const HINT_OUTCOMES = ['accepted', 'clipped', 'deferred', 'rejected', 'throttled', 'errors', 'unsupported'];

  // renderHints shows the KV hints the emitter sent and what the engines
  // did with them (an operator's view; null for a tenant's or without an
  // emitter).
  function renderHints(hints) {
    const box = $('hints');
    if (!hints) {
      box.replaceChildren(h('h3', { class: 'sub-head' }, 'KV hints'),
        h('p', { class: 'empty' }, 'No hints to show: this frontend has no hint emitter, it does not answer, or this is a tenant\'s view.'));
      return;
    }
    const k = JSON.stringify(hints);
    if (box.dataset.key === k) return;
    box.dataset.key = k;
    const counts = h('dl', { class: 'hint-counts', 'data-testid': 'hint-counts' },
      h('div', {}, h('dt', {}, 'sent'), h('dd', { 'data-value': hints.sent ?? '' }, fmt(hints.sent))),
      HINT_OUTCOMES.map((o) => h('div', { class: hints[o] > 0 ? 'outcome-' + o : 'zero', 'data-outcome': o },
        h('dt', {}, o === 'errors' ? 'failed' : o), h('dd', { 'data-value': hints[o] ?? '' }, fmt(hints[o])))));
    const recent = hints.recent || [];
    const table = recent.length === 0 ? h('p', { class: 'empty' }, 'No hints sent yet.') : h('table', { class: 'turns hints-recent' },
      h('thead', {}, h('tr', {}, ['Time', 'Worker', 'Policy', 'Action', 'Result', 'Reason'].map((c) => h('th', {}, c)))),
      h('tbody', {}, [...recent].reverse().map((r) => h('tr', { 'data-testid': 'hint-row' },
        h('td', { title: r.at }, timeOf(r.at)),
        h('td', { class: 'mono' }, r.workerId || '—'),
        h('td', {}, r.policy || '—'),
        h('td', { class: 'mono' }, r.action || '—'),
        h('td', {}, h('span', { class: 'result result-' + (r.result || 'unknown') }, r.result || '—')),
        h('td', { class: 'muted' }, r.reason || '')))));
    box.replaceChildren(h('h3', { class: 'sub-head' }, 'KV hints'), counts, table);
  }

  function legend() {
    return h('div', { class: 'legend' },
      h('span', {}, h('span', { class: 'swatch' }), 'hit rate'),
      h('span', {}, h('span', { class: 'swatch ideal' }), 'ideal'),
      h('span', {}, ui.points.length + (ui.points.length === 1 ? ' interval' : ' intervals') + ' with traffic'));
  }

  function chart(now) {
    const W = 720;
    const H = 160;
    const L = 40;
    const R = 12;
    const T = 10;
    const B = 24;
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'cache hit rate over time', 'data-testid': 'cache-chart' });
    const y = (v) => T + (1 - v) * (H - T - B);
    for (const v of [0, 0.25, 0.5, 0.75, 1]) {
      svg.append(s('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      svg.append(s('text', { class: 'axis-label', x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, pf.format(v)));
    }
    const first = ui.samples.length ? ui.samples[0].t : now;
    const t0 = Math.min(first, now - 60 * 1000);
    const t1 = Number.isFinite(now) ? now : first;
    const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
    svg.append(s('text', { class: 'axis-label', x: L, y: H - 6 }, timeOf(new Date(t0).toISOString())));
    svg.append(s('text', { class: 'axis-label', x: W - R, y: H - 6, 'text-anchor': 'end' }, timeOf(new Date(t1).toISOString())));
    if (ui.points.length === 0) {
      svg.append(s('text', { class: 'note', x: (L + W - R) / 2, y: y(0.5) + 4, 'text-anchor': 'middle' },
        'No new prompt tokens since this page opened: the chart fills as turns arrive.'));
      return svg;
    }
    const line = (field, cls) => s('polyline', { class: cls, points: ui.points.map((p) => `${x(p.t).toFixed(1)},${y(p[field]).toFixed(1)}`).join(' ') });
    svg.append(line('ideal', 'line-ideal'), line('hit', 'line-hit'));
    for (const p of ui.points) {
      svg.append(s('circle', { class: 'dot-ideal', cx: x(p.t).toFixed(1), cy: y(p.ideal).toFixed(1), r: 2 }));
      svg.append(s('circle', { class: 'dot-hit', cx: x(p.t).toFixed(1), cy: y(p.hit).toFixed(1), r: 2.5 }));
    }
    return svg;
  }

  // ---- Wiring

  function wire() {
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      setKey($('key-input').value);
    });
    $('key-needed-form').addEventListener('submit', (e) => {
      e.preventDefault();
      setKey($('key-needed-input').value);
    });
    $('key-forget').addEventListener('click', () => setKey(''));
    $('expand-all').addEventListener('click', () => {
      const sessions = (ui.state && ui.state.sessions) || [];
      const keys = sessions.map((x) => sessionKey(x.tenant, x.sessionId));
      const all = keys.length > 0 && keys.every((k) => ui.expanded.has(k));
      for (const k of keys) {
        if (all) ui.expanded.delete(k);
        else ui.expanded.add(k);
      }
      if (ui.state) render(ui.state);
    });
    showKeyState();
    start();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', wire);
  else wire();
})();
