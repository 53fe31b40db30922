/* advisor report: draws the charts from the JSON block #report-data with Chart.js (inlined above).
   Untrusted text in the data (kernel names, trial labels, reasons) only reaches the page through
   textContent or a canvas; nothing here builds HTML. When done, <body data-ready="1">; every error
   is listed in <body data-errors> and shown at the top of the page. */
(function () {
  "use strict";
  var errors = [];
  function fail(where, e) {
    errors.push(where + ": " + (e && e.message ? e.message : String(e)));
    finish();
  }
  window.addEventListener("error", function (ev) { fail("window", ev.error || ev.message); });

  var data = {};
  try { data = JSON.parse(document.getElementById("report-data").textContent); } catch (e) { fail("data", e); }
  var phases = data.phases || [];
  var PHASE = {}, LABEL = {};
  phases.forEach(function (p) { PHASE[p.key] = p.color; LABEL[p.key] = p.label; });
  var STATUS = { baseline: "#1d232a", reference: "#4c78a8", accepted: "#1a7f37", rejected: "#a0a8b1",
                 failed: "#d1242f", measured: "#8250df", bound: "#bf8700", skipped: "#d0d7de", "not run": "#d0d7de" };
  var SYNC = "#111111", IDLE = "#f2b8b5";

  function pct(v) { return (v * 100).toFixed(1) + "%"; }
  function ms(v) { return v == null ? "–" : v.toFixed(v < 1 ? 3 : 2) + " ms"; }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function short(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  function draw(id, make) {
    var el = document.getElementById(id);
    if (!el) return;
    try { new Chart(el, make(el)); } catch (e) { fail(id, e); }
  }
  function options(extra) {
    var o = { animation: false, responsive: true, maintainAspectRatio: false,
              plugins: { legend: { display: false }, tooltip: {} } };
    Object.keys(extra || {}).forEach(function (k) { o[k] = extra[k]; });
    return o;
  }

  if (window.Chart) {
    Chart.defaults.font.family = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
    Chart.defaults.color = "#3d4650";
  } else {
    fail("Chart.js", "the chart library did not load");
  }
  var rows = data.rows || [];

  // 1. Gain of each trial over the stack it was added to, against the noise threshold.
  draw("chart-gains", function () {
    var shown = rows.filter(function (r) {
      return r.status !== "baseline" && (num(r.gain) !== null || num(r.speedup) !== null || r.status === "failed");
    });
    var gain = function (r) {
      if (num(r.gain) !== null) return r.gain * 100;
      return num(r.speedup) !== null ? (r.speedup - 1) * 100 : null;
    };
    var labels = shown.map(function (r) { return short(r.name, 28) + (r.status === "failed" ? " ✘" : ""); });
    var sets = [{ type: "bar", label: "gain", data: shown.map(gain), order: 2,
                  backgroundColor: shown.map(function (r) { return STATUS[r.status] || "#a0a8b1"; }) }];
    if (num(data.threshold) !== null) {
      sets.push({ type: "line", label: "keep threshold: " + pct(data.threshold) + " (2 × noise)", order: 1,
                  data: shown.map(function () { return data.threshold * 100; }), borderColor: "#b42318",
                  borderDash: [6, 4], borderWidth: 2, pointRadius: 0 });
      sets.push({ type: "line", label: "run-to-run noise: " + pct(data.noise), order: 1,
                  data: shown.map(function () { return data.noise * 100; }), borderColor: "#4c78a8",
                  borderDash: [2, 3], borderWidth: 2, pointRadius: 0 });
    }
    return { data: { labels: labels, datasets: sets }, options: options({
      scales: { y: { title: { display: true, text: "samples/s gain, %" }, ticks: { callback: function (v) { return v + "%"; } } },
                x: { ticks: { autoSkip: false, maxRotation: 35, minRotation: 20 } } },
      plugins: { legend: { display: sets.length > 1, labels: { filter: function (i) { return i.text !== "gain"; } } },
        tooltip: { callbacks: {
          title: function (items) { var r = shown[items[0].dataIndex]; return short(r.label, 90); },
          label: function (item) {
            if (item.dataset.type === "line") return item.dataset.label;
            return item.raw == null ? "no measurement" : (item.raw >= 0 ? "+" : "") + item.raw.toFixed(1) + "%";
          },
          afterLabel: function (item) { var r = shown[item.dataIndex]; return item.dataset.type === "line" ? "" : r.status + ": " + short(r.reason, 120); } } } } }) };
  });

  // 2. Profiled step time split by phase, one stacked bar per run/trial.
  draw("chart-breakdown", function () {
    var shown = rows.filter(function (r) { return r.breakdown && Object.keys(r.breakdown).length; });
    var labels = shown.map(function (r) {
      var star = data.best && r.name === data.best ? "▶ " : "";
      return star + short(r.name === "baseline" ? "baseline" : r.name, 30);
    });
    var sets = phases.map(function (p) {
      return { label: p.label, backgroundColor: p.color, data: shown.map(function (r) { return num(r.breakdown[p.key]) || 0; }) };
    });
    return { type: "bar", data: { labels: labels, datasets: sets }, options: options({
      indexAxis: "y",
      scales: { x: { stacked: true, title: { display: true, text: shown.some(function (r) { return r.breakdown_scaled; }) ? "ms per step (scaled to the measured step)" : "ms per profiled step" } }, y: { stacked: true } },
      plugins: { legend: { display: false }, tooltip: { callbacks: {
        title: function (items) { return short(shown[items[0].dataIndex].label, 90); },
        label: function (item) { return item.dataset.label + ": " + ms(item.raw); },
        footer: function (items) { var r = shown[items[0].dataIndex]; return "profiled step: " + ms(r.profiled_step_time_ms); } } } } }) };
  });

  // 3. One step: CPU phases, syncs, GPU stream lanes and GPU idle, as floating bars on one time axis.
  var tls = (data.timelines || []).filter(function (t) { return t && t.lanes; });
  var xmax = Math.max.apply(null, [1].concat(tls.map(function (t) { return t.step_ms || 0; })));
  Array.prototype.forEach.call(document.querySelectorAll("canvas[data-timeline]"), function (el) {
    var tl = (data.timelines || [])[Number(el.getAttribute("data-timeline"))];
    if (!tl || !tl.lanes) return;
    draw(el.id, function () {
      var byKey = {};
      var order = [];
      function set(key) {
        if (!byKey[key]) {
          var c = key === "sync" ? SYNC : key === "idle" ? IDLE : PHASE[key] || "#888";
          var l = key === "sync" ? "CPU waits for the GPU" : key === "idle" ? "GPU idle" : LABEL[key] || key;
          byKey[key] = { label: l, data: [], backgroundColor: c, borderColor: c, borderWidth: 0,
                         grouped: false, barPercentage: 0.9, categoryPercentage: 0.9, minBarLength: 1 };
          order.push(key);
        }
        return byKey[key];
      }
      tl.lanes.forEach(function (lane) {
        lane.segs.forEach(function (s) {
          var key = s[2] >= 0 ? (tl.phases[s[2]] || "other") : s[2] === -2 ? "sync" : "idle";
          set(key).data.push({ x: [s[0], s[1]], y: lane.name, n: s[3] });
        });
      });
      return { type: "bar", data: { labels: tl.lanes.map(function (l) { return l.name; }),
                                    datasets: order.map(function (k) { return byKey[k]; }) },
        options: options({ indexAxis: "y", parsing: { xAxisKey: "x", yAxisKey: "y" },
          scales: { x: { type: "linear", min: 0, max: xmax, title: { display: true, text: "ms from the start of the step" } },
                    y: { type: "category" } },
          plugins: { legend: { display: true, position: "bottom", labels: { boxWidth: 12 } }, tooltip: { callbacks: {
            title: function (items) { return items[0].raw.y; },
            label: function (item) {
              var x = item.raw.x;
              return item.dataset.label + ": " + ms(x[1] - x[0]) + "  (" + x[0].toFixed(2) + "–" + x[1].toFixed(2) + " ms)";
            },
            afterLabel: function (item) { var n = item.raw.n; return n >= 0 && tl.names[n] ? short(tl.names[n], 100) : ""; } } } } }) };
    });
  });

  // 4. Share of GPU time by kernel class, before/after (or run A/B).
  draw("chart-kernels", function () {
    var series = (data.kernel_series || []).filter(function (s) { return s.shares && Object.keys(s.shares).length; });
    var total = {};
    series.forEach(function (s) { Object.keys(s.shares).forEach(function (k) { total[k] = (total[k] || 0) + (num(s.shares[k]) || 0); }); });
    var classes = Object.keys(total).filter(function (k) { return total[k] > 0; }).sort(function (a, b) { return total[b] - total[a]; });
    var colors = ["#4c78a8", "#54a24b", "#f58518", "#b279a2"];
    var sets = series.map(function (s, i) {
      return { label: s.label, backgroundColor: colors[i % colors.length],
               data: classes.map(function (k) { return (num(s.shares[k]) || 0) * 100; }) };
    });
    return { type: "bar", data: { labels: classes, datasets: sets }, options: options({
      indexAxis: "y",
      scales: { x: { title: { display: true, text: "% of GPU time" }, ticks: { callback: function (v) { return v + "%"; } } } },
      plugins: { legend: { display: sets.length > 1, position: "bottom" }, tooltip: { callbacks: {
        label: function (item) {
          var s = series[item.datasetIndex], k = classes[item.dataIndex];
          var extra = s.ms && num(s.ms[k]) !== null ? " (" + ms(s.ms[k]) + " / step)" : "";
          return short(s.label, 40) + ": " + item.raw.toFixed(1) + "%" + extra;
        } } } } }) };
  });

  function finish() {
    document.body.setAttribute("data-errors", errors.join(" | "));
    var box = document.getElementById("page-errors");
    if (box && errors.length) {
      box.textContent = "Some charts could not be drawn: " + errors.join("; ");
      box.style.display = "block";
    }
  }
  finish();
  document.body.setAttribute("data-ready", "1");
})();
