// The tree viewer: one question's tree from /api/tree, drawn with d3 as a collapsible graph.
// The layout is the viewer's own, so labels never overlap or leave the view: one row per shown
// leaf (a parent centred on its children), and each depth's column as wide as its widest label
// (measured with the page's font). Runs of single-child steps fold into one "⋯ n steps" node;
// deep levels fold until the drawing fits the view at a readable scale (MIN_SCALE). A circle
// folds or unfolds its node; a label opens the node in the side panel and zooms to its path.
(function () {
  'use strict';
  const VISIBLE = 400, ROW = 20, GAP = 30, TEXT_X = 9, MIN_SCALE = 0.8, LABEL_CHARS = 24, CHAIN_MIN = 3;
  const FONT = '11px system-ui, sans-serif';
  const el = document.getElementById('tree');
  if (!el) return;
  const started = performance.now();
  const run = el.dataset.run;
  const query = new URLSearchParams({run: run, strategy: el.dataset.strategy, question: el.dataset.question});
  const measure = document.createElement('canvas').getContext('2d');
  measure.font = FONT;

  function h(tag, attrs, ...children) {
    // DOM built from text nodes only: node text is model output and never parsed as HTML
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') node.className = v; else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  // numbers to 4 decimals; 64-bit integers arrive as strings and are shown as they are
  const fmt = v => (v === null || v === undefined) ? '—' : (typeof v === 'number' ? +v.toFixed(4) : String(v));
  const pretty = v => typeof v === 'string' ? v : JSON.stringify(v, null, 2);
  const cut = (text, n) => text.length > n ? text.slice(0, n) + '…' : text;

  // ---- the model: plain objects {id, i, kids, folded, open}; i < 0 for the synthetic question
  function nodesOf(cols) {
    const byId = new Map(), n = cols.node_id.length;
    for (let i = 0; i < n; i++) byId.set(cols.node_id[i], {id: cols.node_id[i], i: i, kids: [], folded: false, open: false});
    const roots = [];
    for (let i = 0; i < n; i++) {
      const parent = byId.get(cols.parent_id[i]), node = byId.get(cols.node_id[i]);
      if (parent) { node.parent = parent; parent.kids.push(node); } else roots.push(node);
    }
    if (roots.length === 1 && cols.parent_id[roots[0].i] === null && cols.kind[roots[0].i] === 'question') return roots[0];
    const root = {id: '(question)', i: -1, kids: roots, folded: false, open: false};  // plans, samples: one question above
    roots.forEach(r => { r.parent = root; });
    return root;
  }

  function chainBelow(node) {
    // the single children below ``node`` down to the first that has not exactly one child
    const seq = [];
    for (let cur = node; cur.kids.length === 1; cur = cur.kids[0]) seq.push(cur.kids[0]);
    return seq;
  }

  function shownTree(node, depth) {
    // what is drawn: {node, depth, kids}; a folded chain is a {chain: [...]} entry
    const entry = {node: node, depth: depth, kids: []};
    if (node.folded || !node.kids.length) return entry;
    const seq = node.open ? [] : chainBelow(node);
    if (seq.length >= CHAIN_MIN) {
      const hidden = seq.slice(0, -1), chain = {chain: hidden, owner: node, depth: depth + 1, kids: []};
      chain.kids.push(shownTree(seq[seq.length - 1], depth + 2));
      entry.kids.push(chain);
    } else entry.kids = node.kids.map(k => shownTree(k, depth + 1));
    return entry;
  }

  function flatten(entry, out) { out.push(entry); entry.kids.forEach(k => flatten(k, out)); return out; }

  // ---- labels and layout
  function labelOf(cols, entry, question) {
    if (entry.chain) {
      return '⋯ ' + entry.chain.length + ' steps';
    }
    const node = entry.node, i = node.i;
    let text;
    if (i < 0 || !node.parent) text = 'question · ' + cut(question || (i >= 0 ? cols.label[i] : ''), 36);
    else {
      const parts = [cols.kind[i]];
      if (cols.value[i] !== null) parts.push('v=' + fmt(cols.value[i]));
      if (cols.advantage[i] !== null) parts.push('A=' + fmt(cols.advantage[i]));
      if (cols.visits[i] !== null) parts.push('n=' + cols.visits[i]);
      const snippet = (cols.label[i] || '').replace(/<\/?[A-Za-z_]+>/g, ' ').replace(/\s+/g, ' ').trim();  // tags out: the words show
      text = parts.join(' ') + (snippet ? ' · ' + cut(snippet, LABEL_CHARS) : '');
    }
    return node.folded && node.kids.length ? text + ' [+' + countBelow(node) + ']' : text;
  }

  function countBelow(node) { return node.kids.reduce((n, k) => n + 1 + countBelow(k), 0); }

  function layout(top, cols, question) {
    const all = flatten(top, []);
    const widths = [];
    for (const e of all) {
      e.label = labelOf(cols, e, question);
      e.width = measure.measureText(e.label).width;
      widths[e.depth] = Math.max(widths[e.depth] || 0, e.width);
    }
    const xs = [0];
    for (let d = 1; d < widths.length; d++) xs[d] = xs[d - 1] + TEXT_X + (widths[d - 1] || 0) + GAP;
    let row = 0;
    (function place(e) {
      e.x = xs[e.depth];
      if (!e.kids.length) { e.y = row++ * ROW; return; }
      e.kids.forEach(place);
      e.y = (e.kids[0].y + e.kids[e.kids.length - 1].y) / 2;
    })(top);
    const right = Math.max(...all.map(e => e.x + TEXT_X + e.width));
    return {all: all, width: right + 8, height: Math.max(row - 1, 0) * ROW + ROW};
  }

  function fits(box, size) { return Math.min(1, (box.width - 40) / size.width, (box.height - 24) / size.height) >= MIN_SCALE; }

  function foldToFit(root, cols, question, box) {
    // first a node budget (a 10,000-node tree), then whole levels until the drawing fits
    const levels = [];
    (function walk(n, d) { (levels[d] = levels[d] || []).push(n); n.kids.forEach(k => walk(k, d + 1)); })(root, 0);
    let shown = 0, depth = 0;
    while (depth < levels.length && shown + levels[depth].length <= VISIBLE) shown += levels[depth++].length;
    const showTo = d => levels.forEach((level, k) => level.forEach(n => { n.folded = k >= d && n.kids.length > 0; }));
    for (let d = Math.max(depth - 1, 1); d > 1; d--) {
      showTo(d);
      if (fits(box, layout(shownTree(root, 0), cols, question))) return;
    }
    showTo(1);
  }

  // ---- drawing
  function nodeClass(cols, e) {
    if (e.chain) return 'node chain';
    const i = e.node.i;
    if (i < 0 || !e.node.parent) return 'node root';
    if (cols.is_format_error[i]) return 'node error';
    return cols.is_selected[i] ? 'node kept' : 'node pruned';
  }

  function draw(cols) {
    const question = el.dataset.questionText || '';
    const root = nodesOf(cols), box = () => el.getBoundingClientRect();
    foldToFit(root, cols, question, box());
    const svg = d3.select(el).append('svg').attr('width', '100%').attr('height', '100%');
    const g = svg.append('g');
    const links = g.append('g').attr('class', 'links'), nodes = g.append('g').attr('class', 'nodes');
    const zoom = d3.zoom().scaleExtent([0.05, 4]).on('zoom', e => g.attr('transform', e.transform));
    svg.call(zoom);
    const link = d3.linkHorizontal().x(d => d.x).y(d => d.y);
    let drawn = null, selected = null;

    function update(refit) {
      drawn = layout(shownTree(root, 0), cols, question);
      const pairs = drawn.all.flatMap(p => p.kids.map(k => ({source: p, target: k})));
      links.selectAll('path').data(pairs, d => keyOf(d.target)).join('path')
        .attr('d', d => link({source: {x: d.source.x + TEXT_X + d.source.width + 4, y: d.source.y}, target: d.target}));
      const join = nodes.selectAll('g.node').data(drawn.all, keyOf).join(enter => {
        const node = enter.append('g');
        node.append('title');
        node.append('circle').attr('r', 5).on('click', (ev, d) => { toggle(d); update(false); reveal(d); });
        node.append('text').attr('x', TEXT_X).attr('dy', '0.32em')
          .on('click', (ev, d) => { if (d.chain) { toggle(d); update(false); reveal(d); } else if (d.node.i >= 0) select(d.node); });
        return node;
      });
      join.attr('class', d => nodeClass(cols, d) + (d.node && d.node.folded && d.node.kids.length ? ' folded' : ''))
        .attr('data-node-id', d => d.chain ? null : d.node.id).attr('transform', d => `translate(${d.x},${d.y})`);
      join.select('text').text(d => d.label);
      join.select('title').text(d => d.chain ? chainTitle(d) : (d.node.i < 0 ? question : cols.label[d.node.i] || ''));
      markPath();
      el.dataset.shown = drawn.all.length;
      if (refit) fit(drawn.all);
    }
    function chainTitle(e) {
      return 'click to unfold ' + e.chain.length + ' steps: ' + e.chain.map(n => cols.kind[n.i]).join(' → ');
    }
    function keyOf(e) { return e.chain ? 'chain:' + e.owner.id : e.node.id; }
    function toggle(e) {
      if (e.chain) { e.owner.open = true; e.chain.forEach(n => { n.open = true; }); return; }
      if (e.node.kids.length) e.node.folded = !e.node.folded;
    }
    function select(node) {
      selected = node;
      for (let up = node.parent; up; up = up.parent) { up.folded = false; up.open = true; }  // unfold its path
      update(false);
      const path = drawn.all.filter(e => e.node && onPath(e.node));
      if (!inView(path)) fit(path);  // zoom to the path only when part of it is out of view
      showNode(node.id);
    }
    function reveal(toggled) {
      // what a click unfolded comes into view (from the clicked node on), as far as it fits
      const from = toggled.chain ? drawn.all.find(e => e.node === toggled.owner) : drawn.all.find(e => e.node === toggled.node);
      if (!from) return;
      const shown = flatten(from, []);
      if (!inView(shown)) fit(shown);
    }
    function onPath(n) { for (let cur = selected; cur; cur = cur.parent) if (cur === n) return true; return false; }
    function markPath() {
      if (!selected) return;
      nodes.selectAll('g.node').classed('on-path', d => !d.chain && onPath(d.node));
      links.selectAll('path').classed('on-path', d => !d.target.chain && onPath(d.target.node));
    }
    function fit(entries) {
      // the entries fill the view: at most scale 1, at least MIN_SCALE (then centred on them)
      const b = box(), pad = 12;
      const left = Math.min(...entries.map(e => e.x)) - 8, right = Math.max(...entries.map(e => e.x + TEXT_X + e.width)) + 8;
      const top = Math.min(...entries.map(e => e.y)) - ROW / 2, bottom = Math.max(...entries.map(e => e.y)) + ROW / 2;
      const k = Math.max(MIN_SCALE, Math.min(1, (b.width - 2 * pad) / (right - left), (b.height - 2 * pad) / (bottom - top)));
      const ty = b.height / 2 - (top + bottom) / 2 * k;
      svg.call(zoom.transform, d3.zoomIdentity.translate(pad - left * k, ty).scale(k));
    }
    function inView(entries) {
      const t = d3.zoomTransform(svg.node()), b = box();
      return entries.every(e => t.applyX(e.x) >= 0 && t.applyX(e.x + TEXT_X + e.width) <= b.width
                                && t.applyY(e.y) >= 0 && t.applyY(e.y) <= b.height);
    }
    document.getElementById('expand-all').addEventListener('click', () => {
      (function open(n) { n.folded = false; n.open = true; n.kids.forEach(open); })(root);
      update(true);
    });
    const fitButton = document.getElementById('fit-view');
    if (fitButton) fitButton.addEventListener('click', () => fit(drawn.all));
    update(true);
    el.dataset.nodes = cols.node_id.length;
    document.body.dataset.treeReadyMs = String(Math.round(performance.now() - started));
  }

  // ---- the node panel
  function section(title, ...children) { return h('section', {}, h('h3', {}, title), ...children); }
  function fieldTable(entries) {
    return h('dl', {class: 'fields'}, entries.map(([k, v, id]) => [h('dt', {}, k), h('dd', id ? {id: id} : {}, fmt(v))]));
  }
  function messages(list) {
    return h('div', {class: 'messages'}, (list || []).map(m => h('div', {class: 'msg ' + m.role}, h('b', {}, m.role), h('pre', {}, m.content))));
  }
  function rewardTable(rows) {
    return h('table', {class: 'grid', id: 'detail-rewards'},
      h('thead', {}, h('tr', {}, ['reward', 'raw', 'scale', 'scaled', 'note'].map(t => h('th', {}, t)))),
      h('tbody', {}, rows.map(r => h('tr', {'data-reward': r.name}, h('td', {}, r.name), h('td', {}, fmt(r.value)),
        h('td', {}, fmt(r.scale)), h('td', {}, fmt(r.scaled)), h('td', {}, r.is_format_error ? 'format error: ' + (r.error || '') : (r.error || ''))))));
  }
  function callSection(c) {
    return h('details', {class: 'call'}, h('summary', {}, 'LLM call (' + c.role + ', ' + c.completion_tokens + ' tokens, ' + c.finish_reason + ')'),
      h('dl', {class: 'fields'}, [['model', c.model_fingerprint], ['seed', c.seed, 'detail-seed'], ['sample', c.sample_index],
        ['prompt tokens', c.prompt_tokens], ['latency s', c.latency_s]].map(([k, v, id]) => [h('dt', {}, k), h('dd', id ? {id: id} : {}, fmt(v))])),
      h('h4', {}, 'sampling'), h('pre', {}, pretty(c.sampling)), h('h4', {}, 'prompt'), messages(c.messages),
      h('h4', {}, 'completion'), h('pre', {}, c.text));
  }

  function showNode(nodeId) {
    const panel = document.getElementById('details');
    panel.replaceChildren(h('p', {class: 'empty'}, 'loading ' + nodeId + ' …'));
    fetch('/api/node?' + new URLSearchParams({run: run, node: nodeId})).then(r => r.json()).then(d => {
      const n = d.node, status = d.status;
      const parts = [
        h('h2', {}, n.kind, ' ', h('span', {class: 'badge ' + status.replace(' ', '-'), id: 'detail-status'}, status)),
        h('p', {class: 'fate', id: 'detail-fate'}, d.fate),
        h('p', {class: 'meta'}, n.node_id, ' · depth ', n.depth, ' · ', n.strategy),
        fieldTable([['value', n.value, 'detail-value'], ['advantage', n.advantage, 'detail-advantage'],
                    ['visits', n.visits, 'detail-visits'], ['reward', n.reward], ['leaf', n.is_leaf]]),
      ];
      if (d.rewards.length) parts.push(section('rewards', rewardTable(d.rewards)));
      parts.push(section('text', h('pre', {}, n.text || '')));
      if (n.parsed) parts.push(section('parsed fields', h('pre', {}, pretty(n.parsed))));
      if ((n.passage_ids || []).length) {
        const box = h('div', {});
        box.append(h('button', {type: 'button', onclick: () => loadPassages(n.passage_ids, box)},
                     'show the ' + n.passage_ids.length + ' retrieved passage(s)'));
        parts.push(section('retrieved passages', box));
      }
      if (d.llm_call) parts.push(callSection(d.llm_call));
      if (d.rollouts.length) parts.push(section('rollouts', d.rollouts.map(r => h('p', {}, 'answer ', h('b', {}, r.final_answer || '—'), ' · EM ', fmt(r.em), ' · F1 ', fmt(r.f1)))));
      parts.push(section('preference pairs from this node (' + d.pairs.length + ')', d.pairs.map(p =>
        h('details', {class: 'pair'}, h('summary', {}, (p.chosen_node_id === n.node_id ? 'chosen' : 'rejected') + ' · ' + p.decision + ' · gap ' + fmt(p.gap)),
          h('h4', {}, 'chosen (' + fmt(p.chosen_value) + ')'), messages(p.chosen), h('h4', {}, 'rejected (' + fmt(p.rejected_value) + ')'), messages(p.rejected)))));
      parts.push(section('SFT examples through this node (' + d.sft_examples.length + ')', d.sft_examples.map(s =>
        h('details', {}, h('summary', {}, s.example_id), messages(s.messages)))));
      panel.replaceChildren(...parts);
      panel.dataset.nodeId = n.node_id;
    });
  }

  function loadPassages(ids, box) {
    const q = new URLSearchParams(); ids.forEach(id => q.append('ids', id));
    fetch('/api/passages?' + q).then(r => r.json()).then(rows => {
      box.replaceChildren(...rows.map(p => h('div', {class: 'passage'}, h('b', {}, p.title || p.passage_id), h('p', {}, p.text))));
    });
  }

  fetch('/api/tree?' + query).then(r => {
    if (!r.ok) throw new Error('no tree');
    return r.json();
  }).then(draw).catch(e => { el.replaceChildren(h('p', {class: 'error'}, String(e))); });
})();
