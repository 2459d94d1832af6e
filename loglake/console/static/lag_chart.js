/* loglake console: a Chart.js line chart of a JSON endpoint, refreshed every few seconds.
   Markup: <canvas data-lag-chart data-url="/charts/..." data-every="3000" data-unit="records">.
   The endpoint answers Chart.js's data form: {"labels": [epoch ms...], "datasets": [{"label",
   "data"}...], "truncated": n}; labels are shown as UTC times. After each refresh the canvas
   carries data-points (ticks shown) and data-series (lines shown), for tests. */
(function () {
  "use strict";
  function clock(ms) { return new Date(ms).toISOString().substring(11, 19); }
  function start(canvas) {
    var url = canvas.dataset.url, every = Number(canvas.dataset.every || 3000);
    var unit = canvas.dataset.unit || "";
    var chart = new Chart(canvas, {
      type: "line",
      data: {labels: [], datasets: []},
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, spanGaps: true,
        elements: {point: {radius: 0}},
        scales: {y: {beginAtZero: true, title: {display: unit !== "", text: unit}}},
        plugins: {legend: {position: "bottom"}}
      }
    });
    function refresh() {
      if (!document.body.contains(canvas)) { chart.destroy(); return; }
      fetch(url, {headers: {"Accept": "application/json"}})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) {
          if (d) {
            chart.data.labels = d.labels.map(clock);
            chart.data.datasets = d.datasets;
            chart.update();
            canvas.dataset.points = String(d.labels.length);
            canvas.dataset.series = String(d.datasets.length);
            var note = canvas.dataset.note && document.getElementById(canvas.dataset.note);
            if (note) {
              note.textContent = d.truncated ? d.truncated + " more series not shown" : "";
            }
          }
        })
        .catch(function () { /* the next refresh tries again */ })
        .then(function () { setTimeout(refresh, every); });
    }
    refresh();
  }
  document.querySelectorAll("canvas[data-lag-chart]").forEach(start);
})();
