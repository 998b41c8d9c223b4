(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function hex(n) { return "0x" + Number(n).toString(16); }

  // ---- filters: hide every .flt whose data-scenario / data-oracle / data-cause differs ----
  var sel = { scenario: document.getElementById("f-scenario"), oracle: document.getElementById("f-oracle"),
              cause: document.getElementById("f-cause") };
  function applyFilters() {
    var want = { scenario: sel.scenario.value, oracle: sel.oracle.value, cause: sel.cause.value };
    document.querySelectorAll(".flt").forEach(function (e) {
      var hide = false;
      for (var k in want) {
        var v = e.getAttribute("data-" + k);
        if (want[k] && v !== null && v !== want[k]) hide = true;
      }
      e.classList.toggle("hidden", hide);
    });
  }
  for (var k in sel) sel[k].addEventListener("change", applyFilters);

  // ---- side-by-side frames of one example, drawn when its <details> opens ----
  function frameText(f) { return f[3] || hex(f[1]); }
  function sideBySide(ex) {
    var names = [ex.unwinder, ex.oracle].filter(function (n) { return ex.frames[n]; });
    var cols = names.map(function (n) {
      var m = {}; ex.frames[n].forEach(function (f) { m[f[0]] = f; }); return m;
    });
    var idx = {};
    names.forEach(function (n) { ex.frames[n].forEach(function (f) { idx[f[0]] = 1; }); });
    var rows = Object.keys(idx).map(Number).sort(function (a, b) { return a - b; });
    var t = el("table", { "class": "sbs" });
    var h = el("tr"); h.appendChild(el("th", null, "")); h.appendChild(el("th", null, "#"));
    names.forEach(function (n) { h.appendChild(el("th", null, n + " (" + ex.lengths[n] + " frames)")); });
    t.appendChild(h);
    var marks = {};
    (ex.divergences || []).forEach(function (d) {
      if (typeof d.got_index === "number") marks[ex.unwinder + ":" + d.got_index] = d.kind;
      if (typeof d.want_index === "number") marks[ex.oracle + ":" + d.want_index] = d.kind;
    });
    var prev = -1, first = true;
    rows.forEach(function (i) {
      if (i > prev + 1) {
        var g = el("tr", { "class": "gap" }); g.appendChild(el("td")); g.appendChild(el("td"));
        g.appendChild(el("td", { colspan: names.length }, "\u2026 " + (i - prev - 1) + " frame(s) not kept \u2026"));
        t.appendChild(g);
      }
      prev = i;
      var fs = cols.map(function (c) { return c[i]; });
      var differ = names.length === 2 && (!fs[0] !== !fs[1] || (fs[0] && fs[1] && fs[0][1] !== fs[1][1]));
      if (names.length === 2 && !fs[0] && i >= ex.lengths[names[0]] && !fs[1]) differ = false;
      var tr = el("tr", { "class": differ ? (first ? "first diff" : "diff") : "" });
      tr.appendChild(el("td", { "class": "mark" }, differ ? (first ? "\u25b6" : "!") : ""));
      if (differ) { first = false; }
      tr.appendChild(el("td", null, "#" + i));
      names.forEach(function (n, k) {
        var f = fs[k], td = el("td");
        if (f) {
          td.appendChild(el("span", { "class": "addr" }, hex(f[1]) + " "));
          td.appendChild(el("span", null, f[3] || "?"));
          if (f[2]) td.appendChild(el("span", { "class": "mod" }, " (" + f[2] + ")"));
          if (marks[n + ":" + i]) td.title = "divergence (" + marks[n + ":" + i] + ") at this frame";
        } else if (i >= ex.lengths[n]) { td.textContent = "\u2014 (ended)"; }
        tr.appendChild(td);
      });
      t.appendChild(tr);
    });
    return t;
  }
  function evidence(ex) {
    var box = el("div", { "class": "evidence" });
    names(ex).forEach(function (n) {
      if (ex.stops[n]) box.appendChild(el("div", null, n + " stopped: " + ex.stops[n]));
    });
    if (ex.reason) box.appendChild(el("div", { "class": "bad" }, ex.reason));
    (ex.divergences || []).forEach(function (d) {
      var p = el("div");
      p.appendChild(el("span", { "class": d.cause ? "ct" : "ct bad" }, "[" + (d.cause || "UNEXPLAINED") + "] "));
      p.appendChild(el("span", null, d.text));
      box.appendChild(p);
      var ev = d.evidence || {};
      ["prologue", "code"].forEach(function (k) {
        if (Array.isArray(ev[k]) && ev[k].length) {
          box.appendChild(el("div", null, k + ":"));
          box.appendChild(el("pre", { "class": "insns" }, ev[k].join("\n")));
        }
      });
      var dl = el("dl");
      Object.keys(ev).forEach(function (k) {
        if (k === "text" || k === "prologue" || k === "code") return;
        var v = ev[k];
        if (typeof v === "number" && v >= 4096) v = hex(v);
        else if (typeof v !== "string") v = JSON.stringify(v);
        if (v.length > 400) v = v.slice(0, 400) + "\u2026";
        dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", null, v));
      });
      if (dl.childNodes.length) box.appendChild(dl);
    });
    return box;
  }
  function names(ex) { return [ex.unwinder, ex.oracle].filter(function (n) { return ex.frames[n]; }); }
  function fillExample(d) {
    var body = d.querySelector(".body");
    if (!d.open || body.childNodes.length) return;
    var ex = data.examples[d.getAttribute("data-ex")];
    if (!ex) { body.textContent = "(example not kept)"; return; }
    body.appendChild(el("div", { "class": "hint" }, "pid " + ex.task + " cookie " + hex(ex.cookie) + " at " +
                                 ex.point + "; verdict " + ex.verdict));
    body.appendChild(sideBySide(ex));
    body.appendChild(evidence(ex));
  }
  document.querySelectorAll("details.ex").forEach(function (d) {
    d.addEventListener("toggle", function () { fillExample(d); });
  });

  // ---- flame graphs: the SVG comes out of its <template> when opened; click a frame to zoom ----
  function zoom(svg, node) {
    var x0 = +node.getAttribute("data-x"), w0 = +node.getAttribute("data-w"), d0 = +node.getAttribute("data-d");
    var width = +svg.getAttribute("data-width"), pad = +svg.getAttribute("data-pad");
    svg.querySelectorAll("g.f").forEach(function (g) {
      var x = +g.getAttribute("data-x"), w = +g.getAttribute("data-w"), d = +g.getAttribute("data-d");
      var inside = x >= x0 - 1e-9 && x + w <= x0 + w0 + 1e-9;
      var above = d < d0 && x <= x0 + 1e-9 && x + w >= x0 + w0 - 1e-9;
      var r = g.querySelector("rect"), t = g.querySelector("text");
      if (!inside && !above) { g.style.display = "none"; return; }
      g.style.display = "";
      var nx = above ? 0 : (x - x0) / w0, nw = above ? 1 : w / w0;
      var px = pad + nx * (width - 2 * pad), pw = nw * (width - 2 * pad);
      r.setAttribute("x", px.toFixed(2)); r.setAttribute("width", Math.max(pw, 0.1).toFixed(2));
      r.style.opacity = above ? "0.6" : "";
      t.setAttribute("x", (px + 3).toFixed(2));
      var label = g.getAttribute("data-n"), fit = Math.floor((pw - 6) / 7);
      t.textContent = fit < 3 ? "" : (label.length > fit ? label.slice(0, fit - 2) + ".." : label);
    });
  }
  function wireFlame(svg) {
    svg.addEventListener("click", function (e) {
      var g = e.target.closest && e.target.closest("g.f");
      if (g) zoom(svg, g);
      else if (e.target.classList && e.target.classList.contains("reset")) zoom(svg, svg.querySelector("g.f"));
    });
  }
  function openFlame(d) {
    var holder = d.querySelector(".holder");
    if (!d.open || holder.childNodes.length) return;
    holder.appendChild(document.importNode(d.querySelector("template").content, true));
    var svg = holder.querySelector("svg");
    if (svg) wireFlame(svg);
  }
  document.querySelectorAll("details.flame").forEach(function (d) {
    d.addEventListener("toggle", function () { openFlame(d); });
    openFlame(d);
  });

  // ---- per-task timelines, drawn when a task is chosen ----
  document.querySelectorAll("div.tl").forEach(function (box) {
    var s = box.getAttribute("data-tl"), pick = box.querySelector("select"), body = box.querySelector(".tl-body");
    pick.addEventListener("change", function () {
      body.textContent = "";
      var t = (data.timelines[s] || {})[pick.value];
      if (!t) return;
      var table = el("table", { "class": "num" }), h = el("tr");
      ["entry", "epoch", "events", "requests (ret)", "cookie", "walks", "cached", "callbacks", "walks saved", "checked at", "ended"]
        .forEach(function (c) { h.appendChild(el("th", null, c)); });
      table.appendChild(h);
      var cols = data.timeline_columns;
      t.entries.forEach(function (a) {
        var r = {}; cols.forEach(function (c, k) { r[c] = a[k]; });
        var tr = el("tr"), ev = el("td");
        r.seq.split("").forEach(function (c) { ev.appendChild(el("b", { "class": "ev ev-" + c }, c)); });
        tr.appendChild(el("td", null, r.entry)); tr.appendChild(el("td", null, r.epoch === null ? "" : r.epoch));
        tr.appendChild(ev);
        tr.appendChild(el("td", null, r.requests.join(" ")));
        tr.appendChild(el("td", null, r.cookie ? hex(r.cookie) : ""));
        tr.appendChild(el("td", null, r.walks)); tr.appendChild(el("td", null, r.cached));
        tr.appendChild(el("td", null, r.callbacks));
        tr.appendChild(el("td", null, Math.max(0, r.callbacks - r.walks)));
        tr.appendChild(el("td", null, r.point)); tr.appendChild(el("td", null, r.end));
        table.appendChild(tr);
      });
      body.appendChild(table);
      if (t.more) body.appendChild(el("p", { "class": "hint" }, t.more + " more entries not kept"));
    });
  });
  // ---- #ex-KEY opens that example (a link to one divergence) ----
  function openFromHash() {
    var m = /^#(ex-\w+)$/.exec(location.hash);
    var d = m && document.getElementById(m[1]);
    if (d) { d.open = true; fillExample(d); d.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openFromHash);
  openFromHash();
  document.documentElement.setAttribute("data-ready", String(Math.round(performance.now())));
  window.addEventListener("load", function () {
    openFromHash();
    document.documentElement.setAttribute("data-loaded", String(Math.round(performance.now())));
  });
})();
