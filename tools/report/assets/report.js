// The report page: draws the run's data (the JSON in #report-data) and
// writes what it drew into #self-check (charts and their points, the heat
// map's cells, events, schedule lanes, any error) for the browser test.
(function () {
  'use strict';
  const started = performance.now();
  const errors = [];
  window.addEventListener('error', (e) => errors.push(String(e.message || e)));
  const consoleError = console.error;
  console.error = function (...args) { errors.push(args.map(String).join(' ')); consoleError.apply(console, args); };
  const check = { charts: {}, heat: null, events: null, schedule: null, errors };

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  };
  const fmt = (v, digits) => (v === null || v === undefined || !isFinite(v) ? '–' :
    Math.abs(v) >= 1e5 ? Math.round(v).toLocaleString('en') : Number(v).toPrecision(digits || 4));

  let data;
  try {
    data = JSON.parse($('report-data').textContent);
  } catch (e) {
    errors.push('report data: ' + e.message);
    finish();
    return;
  }
  const stepRange = [Math.max(0, data.steps.first), Math.max(data.steps.first + 1, data.steps.last)];

  function header() {
    const run = data.run || {};
    const h = $('run-header');
    const cfg = run.config || {};
    h.append(el('h1', {}, 'Troupe run' + (cfg.path ? ': ' + cfg.path : '')));
    const dl = el('dl');
    const add = (k, v) => { dl.append(el('dt', {}, k), el('dd', {}, v)); };
    const lay = run.layout;
    const m = run.model;
    add('layout', lay ? `dp ${lay.dp} × pp ${lay.pp} × tp ${lay.tp}, ${lay.schedule}` +
        (lay.chunks > 1 ? ` (${lay.chunks} chunks)` : '') + `, ${lay.microbatches} microbatches of ${lay.batch}` : 'unknown (no run header)');
    add('device', run.device ? `${run.device}, ${run.precision}` : '–');
    add('model', m ? `${m.layers} layers, d=${m.dim}, ${m.heads} heads, ctx ${m.ctx}, vocab ${m.vocab}, ` +
        (m.parameters >= 1e9 ? `${(m.parameters / 1e9).toFixed(1)}B` : `${(m.parameters / 1e6).toFixed(2)}M`) + ' parameters' : '–');
    add('nodes', run.nodes !== undefined ? `${run.nodes} (${run.actors} stage actors)` : '–');
    add('version', run.version || '–');
    add('steps', `${data.steps.first} … ${data.steps.last}` + (run.steps ? ` of ${run.steps}` : ''));
    const end = data.outcome.end;
    add('started', run.started_at || '–');
    add('ended', end ? end.at : '–');
    add('outcome', data.outcome.status);
    const read = data.read;
    add('metrics lines', `${read.lines} read, ${read.skipped} skipped` +
        (read.skipped ? ' (' + read.skipped_examples.join('; ') + ')' : ''));
    h.append(dl);
    if (cfg.text !== undefined) {
      const d = el('details', {}, el('summary', {}, 'config' + (cfg.overrides && cfg.overrides.length ?
        ` (with ${cfg.overrides.length} override${cfg.overrides.length > 1 ? 's' : ''})` : '')));
      d.append(el('pre', {}, cfg.text + (cfg.overrides && cfg.overrides.length ?
        '\n# overrides (--set, --fault), applied in order:\n' + cfg.overrides.map((o) => '#   ' + o).join('\n') : '')));
      h.append(d);
    }
  }

  function outcome() {
    const o = data.outcome;
    const box = el('div', { class: 'outcome ' + (o.status === 'finished' ? 'finished' : o.status === 'failed' ? 'failed' : 'cut') });
    let title = 'Finished';
    if (o.status === 'finished') title += ` all ${o.end.steps} steps, final loss ${fmt(o.end.loss)}`;
    if (o.status === 'failed') title = 'Failed' + (o.exit_code !== undefined ? ` (exit code ${o.exit_code})` : '');
    if (o.status === 'cut short') title = 'Cut short';
    box.append(title);
    const lines = [];
    if (o.verdict) lines.push(`verdict ${o.verdict.what}: node ${o.verdict.node}` +
      (o.verdict.actor >= 0 ? `, stage actor ${o.verdict.actor}` : '') + ` — ${o.verdict.evidence}` +
      ` (at step ${o.verdict.step})`);
    if (o.error) lines.push(o.error);
    if (o.end && o.end.checkpoint_persisted) lines.push(`last checkpoint (step ${o.end.checkpoint_persisted.step}) persisted in ${fmt(o.end.checkpoint_persisted.s, 3)} s`);
    if (lines.length) box.append(el('div', { class: 'detail' }, lines.join('\n')));
    $('outcome').append(box);
    check.outcome = { status: o.status, verdict: o.verdict ? o.verdict.what : null, skipped_lines: data.read.skipped };
  }

  // A chart of several series on the step axis; binned series carry their min and max (RP-3).
  function chart(id, series) {
    const div = $(id);
    const present = series.filter((s) => data.series[s.key] && data.series[s.key].x.length);
    const counts = {};
    for (const s of series) counts[s.label] = 0;
    if (!present.length) {
      div.classList.add('note');
      div.style.height = 'auto';
      div.textContent = 'not in these metrics';
      check.charts[id] = { series: counts, drawn: false };
      return;
    }
    const bars = present.some((s) => data.series[s.key].binned);
    const xs = new Set();
    for (const s of present) for (const x of data.series[s.key].x) xs.add(x);
    const order = Array.from(xs).sort((a, b) => a - b);
    const row = new Map(order.map((x, i) => [x, i]));
    const rows = order.map((x) => [x].concat(present.map(() => null)));
    present.forEach((s, j) => {
      const d = data.series[s.key];
      for (let i = 0; i < d.x.length; ++i) {
        const v = d.y[i] * (s.scale || 1);
        rows[row.get(d.x[i])][j + 1] = bars ? (d.binned ? [d.lo[i] * (s.scale || 1), v, d.hi[i] * (s.scale || 1)] : [v, v, v]) : v;
        counts[s.label] += 1;
      }
    });
    const opts = {
      labels: ['step'].concat(present.map((s) => s.label)),
      customBars: bars,
      connectSeparatedPoints: true,
      legend: 'always',
      labelsSeparateLines: false,
      xlabel: 'step',
      colors: present.map((s) => s.color),
      series: {},
      axes: { y: { axisLabelWidth: 66 } },
    };
    for (const s of present) if (s.points) opts.series[s.label] = { drawPoints: true, pointSize: 3, strokeWidth: 1 };
    new Dygraph(div, rows, opts);  // eslint-disable-line no-new
    check.charts[id] = { series: counts, drawn: true, binned: bars };
  }

  function charts() {
    const c = (key, label, color, extra) => Object.assign({ key, label, color }, extra || {});
    chart('chart-loss', [c('loss', 'loss', '#4e79a7'), c('val_loss', 'val loss', '#e15759', { points: true })]);
    chart('chart-lr', [c('lr', 'lr', '#59a14f')]);
    chart('chart-grad_norm', [c('grad_norm', 'grad norm', '#9c755f')]);
    chart('chart-tokens_per_s', [c('tokens_per_s', 'tokens/s', '#4e79a7')]);
    chart('chart-step_ms', [c('step_ms', 'step ms', '#f28e2b')]);
    chart('chart-mfu', [c('mfu', 'MFU', '#76b7b2')]);
    chart('chart-bubble', [c('bubble', 'measured', '#e15759'), c('bubble_predicted', 'simulator', '#4e79a7')]);
    chart('chart-blocked', [c('blocked_beyond_prediction_ms', 'blocked beyond prediction ms', '#b07aa1')]);
    chart('chart-buckets', [c('grad_buckets_hidden', 'hidden', '#59a14f'), c('grad_buckets', 'buckets', '#bab0ac')]);
    const stats = $('speed-stats');
    const show = (key, label, digits, scale) => {
      const s = data.stats[key];
      if (!s) return;
      const k = scale || 1;
      stats.append(el('span', {}, `${label}: min ${fmt(s.min * k, digits)} / median ${fmt(s.median * k, digits)} / max ${fmt(s.max * k, digits)}`));
    };
    show('tokens_per_s', 'tokens/s', 4);
    show('step_ms', 'step ms', 4);
    show('mfu', 'MFU', 3);
    if (Object.keys(data.stats).length) stats.append(el('span', { class: 'note' }, `(over ${data.stats.step_ms ? data.stats.step_ms.steps : 0} steps, the first left out)`));
  }

  // A colour for t in [0, 1]: dark blue (fast) through teal and green to yellow (slow).
  const ramp = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(t) {
    const x = Math.min(0.9999, Math.max(0, t)) * (ramp.length - 1);
    const i = Math.floor(x), f = x - i;
    return ramp[i].map((c, k) => Math.round(c + f * (ramp[i + 1][k] - c)));
  }

  function canvasSized(canvas, height) {
    const width = Math.max(320, canvas.parentElement.clientWidth || 960);
    const dpr = window.devicePixelRatio || 1;
    canvas.style.height = height + 'px';
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    return { g, width, height };
  }

  function heat() {
    const hm = data.heat;
    if (!hm) {
      $('heat-note').textContent = 'No per-actor compute times in these metrics (written by Troupe runs from this version on).';
      $('heat-canvas').remove();
      check.heat = { cells: 0, painted: 0, stragglers_marked: 0 };
      return;
    }
    const bytes = Uint8Array.from(atob(hm.cells), (ch) => ch.charCodeAt(0));
    const height = Math.min(560, Math.max(140, hm.rows * 6 + 40));
    const { g, width } = canvasSized($('heat-canvas'), height);
    const left = 118, top = 6, right = width - 10, bottom = height - 26;
    const image = new ImageData(hm.columns, hm.rows);
    let painted = 0;
    for (let i = 0; i < bytes.length; ++i) {
      const b = bytes[i];
      const [r, gg, bb] = b ? colour((b - 1) / 254) : [230, 232, 236];
      image.data[4 * i] = r; image.data[4 * i + 1] = gg; image.data[4 * i + 2] = bb; image.data[4 * i + 3] = 255;
      if (b) ++painted;
    }
    const off = document.createElement('canvas');
    off.width = hm.columns; off.height = hm.rows;
    off.getContext('2d').putImageData(image, 0, 0);
    g.imageSmoothingEnabled = false;
    g.drawImage(off, left, top, right - left, bottom - top);
    const cw = (right - left) / hm.columns, rh = (bottom - top) / hm.rows;
    // Stragglers: a red frame around the cell the detector named.
    const marked = new Set();
    g.strokeStyle = '#ff2d2d';
    g.lineWidth = 1.5;
    for (const [step, rank] of data.stragglers) {
      const col = Math.floor((step - hm.first_step) / hm.steps_per_column), row = Math.floor(rank / hm.actors_per_row);
      const key = row * hm.columns + col;
      if (col < 0 || col >= hm.columns || row < 0 || row >= hm.rows || marked.has(key)) continue;
      marked.add(key);
      g.strokeRect(left + col * cw, top + row * rh, Math.max(cw, 2), Math.max(rh, 2));
    }
    g.fillStyle = '#1d2330';
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    const labelEvery = Math.ceil(14 / rh);
    for (let r = 0; r < hm.rows; r += labelEvery) {
      const a0 = Math.round(r * hm.actors_per_row), a1 = Math.round((r + 1) * hm.actors_per_row) - 1;
      g.fillText(a0 === a1 ? `actor ${a0}` : `actors ${a0}–${a1}`, 4, top + (r + 0.5) * rh);
    }
    g.textBaseline = 'top';
    for (let k = 0; k <= 5; ++k) {
      const x = left + (right - left) * k / 5;
      g.fillText(String(Math.round(hm.first_step + (hm.last_step + 1 - hm.first_step) * k / 5)), Math.min(x, right - 30), bottom + 6);
    }
    $('heat-note').textContent = `${hm.actors} stage actors (rows${hm.actors_per_row > 1 ? ', ' + fmt(hm.actors_per_row, 3) + ' actors each' : ''}) × ` +
      `steps ${hm.first_step}–${hm.last_step} (columns${hm.steps_per_column > 1 ? ', ' + fmt(hm.steps_per_column, 3) + ' steps each' : ''}); ` +
      'each cell the longest compute time in it; red frames: stragglers the detector named.';
    const legend = $('heat-legend');
    for (const t of [0, 0.25, 0.5, 0.75, 1]) {
      const [r, gg, bb] = colour(t);
      legend.append(el('span', {}, el('span', { class: 'swatch', style: `background: rgb(${r},${gg},${bb})` }),
        `${fmt(hm.low_ms + t * (hm.high_ms - hm.low_ms), 3)} ms`));
    }
    check.heat = { cells: hm.rows * hm.columns, painted, stragglers_marked: marked.size, rows: hm.rows, columns: hm.columns };
  }

  const kindColour = { verdict: '#d62728', recovery: '#2ca02c', checkpoint: '#1f77b4', checkpoint_failed: '#ff7f0e',
                       notice: '#bcbd22', straggler: '#9467bd' };

  function describe(e) {
    switch (e.kind) {
      case 'verdict':
        return `${e.what}: node ${e.node}${e.actor >= 0 ? ', stage actor ' + e.actor : ''} — ${e.evidence}`;
      case 'recovery': {
        const lost = (e.abort_ms || 0) + (e.rewire_ms || 0);
        return `${e.failed ? e.failed.kind + ' of node ' + e.failed.node : 'a failure'} → replaced on node ${e.replaced_on} ` +
          `(${e.replaced_by}) from ${e.source}${e.checkpoint ? ' ' + e.checkpoint : ''}, ${fmt(e.restored_mb, 3)} MB; ` +
          `every actor rolled back to step ${e.rollback_step} (generation ${e.generation}); time lost ${fmt(lost, 3)} ms ` +
          `(abort ${fmt(e.abort_ms, 3)}, rewire ${fmt(e.rewire_ms, 3)})`;
      }
      case 'checkpoint':
        return `step ${e.checkpoint_step} persisted: ${fmt(e.node_mb, 3)} MB per node in ${fmt(e.s, 3)} s` +
          (e.stall_ms !== undefined ? `; training stalled ${fmt(e.stall_ms, 3)} ms to snapshot` : '');
      case 'checkpoint_failed':
        return String(e.error);
      case 'notice':
        return `${e.what}: ` + Object.entries(e).filter(([k]) => !['kind', 'what', 'step'].includes(k))
          .map(([k, v]) => `${k} ${typeof v === 'number' ? fmt(v, 4) : JSON.stringify(v)}`).join(', ');
      default:
        return JSON.stringify(e);
    }
  }

  function events() {
    const rows = data.events;  // a straggler's steps in a row are one event already (step ... last)
    const { g, width, height } = canvasSized($('events-strip'), 46);
    const left = 84, right = width - 10;
    const x = (s) => left + (right - left) * (s - stepRange[0]) / Math.max(1, stepRange[1] - stepRange[0]);
    g.fillStyle = '#eceff3';
    g.fillRect(left, 18, right - left, 10);
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = '#5b6476';
    g.fillText('events', 4, 27);
    let markers = 0;
    for (const r of rows) {
      g.fillStyle = kindColour[r.kind] || '#333';
      const x0 = x(r.step), x1 = r.last !== undefined ? x(r.last + 1) : x0 + 3;
      g.fillRect(x0, r.kind === 'straggler' ? 30 : 8, Math.max(3, x1 - x0), r.kind === 'straggler' ? 8 : 30);
      ++markers;
    }
    const table = el('table', {}, el('tr', {}, el('th', {}, 'step'), el('th', {}, 'event'), el('th', {}, 'what happened')));
    const shown = rows.slice(0, 300);
    for (const r of shown) {
      const what = r.kind === 'straggler'
        ? `stage ${r.stage} replica ${r.replica} (stage actor ${r.rank}, node ${r.node}): up to ${fmt(r.worst_slowdown, 3)}× its normal compute, ` +
          `${fmt(100 * r.step_share, 3)}% of the step when first named`
        : describe(r);
      const td = el('td', { class: 'kind' }, r.kind.replace('_', ' '));
      td.style.color = kindColour[r.kind] || '#333';
      table.append(el('tr', {}, el('td', {}, r.last !== undefined && r.last !== r.step ? `${r.step}–${r.last}` : r.step), td, el('td', {}, what)));
    }
    const box = $('events-table');
    if (!rows.length) box.append(el('p', { class: 'note' }, 'No verdicts, recoveries, checkpoints, notices or stragglers in this run.'));
    else box.append(table);
    if (rows.length > shown.length) box.append(el('p', { class: 'note' }, `… and ${rows.length - shown.length} more`));
    if (data.events_total > data.events.length) box.append(el('p', { class: 'note' }, `(the first ${data.events.length} of ${data.events_total} events are shown)`));
    const legend = el('div', { class: 'legend' });
    for (const [k, c] of Object.entries(kindColour)) legend.append(el('span', {}, el('span', { class: 'swatch', style: `background:${c}` }), k.replace('_', ' ')));
    box.prepend(legend);
    check.events = { rows: rows.length, table_rows: shown.length, markers };
  }

  const spanColour = { forward: '#4e79a7', backward: '#59a14f', blocked: '#e15759', send: '#f28e2b', recv: '#ffbe7d',
                       reduce_scatter: '#b07aa1', all_gather: '#76b7b2', grad_sync: '#9c755f', optimizer: '#bab0ac' };

  function schedule() {
    const s = data.schedule;
    const note = $('schedule-note');
    if (!s) {
      note.textContent = data.schedule_note || 'No trace.';
      $('schedule-canvas').remove();
      check.schedule = { drawn: false, note: note.textContent };
      return;
    }
    const lanes = [];
    for (const a of s.measured) {
      lanes.push({ name: a.name, spans: a.spans.filter((p) => p[4] === 0) });
      lanes.push({ name: '  transfers', spans: a.spans.filter((p) => p[4] !== 0) });
    }
    const simulated = s.simulated || [];
    for (const a of simulated) lanes.push({ name: a.name, spans: a.spans, simulated: true });
    let end = 0;
    for (const l of lanes) for (const p of l.spans) end = Math.max(end, p[3]);
    const laneH = 18, gap = simulated.length ? 14 : 0;
    const height = lanes.length * laneH + gap + 34;
    const { g, width } = canvasSized($('schedule-canvas'), height);
    const left = 170, right = width - 10;
    const x = (t) => left + (right - left) * t / Math.max(end, 1e-9);
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    let y = 4, spans = 0;
    lanes.forEach((l, i) => {
      if (l.simulated && (i === 0 || !lanes[i - 1].simulated)) y += gap;
      g.fillStyle = l.simulated ? '#5b6476' : '#1d2330';
      g.fillText(l.name, 4, y + laneH / 2);
      for (const [cat, label, t0, t1] of l.spans) {
        g.fillStyle = spanColour[cat] || '#999';
        const x0 = x(t0), w = Math.max(1, x(t1) - x0);
        g.fillRect(x0, y + 2, w, laneH - 4);
        if (w > 22 && (cat === 'forward' || cat === 'backward')) {
          g.fillStyle = '#fff';
          g.fillText(label, x0 + 3, y + laneH / 2);
        }
        ++spans;
      }
      y += laneH;
    });
    g.fillStyle = '#5b6476';
    g.textBaseline = 'top';
    for (let k = 0; k <= 5; ++k) g.fillText(`${fmt(end * k / 5, 3)} ms`, Math.min(x(end * k / 5), right - 50), y + 8);
    note.textContent = `Step ${s.step} as each stage actor ran it (the median step of the trace), and below it the ` +
      (simulated.length ? `simulator's picture of the same step from replica 0's measured compute times (${fmt(s.simulated_step_ms, 4)} ms).` :
                          `simulator's picture: ${s.simulated_note}.`);
    const legend = $('schedule-legend');
    for (const [k, c] of Object.entries(spanColour)) legend.append(el('span', {}, el('span', { class: 'swatch', style: `background:${c}` }), k.replace('_', ' ')));
    check.schedule = { drawn: true, step: s.step, measured_lanes: s.measured.length, simulated_lanes: simulated.length, spans };
  }

  function logLines() {
    const box = $('log-lines');
    if (!data.log) { $('log').remove(); return; }
    box.append(el('p', { class: 'note' }, `${data.log.matched} of ${data.log.lines} lines of ${data.log.path}` +
      (data.log.matched > data.log.kept.length ? ` (the first ${data.log.kept.length} shown)` : '')));
    box.append(el('pre', {}, data.log.kept.join('\n')));
  }

  function finish() {
    check.render_ms = performance.now() - started;  // this script
    check.page_ms = performance.now();  // since the page was asked for: parsing, the data, the library, drawing
    window.troupeReport = check;
    $('self-check').textContent = JSON.stringify(check);
  }

  for (const part of [header, outcome, charts, heat, events, schedule, logLines]) {
    try { part(); } catch (e) { errors.push(`${part.name}: ${e && e.stack ? e.stack : e}`); }
  }
  finish();
})();
