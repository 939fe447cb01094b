// Plots: each .plot element carries its values; Plotly draws them. A reward panel is small
// multiples, one histogram per strategy (never overlaid: no series hides another), stacked by
// the chosen split; all of a panel's plots share bins and x range, and one value repeated gets
// a narrow bin around it rather than Plotly's unit bin. Evaluations are grouped bars, base
// beside trained, with their legend always shown. The flywheel's plot is a line per pipeline and
// partition: the promoted model's score after each night.
(function () {
  'use strict';
  const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const CONFIG = {displaylogo: false, responsive: true, displayModeBar: false};  // no toolbar over a legend

  function bins(values) {
    const lo = Math.min(...values), hi = Math.max(...values);
    if (hi - lo < 1e-9) {
      const size = Math.max(Math.abs(lo) * 0.1, 0.05);
      return {start: lo - size / 2, end: hi + size / 2, size: size};
    }
    const raw = (hi - lo) / 20, step = Math.pow(10, Math.floor(Math.log10(raw)));
    const size = [1, 2, 2.5, 5, 10].map(m => m * step).find(s => s >= raw);
    const start = Math.floor(lo / size) * size;
    return {start: start, end: start + Math.ceil((hi - start) / size + 1e-9) * size + size / 2, size: size};
  }

  function rewardPanel(el) {
    const fig = JSON.parse(el.dataset.figure);
    const strategies = fig.strategies.filter(s => fig.series[s]).concat(Object.keys(fig.series).filter(s => !fig.strategies.includes(s)));
    const all = strategies.flatMap(s => Object.values(fig.series[s]).flat());
    const b = bins(all), columns = Math.min(strategies.length, 3), rows = Math.ceil(strategies.length / columns);
    const groups = [...new Set(strategies.flatMap(s => Object.keys(fig.series[s])))].sort();
    const traces = [], annotations = [], layout = {};
    strategies.forEach((strategy, j) => {
      const axis = j ? String(j + 1) : '';
      groups.forEach((group, g) => {
        const values = fig.series[strategy][group];
        if (!values) return;
        const color = fig.split === 'none' ? PALETTE[fig.strategies.indexOf(strategy) % PALETTE.length] : PALETTE[g % PALETTE.length];
        traces.push({type: 'histogram', x: values, name: fig.split === 'none' ? strategy : group, legendgroup: group,
          showlegend: fig.split !== 'none' && !traces.some(t => t.legendgroup === group), marker: {color: color},
          xbins: b, autobinx: false, xaxis: 'x' + axis, yaxis: 'y' + axis, meta: strategy});
      });
      layout['xaxis' + axis] = {range: [b.start - b.size, b.end + b.size], matches: j ? 'x' : undefined};
      layout['yaxis' + axis] = {rangemode: 'tozero'};
      annotations.push({text: strategy, showarrow: false, xref: 'x' + axis + ' domain', yref: 'y' + axis + ' domain',
        x: 0.5, y: 1.12, xanchor: 'center', font: {size: 12}});
    });
    Object.assign(layout, {grid: {rows: rows, columns: columns, pattern: 'independent', xgap: 0.12, ygap: 0.35},
      barmode: 'stack', annotations: annotations, height: 170 * rows + (fig.split === 'none' ? 50 : 80),
      margin: {l: 40, r: 10, t: 30, b: 30}, font: {size: 11}, showlegend: fig.split !== 'none',
      legend: {orientation: 'h', y: -0.15 / rows, x: 0}});
    Plotly.newPlot(el, traces, layout, CONFIG);
  }

  for (const el of document.querySelectorAll('.plot[data-figure]')) rewardPanel(el);
  const evals = document.getElementById('plot-evals');
  if (evals) {
    const rows = JSON.parse(evals.dataset.evals), groups = [...new Set(rows.map(r => r.dataset + ' · ' + r.mode))];
    const bases = new Set(JSON.parse(evals.dataset.bases));
    const traces = [...new Set(rows.map(r => r.model_id))].map(model => ({
      type: 'bar', name: bases.has(model) ? model + ' (base)' : model, x: groups,
      y: groups.map(g => { const r = rows.find(r => r.model_id === model && r.dataset + ' · ' + r.mode === g); return r ? r.f1 : null; }),
    }));
    Plotly.newPlot(evals, traces, {barmode: 'group', height: 300, showlegend: true, margin: {l: 50, r: 10, t: 10, b: 40},
      legend: {orientation: 'h', y: -0.2, x: 0}, font: {size: 12}, yaxis: {title: {text: 'F1'}, range: [0, 1]}}, CONFIG);
  }
  const flywheel = document.getElementById('plot-flywheel');
  if (flywheel) {  // one line per pipeline and partition: the promoted model's score after each night
    const rows = JSON.parse(flywheel.dataset.metrics), traces = [];
    for (const pipeline of [...new Set(rows.map(r => r.pipeline))]) {
      const mine = rows.filter(r => r.pipeline === pipeline);
      for (const [partition, dash] of [['valid', 'solid'], ['test', 'dot']]) {
        traces.push({type: 'scatter', mode: 'lines+markers', name: pipeline + ' · ' + partition, x: mine.map(r => r.night),
          y: mine.map(r => r[partition]), text: mine.map(r => r.promoted), line: {dash: dash},
          hovertemplate: '%{x}: %{y:.4f} (%{text})<extra>' + partition + '</extra>'});
      }
    }
    const metric = rows.length ? rows[0].metric : '';
    Plotly.newPlot(flywheel, traces, {height: 300, showlegend: true, margin: {l: 50, r: 10, t: 10, b: 40},
      legend: {orientation: 'h', y: -0.2, x: 0}, font: {size: 12}, xaxis: {type: 'category'},
      yaxis: {title: {text: metric}, rangemode: 'tozero'}}, CONFIG);
  }
  for (const button of document.querySelectorAll('button.copy')) {
    button.addEventListener('click', () => {
      const text = document.getElementById(button.dataset.target).textContent;
      navigator.clipboard.writeText(text).then(() => { button.textContent = 'copied'; });
    });
  }
})();
