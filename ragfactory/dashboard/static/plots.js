// Plots: each .plot element carries its values; Plotly draws them. Reward distributions are
// overlaid histograms, one trace per strategy; evaluations are grouped bars, base beside trained.
(function () {
  'use strict';
  const layout = extra => Object.assign({margin: {l: 50, r: 10, t: 30, b: 40}, height: 280,
    legend: {orientation: 'h', y: 1.15, x: 0}, font: {size: 12}}, extra);
  for (const el of document.querySelectorAll('.plot[data-figure]')) {
    const fig = JSON.parse(el.dataset.figure);
    const traces = Object.entries(fig.series).map(([name, values]) =>
      ({type: 'histogram', x: values, name: name, opacity: 0.7, nbinsx: 30}));
    Plotly.newPlot(el, traces, layout({barmode: 'overlay', xaxis: {title: {text: fig.column}}, yaxis: {title: {text: 'count'}}}),
      {displaylogo: false, responsive: true});
  }
  const evals = document.getElementById('plot-evals');
  if (evals) {
    const rows = JSON.parse(evals.dataset.evals), groups = [...new Set(rows.map(r => r.dataset + ' · ' + r.mode))];
    const bases = new Set(JSON.parse(evals.dataset.bases));
    const traces = [...new Set(rows.map(r => r.model_id))].map(model => ({
      type: 'bar', name: bases.has(model) ? model + ' (base)' : model, x: groups,
      y: groups.map(g => { const r = rows.find(r => r.model_id === model && r.dataset + ' · ' + r.mode === g); return r ? r.f1 : null; }),
    }));
    Plotly.newPlot(evals, traces, layout({barmode: 'group', yaxis: {title: {text: 'F1'}, range: [0, 1]}}), {displaylogo: false, responsive: true});
  }
  for (const button of document.querySelectorAll('button.copy')) {
    button.addEventListener('click', () => {
      const text = document.getElementById(button.dataset.target).textContent;
      navigator.clipboard.writeText(text).then(() => { button.textContent = 'copied'; });
    });
  }
})();
