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
  // Rows of the two frame lists.  Whole lists are aligned by address, so a frame one side lacks
  // gets a row of its own and the rest lines up again; lists cut to a window (very long stacks)
  // are set side by side by index, with a row for each gap.
  function alignRows(ex, names) {
    var A = ex.frames[names[0]], B = names.length > 1 ? ex.frames[names[1]] : [];
    var whole = A.length === ex.lengths[names[0]] && (names.length < 2 || B.length === ex.lengths[names[1]]);
    var rows = [];
    if (!whole) {
      var ma = {}, mb = {}, idx = {};
      A.forEach(function (f) { ma[f[0]] = f; idx[f[0]] = 1; });
      B.forEach(function (f) { mb[f[0]] = f; idx[f[0]] = 1; });
      var prev = -1;
      Object.keys(idx).map(Number).sort(function (x, y) { return x - y; }).forEach(function (k) {
        if (k > prev + 1) rows.push({ gap: k - prev - 1 });
        prev = k;
        rows.push({ a: ma[k], b: mb[k], k: k });
      });
      return rows;
    }
    function later(list, from, addr) {
      for (var k = from; k < list.length && k < from + 16; k++) if (list[k][1] === addr) return k;
      return -1;
    }
    var i = 0, j = 0;
    while (i < A.length || j < B.length) {
      if (i < A.length && j < B.length && A[i][1] === B[j][1]) { rows.push({ a: A[i++], b: B[j++] }); continue; }
      var ja = i < A.length && names.length > 1 ? later(B, j, A[i][1]) : -1;  // A[i] further down B
      var ib = j < B.length ? later(A, i, B[j][1]) : -1;  // B[j] further down A
      if (ja >= 0 && (ib < 0 || ja - j <= ib - i)) { while (j < ja) rows.push({ b: B[j++] }); }
      else if (ib >= 0) { while (i < ib) rows.push({ a: A[i++] }); }
      else rows.push({ a: A[i++], b: B[j++] });
    }
    return rows;
  }
  function sideBySide(ex) {
    var names = [ex.unwinder, ex.oracle].filter(function (n) { return ex.frames[n]; });
    var t = el("table", { "class": "sbs" });
    var h = el("tr"); h.appendChild(el("th", null, ""));
    names.forEach(function (n) { h.appendChild(el("th", null, n + " (" + ex.lengths[n] + " frames)")); });
    t.appendChild(h);
    var marks = {};
    (ex.divergences || []).forEach(function (d) {
      if (typeof d.got_index === "number") marks[ex.unwinder + ":" + d.got_index] = d.kind;
      if (typeof d.want_index === "number") marks[ex.oracle + ":" + d.want_index] = d.kind;
    });
    var first = true;
    alignRows(ex, names).forEach(function (r) {
      if (r.gap) {
        var g = el("tr", { "class": "gap" }); g.appendChild(el("td"));
        g.appendChild(el("td", { colspan: names.length }, "\u2026 " + r.gap + " frame(s) not kept \u2026"));
        t.appendChild(g);
        return;
      }
      var fs = [r.a, r.b];
      var differ = names.length === 2 && (!r.a || !r.b || r.a[1] !== r.b[1]);
      var tr = el("tr", { "class": differ ? (first ? "first diff" : "diff") : "" });
      tr.appendChild(el("td", { "class": "mark" }, differ ? (first ? "\u25b6" : "!") : ""));
      if (differ) first = false;
      names.forEach(function (n, k) {
        var f = fs[k], td = el("td");
        if (f) {
          td.appendChild(el("span", { "class": "idx" }, "#" + f[0] + " "));
          td.appendChild(el("span", { "class": "addr" }, hex(f[1]) + " "));
          td.appendChild(el("span", null, f[3] || "?"));
          if (f[2]) td.appendChild(el("span", { "class": "mod" }, " (" + f[2] + ")"));
          if (marks[n + ":" + f[0]]) td.title = "divergence (" + marks[n + ":" + f[0]] + ") at this frame";
        } else {
          td.textContent = "\u2014";
          td.className = "none";
        }
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

  // ---- flame graphs: the SVG is parsed from its string when opened; click a frame to zoom ----
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
    holder.innerHTML = data.flames[d.getAttribute("data-scenario")] || "";
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
