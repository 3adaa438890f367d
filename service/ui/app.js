// The onebit dashboard: the job list, and for the selected job its live loss curves, phase and
// freeze step, bytes sent against an fp32 allreduce, attempts, checkpoints and the end of its
// log. Everything comes from onebitd's REST API on this origin.
//
// The token: typed into the form or passed as /ui/#token=TOKEN (a fragment never reaches a
// server); it is kept in this tab's sessionStorage, removed from the address bar at once, and
// sent only as "Authorization: Bearer" on fetch() calls. The event stream is read with fetch()
// too, not EventSource, which cannot send headers: the token never appears in a URL.
//
// Everything the API returns is untrusted text: it reaches the page only through textContent
// and canvas drawing, never as HTML.
'use strict';

(function () {
  const TOKEN_KEY = 'onebit.token';
  const POLL_MS = 2000;
  const LOG_KEEP = 64 * 1024; // characters of log text kept on the page
  const JOB_ID = /^[A-Za-z0-9._-]{1,63}$/;
  const FINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

  const $ = (id) => document.getElementById(id);
  let token = '';
  try { token = sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { /* storage disabled */ }

  // The selected job and everything shown of it; replaced whole when another is selected.
  let view = null;

  // ---- the API ------------------------------------------------------------------------------

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (token) h['Authorization'] = 'Bearer ' + token;
    return h;
  }

  // An Error carrying the API's {"error": {...}} message and the HTTP status.
  async function apiError(r) {
    let msg = r.status + ' ' + r.statusText;
    try {
      const o = await r.json();
      if (o && o.error && typeof o.error.message === 'string') msg = o.error.message;
    } catch (e) { /* not JSON */ }
    const err = new Error(msg);
    err.status = r.status;
    return err;
  }

  async function api(path, opts) {
    const o = Object.assign({ cache: 'no-store', credentials: 'omit' }, opts || {});
    o.headers = headers(o.headers);
    const r = await fetch(path, o);
    if (r.status === 401) needToken();
    if (!r.ok) throw await apiError(r);
    return r.json();
  }

  function setStatus(text, ok) {
    const s = $('status');
    s.textContent = text;
    s.className = ok ? 'ok' : '';
  }

  function needToken() {
    setStatus(token ? 'the token was refused: enter the one onebitd uses (STATE/token)'
                    : 'enter the API token (onebitd\'s STATE/token, or open /ui/#token=...)');
    $('token-input').focus();
  }

  // ---- formatting ---------------------------------------------------------------------------

  const num = (v) => (v === undefined || v === null || v === '' ? 0 : Number(v));

  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(n < 10 ? 2 : 1) : String(n)) + ' ' + units[i];
  }

  function fmtTime(ms) {
    ms = num(ms);
    if (!ms) return '';
    const d = new Date(ms);
    return d.toLocaleString(undefined, { hour12: false });
  }

  function fmtLoss(v) {
    return typeof v === 'number' && isFinite(v) ? v.toPrecision(4) : '';
  }

  const stateName = (s) => String(s || '').replace(/^JOB_STATE_/, '');

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function row(cells) {
    const tr = document.createElement('tr');
    for (const c of cells) tr.appendChild(c instanceof Node ? wrapTd(c) : el('td', c));
    return tr;
  }

  function wrapTd(node) {
    const td = document.createElement('td');
    td.appendChild(node);
    return td;
  }

  // ---- the job list -------------------------------------------------------------------------

  // Every job (up to MAX_PAGES pages of 1000), newest first; the newest SHOW_JOBS are shown.
  const MAX_PAGES = 5, SHOW_JOBS = 200;
  async function refreshJobs() {
    let jobs = [];
    try {
      let pageToken = '';
      for (let i = 0; i < MAX_PAGES; i++) {
        const o = await api('/v1/jobs?pageSize=1000&pageToken=' + encodeURIComponent(pageToken));
        if (Array.isArray(o.jobs)) jobs = jobs.concat(o.jobs);
        pageToken = typeof o.nextPageToken === 'string' ? o.nextPageToken : '';
        if (!pageToken) break;
      }
    } catch (e) {
      if (e.status !== 401) setStatus('jobs: ' + e.message);
      return;
    }
    setStatus('updated ' + new Date().toLocaleTimeString(undefined, { hour12: false }), true);
    jobs.sort((x, y) => num(y.createdUnixMs) - num(x.createdUnixMs) ||
                        String(y.id).localeCompare(String(x.id)));
    const hidden = Math.max(0, jobs.length - SHOW_JOBS);
    jobs = jobs.slice(0, SHOW_JOBS);
    const body = $('jobs').tBodies[0];
    body.replaceChildren();
    for (const j of jobs) {
      if (typeof j.id !== 'string' || !JOB_ID.test(j.id)) continue;
      const p = j.progress || {};
      const st = stateName(j.state);
      const bar = document.createElement('progress');
      bar.max = Math.max(1, num(p.totalSteps));
      bar.value = Math.min(bar.max, num(p.step));
      const prog = document.createElement('span');
      prog.append(bar, ' ' + num(p.step) + ' / ' + num(p.totalSteps));
      const tr = row([j.id, j.name || '', el('span', st, 'state ' + st), prog, fmtLoss(p.loss),
                      p.phase || '', num(j.worldSize), num(j.restarts), fmtTime(j.updatedUnixMs)]);
      tr.className = 'job-row' + (view && view.id === j.id ? ' selected' : '');
      tr.dataset.id = j.id;
      tr.dataset.state = st;
      tr.dataset.step = String(num(p.step));
      tr.addEventListener('click', () => { location.hash = 'job=' + j.id; });
      body.appendChild(tr);
    }
    $('jobs-empty').hidden = jobs.length > 0;
    $('jobs-more').textContent = hidden ? hidden + ' older jobs are not shown' : '';
    if (!view && jobs.length && !selectedFromHash()) select(jobs[0].id); // the newest job
  }

  // ---- one job ------------------------------------------------------------------------------

  function selectedFromHash() {
    const id = new URLSearchParams(location.hash.slice(1)).get('job');
    return id && JOB_ID.test(id) ? id : null;
  }

  function select(id) {
    if (view && view.id === id) return;
    if (view) view.abort.abort();
    view = {
      id, abort: new AbortController(), train: [], evals: [], freeze: 0, total: 0,
      phase: '', state: '', sseEvents: 0, lastSeq: 0, logOffset: -1, logText: '',
      decoder: new TextDecoder('utf-8'), drawPending: false,
    };
    $('job').hidden = false;
    $('job-title').textContent = id;
    $('log').textContent = '';
    for (const tr of $('jobs').tBodies[0].rows) tr.classList.toggle('selected', tr.dataset.id === id);
    draw();
    follow(view);
    refreshJob(view);
  }

  // One refresh at a time per job (two would read the same piece of log twice).
  async function refreshJob(v) {
    if (v !== view) return;
    if (v.busy) { v.again = true; return; }
    v.busy = true;
    try {
      do {
        v.again = false;
        await refreshJobOnce(v);
      } while (v.again && v === view);
    } finally {
      v.busy = false;
    }
  }

  async function refreshJobOnce(v) {
    try {
      const j = await api('/v1/jobs/' + encodeURIComponent(v.id), { signal: v.abort.signal });
      if (v !== view) return;
      showJob(v, j);
      const ck = await api('/v1/jobs/' + encodeURIComponent(v.id) + '/checkpoints',
                           { signal: v.abort.signal });
      if (v !== view) return;
      showCheckpoints(Array.isArray(ck.checkpoints) ? ck.checkpoints : []);
      await refreshLog(v);
    } catch (e) {
      if (v.abort.signal.aborted) return;
      if (e.status !== 401) setStatus(v.id + ': ' + e.message);
    }
  }

  function showJob(v, j) {
    const p = j.progress || {};
    const st = stateName(j.state);
    v.state = st;
    v.total = num(p.totalSteps);
    if (num(p.freezeStep) > 0) v.freeze = num(p.freezeStep);
    if (p.phase) v.phase = p.phase;
    const badge = $('job-state');
    badge.textContent = st;
    badge.className = 'state ' + st;
    $('job').dataset.state = st;
    $('job-title').textContent = v.id + (j.name ? ' \u2014 ' + j.name : '');
    $('job-message').textContent = j.message || '';
    $('job-cancel').hidden = FINAL.has(st);

    const stats = [
      ['step', num(p.step) + ' / ' + num(p.totalSteps)],
      ['phase', p.phase || '\u2013'],
      ['variance frozen at', !num(p.freezeStep) ? (FINAL.has(st) ? 'never' : 'not yet')
        : 'step ' + num(p.freezeStep) +
          (num(p.totalSteps) && num(p.freezeStep) >= num(p.totalSteps) ? ' (the last: no step compressed)' : '')],
      ['train loss', num(p.step) ? fmtLoss(p.loss) || '\u2013' : '\u2013'],
      ['eval loss', num(p.evalStep) ? fmtLoss(p.evalLoss) + ' (step ' + num(p.evalStep) + ')' : '\u2013'],
      ['eval accuracy', num(p.evalStep) && p.evalAccuracy ? (100 * p.evalAccuracy).toFixed(2) + ' %' : '\u2013'],
      ['samples/s', p.samplesPerS ? Number(p.samplesPerS).toFixed(0) : '\u2013'],
      ['learning rate', p.lr ? Number(p.lr).toExponential(2) : '\u2013'],
      ['ranks', num(j.worldSize)],
      ['restarts', num(j.restarts) + ' of ' + num(j.maxRestarts)],
    ];
    if (p.warmStart) stats.push(['warm start', p.warmStart]);
    if (p.phase === 'compression') {
      // Compression health at the last logged step: error-feedback norms over the momentum norm.
      stats.push(['error / momentum norm',
                  'worker ' + Number(p.workerErrorRatio || 0).toPrecision(3) +
                  ', server ' + Number(p.serverErrorRatio || 0).toPrecision(3)]);
      stats.push(['momentum exactly 0', (100 * Number(p.zeroMomentumFraction || 0)).toFixed(2) + ' %']);
    }
    if (num(p.rewarms) > 0) stats.push(['rewarms', String(num(p.rewarms))]);
    const dl = $('job-stats');
    dl.replaceChildren();
    for (const [k, val] of stats) {
      const d = document.createElement('div');
      d.append(el('dt', k), el('dd', val));
      dl.appendChild(d);
    }

    const sent = num(p.bytesSent), full = num(p.bytesUncompressed);
    const top = Math.max(sent, full, 1);
    $('bytes-sent').textContent = fmtBytes(sent);
    $('bytes-fp32').textContent = fmtBytes(full);
    $('bytes-sent-bar').style.width = (100 * sent / top).toFixed(2) + '%';
    $('bytes-fp32-bar').style.width = (100 * full / top).toFixed(2) + '%';
    let ratio = FINAL.has(st) ? 'nothing sent: no step ran' : 'no steps reported yet';
    if (sent > 0 && full > 0 && full / sent >= 1.05) {
      ratio = (full / sent).toFixed(1) + '\u00d7 less than an fp32 ring allreduce of the same steps (' +
              (100 * sent / full).toFixed(1) + ' %)';
    } else if (sent > 0 && full > 0) {
      ratio = 'as much as an fp32 ring allreduce of the same steps: the warmup sends fp32';
    }
    $('bytes-ratio').textContent = ratio;

    const body = $('attempts').tBodies[0];
    body.replaceChildren();
    for (const a of Array.isArray(j.attempts) ? j.attempts : []) {
      const running = !num(a.endedUnixMs);
      body.appendChild(row([num(a.number), fmtTime(a.startedUnixMs),
                            running ? 'running' : fmtTime(a.endedUnixMs), num(a.startStep),
                            running ? '' : num(a.exitCode),
                            (a.exitReason || '') + (a.externalId ? ' [' + a.externalId + ']' : '')]));
    }
    draw();
  }

  function showCheckpoints(list) {
    const body = $('checkpoints').tBodies[0];
    body.replaceChildren();
    for (const c of list) {
      body.appendChild(row([num(c.step), fmtTime(c.timeUnixMs), c.phase || '',
                            num(c.freezeStep) || '', num(c.worldSize) || '',
                            c.problem ? c.path + ' (' + c.problem + ')' : c.path]));
    }
    $('checkpoints-empty').hidden = list.length > 0;
  }

  // The end of the workers' log: from 32 KiB before its end at first, then what was added.
  async function refreshLog(v) {
    const base = '/v1/jobs/' + encodeURIComponent(v.id) + '/logs';
    if (v.logOffset < 0) {
      const o = await api(base + '?offset=0&maxBytes=1', { signal: v.abort.signal });
      v.logOffset = Math.max(0, num(o.size) - 32768);
      v.logMidLine = v.logOffset > 0; // the first line read is a piece of one: dropped
    }
    const o = await api(base + '?offset=' + v.logOffset + '&maxBytes=262144',
                        { signal: v.abort.signal });
    if (v !== view) return;
    const next = num(o.nextOffset), size = num(o.size);
    if (size - next > (1 << 20)) { // far behind a fast writer: on to the end
      v.logOffset = size - 32768;
      v.logMidLine = true;
      v.logText = '';
      v.decoder = new TextDecoder('utf-8');
      return;
    }
    if (next === v.logOffset || typeof o.data !== 'string') return;
    const bin = atob(o.data);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    let text = v.logText + v.decoder.decode(bytes, { stream: true });
    if (v.logMidLine && text.includes('\n')) {
      text = text.slice(text.indexOf('\n') + 1);
      v.logMidLine = false;
    }
    if (text.length > LOG_KEEP) text = text.slice(text.indexOf('\n', text.length - LOG_KEEP) + 1);
    v.logText = text;
    v.logOffset = next;
    const pre = $('log');
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = text;
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  // ---- the event stream ---------------------------------------------------------------------

  // Reads GET /v1/jobs/{id}/events (server-sent events) with fetch(), resuming after the last
  // event seen when the connection drops, until the job's final state.
  async function follow(v) {
    let final = false;
    while (!final && v === view && !v.abort.signal.aborted) {
      try {
        const r = await fetch('/v1/jobs/' + encodeURIComponent(v.id) + '/events?afterSeq=' + v.lastSeq,
                              { headers: headers(), cache: 'no-store', credentials: 'omit',
                                signal: v.abort.signal });
        if (r.status === 401) needToken();
        if (!r.ok) throw await apiError(r);
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '', data = [], kind = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let at = 0, nl;
          while ((nl = buf.indexOf('\n', at)) >= 0) {
            let line = buf.slice(at, nl);
            at = nl + 1;
            if (line.endsWith('\r')) line = line.slice(0, -1);
            if (line === '') {
              if (data.length && onEvent(v, kind, data.join('\n'))) final = true;
              data = []; kind = '';
              continue;
            }
            if (line[0] === ':') continue; // a comment: keepalive
            const c = line.indexOf(':');
            const field = c < 0 ? line : line.slice(0, c);
            let val = c < 0 ? '' : line.slice(c + 1);
            if (val[0] === ' ') val = val.slice(1);
            if (field === 'data' && data.push(val) > 1024) throw new Error('event stream: an event of over 1024 lines');
            if (field === 'event') kind = val;
          }
          buf = buf.slice(at); // what is left: the start of a line
          if (buf.length > (4 << 20)) throw new Error('event stream: a line over 4 MiB');
        }
        // The server ends the stream after the job's final state: one more look settles it.
        if (!final) await sleep(1000);
      } catch (e) {
        if (v.abort.signal.aborted) return;
        if (e.status !== 401) setStatus(v.id + ': events: ' + e.message);
        if (e.status === 404) return;
        await sleep(POLL_MS);
      }
    }
  }

  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

  // One event; returns true when it is the job's final state.
  function onEvent(v, kind, text) {
    if (v !== view) return true;
    let e;
    try { e = JSON.parse(text); } catch (err) { return false; }
    if (!e || typeof e !== 'object') return false;
    const seq = num(e.seq);
    if (seq <= v.lastSeq) return false; // seen before a reconnect
    v.lastSeq = seq;
    v.sseEvents++;
    $('job').dataset.sseEvents = String(v.sseEvents);
    const p = e.progress || {};
    if (num(p.totalSteps)) v.total = num(p.totalSteps);
    if (num(p.freezeStep) > 0) v.freeze = num(p.freezeStep);
    if (p.phase) v.phase = p.phase;
    const step = num(p.step);
    if (kind === 'step' && step > 0 && typeof p.loss === 'number' && isFinite(p.loss)) {
      // A resumed attempt repeats the steps after its checkpoint: the curve follows the run
      // that went on.
      while (v.train.length && v.train[v.train.length - 1][0] >= step) v.train.pop();
      v.train.push([step, p.loss]);
    } else if (kind === 'eval' && num(p.evalStep) > 0 && typeof p.evalLoss === 'number' &&
               isFinite(p.evalLoss)) {
      const es = num(p.evalStep);
      while (v.evals.length && v.evals[v.evals.length - 1][0] >= es) v.evals.pop();
      v.evals.push([es, p.evalLoss]);
    } else if (kind === 'freeze' && !v.freeze) {
      v.freeze = step;
    }
    scheduleDraw();
    if (kind === 'state' || kind === 'attempt' || kind === 'checkpoint' || kind === 'freeze') {
      refreshJob(v);
    }
    return kind === 'state' && FINAL.has(stateName(e.state));
  }

  // ---- the curve ----------------------------------------------------------------------------

  function scheduleDraw() {
    if (!view || view.drawPending) return;
    view.drawPending = true;
    requestAnimationFrame(() => { if (view) { view.drawPending = false; draw(); } });
  }

  // Round tick steps: 1, 2 or 5 times a power of ten.
  function ticks(lo, hi, n) {
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    const raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9 * span; t += step) out.push(t);
    return out;
  }

  function draw() {
    const canvas = $('curve');
    const v = view;
    const train = v ? v.train : [], evals = v ? v.evals : [];
    canvas.dataset.trainPoints = String(train.length);
    canvas.dataset.evalPoints = String(evals.length);
    canvas.dataset.lastStep = String(train.length ? train[train.length - 1][0] : 0);
    canvas.dataset.freezeStep = String(v ? v.freeze : 0);
    $('curve-summary').textContent = v
      ? train.length + ' train points, ' + evals.length + ' eval points' +
        (train.length ? ', last step ' + train[train.length - 1][0] : '') +
        (v.freeze ? ', variance frozen at step ' + v.freeze : '')
      : '';

    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth || 960, H = canvas.clientHeight || 340;
    if (canvas.width !== Math.round(W * dpr)) canvas.width = Math.round(W * dpr);
    if (canvas.height !== Math.round(H * dpr)) canvas.height = Math.round(H * dpr);
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue(name).trim() || '#000';
    const L = 64, R = 16, T = 22, B = 34, pw = W - L - R, ph = H - T - B;
    g.font = '12px system-ui, sans-serif';
    if (!v || (!train.length && !evals.length)) {
      g.fillStyle = color('--muted');
      const ended = v && FINAL.has(v.state);
      g.fillText(!v ? '' : ended ? 'no steps: the job ended before its first step'
                                 : 'waiting for the first steps\u2026', L, T + ph / 2);
      return;
    }
    let lastStep = 0, ylo = Infinity, yhi = -Infinity;
    for (const p of train.concat(evals)) {
      lastStep = Math.max(lastStep, p[0]);
      ylo = Math.min(ylo, p[1]);
      yhi = Math.max(yhi, p[1]);
    }
    const xmax = Math.max(v.total, lastStep, 1);
    // Losses that fall by orders of magnitude are read on a log scale; others on a linear one.
    const logY = ylo > 0 && yhi / ylo > 20;
    let f = (y) => y, yTicks;
    if (logY) {
      f = Math.log10;
      ylo = Math.floor(f(ylo) * 4) / 4;
      yhi = Math.ceil(f(yhi) * 4) / 4;
      yTicks = [];
      for (let d = Math.floor(ylo); d <= yhi; d++) {
        for (const m of yhi - ylo > 4 ? [1] : [1, 2, 5]) {
          const t = d + Math.log10(m);
          if (t >= ylo && t <= yhi) yTicks.push(t);
        }
      }
    } else {
      if (yhi - ylo < 1e-12) { ylo -= 0.5; yhi += 0.5; }
      const pad = 0.05 * (yhi - ylo);
      ylo = Math.max(ylo >= 0 ? 0 : -Infinity, ylo - pad);
      yhi += pad;
      yTicks = ticks(ylo, yhi, 5);
    }
    canvas.dataset.scale = logY ? 'log' : 'linear';
    const X = (s) => L + (s / xmax) * pw;
    const Y = (y) => T + (1 - (f(y) - ylo) / (yhi - ylo)) * ph;
    const Yt = (t) => T + (1 - (t - ylo) / (yhi - ylo)) * ph; // a tick, already on the scale

    // The warmup phase (uncompressed Adam) shaded up to the freeze step, or up to the last step
    // while it lasts; then the freeze step as a line.
    const warmEnd = v.freeze || (v.phase === 'warmup' ? lastStep : 0);
    if (warmEnd > 0) {
      g.fillStyle = color('--warmup');
      g.globalAlpha = 0.55;
      g.fillRect(L, T, X(warmEnd) - L, ph);
      g.globalAlpha = 1;
      g.fillStyle = color('--fg');
      g.fillText('warmup', L + 4, T - 6);
    }
    if (v.freeze) {
      g.strokeStyle = color('--freeze');
      g.lineWidth = 2;
      g.setLineDash([6, 4]);
      g.beginPath();
      g.moveTo(X(v.freeze), T);
      g.lineTo(X(v.freeze), T + ph);
      g.stroke();
      g.setLineDash([]);
      g.fillStyle = color('--freeze');
      const label = 'freeze, step ' + v.freeze + ' \u2192 1-bit compression';
      const lx = Math.min(X(v.freeze) + 4, L + pw - g.measureText(label).width);
      g.fillText(label, Math.max(lx, L + 4), T + 14);
    }

    // Axes and grid.
    g.strokeStyle = '#d9dde4';
    g.fillStyle = color('--muted');
    g.lineWidth = 1;
    g.textAlign = 'right';
    for (const t of yTicks) {
      g.beginPath(); g.moveTo(L, Yt(t)); g.lineTo(L + pw, Yt(t)); g.stroke();
      const label = logY ? Number(Math.pow(10, t).toPrecision(2)).toString() : Number(t.toPrecision(4)).toString();
      g.fillText(label, L - 6, Yt(t) + 4);
    }
    g.save();
    g.translate(14, T + ph / 2);
    g.rotate(-Math.PI / 2);
    g.textAlign = 'center';
    g.fillText(logY ? 'loss (log scale)' : 'loss', 0, 0);
    g.restore();
    g.textAlign = 'center';
    for (const t of ticks(0, xmax, 8)) g.fillText(String(Math.round(t)), X(t), T + ph + 16);
    g.fillText('step', L + pw / 2, H - 2);
    g.textAlign = 'left';
    g.strokeStyle = '#9ca3af';
    g.strokeRect(L, T, pw, ph);

    // The curves.
    const line = (pts, c, w) => {
      if (!pts.length) return;
      g.strokeStyle = c; g.lineWidth = w;
      g.beginPath();
      pts.forEach((p, i) => (i ? g.lineTo(X(p[0]), Y(p[1])) : g.moveTo(X(p[0]), Y(p[1]))));
      g.stroke();
    };
    line(train, color('--train'), 1.5);
    line(evals, color('--eval'), 2);
    g.fillStyle = color('--eval');
    if (evals.length <= 40) for (const p of evals) { g.beginPath(); g.arc(X(p[0]), Y(p[1]), 3, 0, 2 * Math.PI); g.fill(); }
  }

  // ---- wiring -------------------------------------------------------------------------------

  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    if (params.has('token')) {
      token = params.get('token') || '';
      try { sessionStorage.setItem(TOKEN_KEY, token); } catch (e) { /* kept for this page only */ }
      params.delete('token');
      const rest = params.toString();
      // Out of the address bar and the history entry at once.
      history.replaceState(null, '', location.pathname + location.search + (rest ? '#' + rest : ''));
    }
    const id = selectedFromHash();
    if (id) select(id);
  }

  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token-input').value.trim();
    $('token-input').value = '';
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch (e) { /* kept for this page only */ }
    setStatus('token set', true);
    refreshJobs();
    if (view) { const id = view.id; view.abort.abort(); view = null; select(id); }
  });
  $('token-forget').addEventListener('click', () => {
    token = '';
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* nothing kept */ }
    setStatus('token forgotten', true);
  });
  $('job-cancel').addEventListener('click', async () => {
    if (!view || !confirm('Cancel ' + view.id + '? Its ranks checkpoint and stop.')) return;
    try {
      await api('/v1/jobs/' + encodeURIComponent(view.id) + ':cancel',
                { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
      refreshJob(view);
    } catch (e) { setStatus(view.id + ': cancel: ' + e.message); }
  });
  window.addEventListener('hashchange', readHash);
  window.addEventListener('resize', scheduleDraw);

  readHash();
  api('/v1/version').then((o) => { $('version').textContent = 'onebitd ' + (o.version || ''); })
    .catch(() => {});
  refreshJobs();
  setInterval(refreshJobs, POLL_MS);
  setInterval(() => { if (view && !FINAL.has(view.state)) refreshJob(view); }, POLL_MS);
})();
