// The tree viewer: one question's tree from /api/tree, drawn with d3 as a collapsible graph.
// Big trees open folded: levels are shown from the root down while they fit VISIBLE nodes, so a
// 10,000-node tree draws a few hundred at first. A circle folds or unfolds its node; a label
// opens the node (its row, LLM call, rewards, pairs and SFT rows) in the side panel.
(function () {
  'use strict';
  const VISIBLE = 400, DX = 22, DY = 300;
  let zoom = null;
  const el = document.getElementById('tree');
  if (!el) return;
  const started = performance.now();
  const run = el.dataset.run;
  const query = new URLSearchParams({run: run, strategy: el.dataset.strategy, question: el.dataset.question});

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
  const fmt = v => (v === null || v === undefined) ? '—' : (typeof v === 'number' ? +v.toFixed(4) : String(v));
  const pretty = v => typeof v === 'string' ? v : JSON.stringify(v, null, 2);

  function stratify(cols) {
    const n = cols.node_id.length, ids = new Set(cols.node_id), rows = [];
    for (let i = 0; i < n; i++) {
      rows.push({id: cols.node_id[i], parentId: ids.has(cols.parent_id[i]) ? cols.parent_id[i] : null, i: i});
    }
    const roots = rows.filter(r => r.parentId === null);
    if (roots.length > 1) {  // several roots (plans, samples): hang them under one question node
      rows.push({id: '(question)', parentId: null, i: -1});
      roots.forEach(r => { r.parentId = '(question)'; });
    }
    return d3.stratify().id(d => d.id).parentId(d => d.parentId)(rows);
  }

  function foldToFit(root) {
    const perDepth = [];
    root.each(d => { perDepth[d.depth] = (perDepth[d.depth] || 0) + 1; });
    let shown = 0, depth = 0;
    while (depth < perDepth.length && shown + perDepth[depth] <= VISIBLE) shown += perDepth[depth++];
    const keep = Math.max(depth - 1, 1);
    root.each(d => { if (d.depth >= keep && d.children) { d._children = d.children; d.children = null; } });
  }

  function nodeClass(c, i) {
    if (i < 0) return 'node root';
    if (c.is_format_error[i]) return 'node error';
    return c.is_selected[i] ? 'node kept' : 'node pruned';
  }

  function labelOf(c, i) {
    if (i < 0) return 'question';
    const parts = [c.kind[i]];
    if (c.value[i] !== null) parts.push('v=' + fmt(c.value[i]));
    if (c.advantage[i] !== null) parts.push('A=' + fmt(c.advantage[i]));
    if (c.visits[i] !== null) parts.push('n=' + c.visits[i]);
    const text = (c.label[i] || '').replace(/\s+/g, ' ');
    return parts.join(' ') + (text ? ' · ' + (text.length > 30 ? text.slice(0, 30) + '…' : text) : '');
  }

  function draw(cols) {
    const root = stratify(cols);
    foldToFit(root);
    const svg = d3.select(el).append('svg').attr('width', '100%').attr('height', '100%');
    const g = svg.append('g');
    const links = g.append('g').attr('class', 'links'), nodes = g.append('g').attr('class', 'nodes');
    zoom = d3.zoom().scaleExtent([0.05, 4]).on('zoom', e => g.attr('transform', e.transform));
    svg.call(zoom);

    function update() {
      d3.tree().nodeSize([DX, DY])(root);
      const shown = root.descendants();
      links.selectAll('path').data(root.links(), d => d.target.id).join('path')
        .attr('d', d3.linkHorizontal().x(d => d.y).y(d => d.x));
      const join = nodes.selectAll('g.node').data(shown, d => d.id).join(enter => {
        const node = enter.append('g');
        node.append('title').text(d => d.data.i < 0 ? '' : cols.label[d.data.i] || '');
        node.append('circle').attr('r', 5).on('click', (e, d) => { toggle(d); update(); });
        node.append('text').attr('x', 9).attr('dy', '0.32em').text(d => labelOf(cols, d.data.i))
          .on('click', (e, d) => { if (d.data.i >= 0) showNode(d.id); });
        return node;
      });
      join.attr('class', d => nodeClass(cols, d.data.i) + (d._children ? ' folded' : ''))
        .attr('data-node-id', d => d.id).attr('transform', d => `translate(${d.y},${d.x})`);
      el.dataset.shown = shown.length;
    }
    function toggle(d) {
      if (d.children) { d._children = d.children; d.children = null; }
      else if (d._children) { d.children = d._children; d._children = null; }
    }
    document.getElementById('expand-all').addEventListener('click', () => {
      root.each(d => { if (d._children) { d.children = d._children; d._children = null; } });
      update();
      fit(svg, root);
    });
    update();
    fit(svg, root);
    el.dataset.nodes = cols.node_id.length;
    document.body.dataset.treeReadyMs = String(Math.round(performance.now() - started));
  }

  function fit(svg, root) {
    // the drawn nodes fill the view (at most at scale 1, at least 0.25: labels stay legible)
    const box = el.getBoundingClientRect(), shown = root.descendants();
    const xs = shown.map(d => d.x), ys = shown.map(d => d.y);
    const top = Math.min(...xs), height = Math.max(...xs) - top + DX, width = Math.max(...ys) + DY;
    const k = Math.max(0.25, Math.min(1, box.height / height, box.width / width));
    const t = d3.zoomIdentity.translate(30, Math.max(box.height / 2 - (top + height / 2) * k, 20 - top * k)).scale(k);
    svg.call(zoom.transform, t);
  }

  function section(title, ...children) { return h('section', {}, h('h3', {}, title), ...children); }
  function fieldTable(entries) {
    return h('dl', {class: 'fields'}, entries.map(([k, v, id]) => [h('dt', {}, k), h('dd', id ? {id: id} : {}, fmt(v))]));
  }
  function messages(list) {
    return h('div', {class: 'messages'}, (list || []).map(m => h('div', {class: 'msg ' + m.role}, h('b', {}, m.role), h('pre', {}, m.content))));
  }

  function showNode(nodeId) {
    const panel = document.getElementById('details');
    panel.replaceChildren(h('p', {class: 'empty'}, 'loading ' + nodeId + ' …'));
    fetch('/api/node?' + new URLSearchParams({run: run, node: nodeId})).then(r => r.json()).then(d => {
      const n = d.node, status = n.is_format_error ? 'format error' : (n.is_selected ? 'kept' : 'pruned');
      const parts = [
        h('h2', {}, n.kind, ' ', h('span', {class: 'badge ' + status.replace(' ', '-'), id: 'detail-status'}, status)),
        h('p', {class: 'meta'}, n.node_id, ' · depth ', n.depth, ' · ', n.strategy),
        fieldTable([['value', n.value, 'detail-value'], ['advantage', n.advantage, 'detail-advantage'],
                    ['visits', n.visits, 'detail-visits'], ['reward', n.reward], ['leaf', n.is_leaf]]),
      ];
      if (n.format_error) parts.push(h('p', {class: 'error'}, 'format error: ' + n.format_error));
      parts.push(section('text', h('pre', {}, n.text || '')));
      if (n.parsed) parts.push(section('parsed fields', h('pre', {}, pretty(n.parsed))));
      if ((n.passage_ids || []).length) {
        const box = h('div', {});
        box.append(h('button', {type: 'button', onclick: () => loadPassages(n.passage_ids, box)},
                     'show the ' + n.passage_ids.length + ' retrieved passage(s)'));
        parts.push(section('retrieved passages', box));
      }
      if (d.llm_call) {
        const c = d.llm_call;
        parts.push(h('details', {class: 'call'}, h('summary', {}, 'LLM call (' + c.role + ', ' + c.completion_tokens + ' tokens, ' + c.finish_reason + ')'),
          fieldTable([['model', c.model_fingerprint], ['seed', c.seed], ['sample', c.sample_index], ['prompt tokens', c.prompt_tokens], ['latency s', c.latency_s]]),
          h('h4', {}, 'sampling'), h('pre', {}, pretty(c.sampling)), h('h4', {}, 'prompt'), messages(c.messages),
          h('h4', {}, 'completion'), h('pre', {}, c.text)));
      }
      if (d.rewards.length) parts.push(section('rewards', fieldTable(d.rewards.map(r => [r.name, r.scaled]))));
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
