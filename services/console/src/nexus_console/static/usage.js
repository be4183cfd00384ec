// Draws each usage section's chart with Chart.js from the JSON the page carries: cost (USD,
// left axis) and tokens (right axis) per day, agent, flow or task.
(function () {
  "use strict";
  function draw(canvas) {
    var data = JSON.parse(canvas.dataset.chart);
    new window.Chart(canvas, {
      type: data.kind,
      data: {
        labels: data.labels,
        datasets: [
          { label: "cost (USD)", data: data.cost_usd, yAxisID: "cost", backgroundColor: "#2857c5", borderColor: "#2857c5" },
          { label: "tokens", data: data.tokens, yAxisID: "tokens", backgroundColor: "#f59e0b", borderColor: "#f59e0b" }
        ]
      },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        scales: {
          cost: { type: "linear", position: "left", beginAtZero: true },
          tokens: { type: "linear", position: "right", beginAtZero: true, grid: { drawOnChartArea: false } }
        }
      }
    });
    canvas.dataset.drawn = "true";
  }
  function drawAll() {
    if (!window.Chart) { return; }
    document.querySelectorAll("canvas[data-chart]").forEach(draw);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else { drawAll(); }
})();
