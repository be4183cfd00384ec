// Draws a flow's graph (the JSON in #flowgraph's data-graph, see flowgraph_view.py) as SVG,
// laid out by dagre, and keeps each step's node current from the page's live feed: an SSE
// record `step` whose data is JSON {step, state, classes, round, run_id}.
//
// DOM hooks (for people and the browser tests): each step is `g.node[data-step=<id>]` with
// its state as a class (`pending`, `running`, `waiting`, `succeeded`, `failed`, `cancelled`,
// plus `done` for any ended step), `data-round` and its run links; #flow-status holds the
// flow run's status (its class and data-status).
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var NODE_W = 170, NODE_H = 62;
  var DOT = " \u00b7 ", AT_MOST = "\u2264", MORE = " \u203a";

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  // "implementer · r2/3": the agent (or the kind of a gate or wait), the round and its bound.
  function subtitle(node) {
    var bits = [];
    if (node.kind === "run") { bits.push(node.agent || ""); }
    else if (node.kind === "map") { bits.push("map" + DOT + (node.agent || "")); }
    else if (node.kind === "gate" || node.kind === "wait") { bits.push(node.kind); }
    if (node.round) { bits.push("r" + node.round + (node.max_rounds ? "/" + node.max_rounds : "")); }
    else if (node.max_rounds) { bits.push(AT_MOST + node.max_rounds + " rounds"); }
    return bits.join(DOT);
  }

  function nodeClass(node) {
    return "node kind-" + node.kind + (node.classes ? " " + node.classes : "");
  }

  function drawRuns(group, node) {
    var old = group.querySelector(".runs");
    if (old) { old.remove(); }
    var ids = node.run_ids || [];
    if (!ids.length) { return; }
    var latest = ids[ids.length - 1];
    var link = el("a", {"class": "runs", href: "/runs/" + encodeURIComponent(latest)}, group);
    var text = el("text", {x: 0, y: 22, "text-anchor": "middle"}, link);
    text.textContent = (ids.length > 1 ? ids.length + " runs, latest" : "run") + MORE;
    var title = el("title", {}, link);
    title.textContent = ids.join("\n");
  }

  function draw(svg, graph) {
    var g = new dagre.graphlib.Graph({multigraph: true});
    g.setGraph({rankdir: svg.dataset.rankdir || "TB", nodesep: 40, ranksep: 50, edgesep: 15,
                marginx: 20, marginy: 20});
    g.setDefaultEdgeLabel(function () { return {}; });
    graph.nodes.forEach(function (n) {
      var small = n.kind === "start" || n.kind === "end";
      g.setNode(n.id, {width: small ? 70 : NODE_W, height: small ? 30 : NODE_H, data: n});
    });
    graph.edges.forEach(function (e, i) {
      var label = e.label === "next" ? "" : e.label;
      if (e.loop && e.max_rounds) { label = (label ? label + " " : "") + "(" + AT_MOST + e.max_rounds + ")"; }
      g.setEdge(e.from, e.to, {label: label, width: label ? Math.min(8 * label.length, 220) : 0,
                               height: label ? 16 : 0, labelpos: "c", data: e}, "e" + i);
    });
    dagre.layout(g);
    var size = g.graph();
    svg.setAttribute("viewBox", "0 0 " + Math.ceil(size.width) + " " + Math.ceil(size.height));
    svg.setAttribute("width", Math.ceil(size.width));
    svg.setAttribute("height", Math.ceil(size.height));
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var defs = el("defs", {}, svg);
    var marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                               markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"}, defs);
    el("path", {d: "M0,0 L10,5 L0,10 z", "class": "arrowhead"}, marker);
    var edges = el("g", {"class": "edges"}, svg);
    g.edges().forEach(function (ref) {
      var e = g.edge(ref);
      var d = e.points.map(function (p, i) { return (i ? "L" : "M") + p.x + "," + p.y; }).join(" ");
      var cls = "edge" + (e.data.loop ? " loop" : "") + (e.data.label === "else" ? " else" : "");
      var group = el("g", {"class": cls, "data-from": ref.v, "data-to": ref.w}, edges);
      el("path", {d: d, "marker-end": "url(#arrow)"}, group);
      if (e.label) {
        var t = el("text", {x: e.x, y: e.y + 4, "text-anchor": "middle", "class": "edge-label"}, group);
        t.textContent = e.label;
      }
    });
    var nodes = el("g", {"class": "nodes"}, svg);
    g.nodes().forEach(function (id) {
      var n = g.node(id), data = n.data;
      var attrs = {"class": nodeClass(data), transform: "translate(" + n.x + "," + n.y + ")"};
      if (data.kind !== "start" && data.kind !== "end") { attrs["data-step"] = id; }
      if (data.round) { attrs["data-round"] = data.round; }
      var group = el("g", attrs, nodes);
      var round = data.kind === "start" || data.kind === "end" ? n.height / 2 : 8;
      el("rect", {x: -n.width / 2, y: -n.height / 2, width: n.width, height: n.height,
                  rx: round, ry: round}, group);
      var label = el("text", {x: 0, y: data.kind === "start" || data.kind === "end" ? 4 : -10,
                              "text-anchor": "middle", "class": "label"}, group);
      label.textContent = data.label;
      var sub = subtitle(data);
      if (sub) {
        var s = el("text", {x: 0, y: 6, "text-anchor": "middle", "class": "sub"}, group);
        s.textContent = sub;
      }
      if (data.description || data.state) {
        var title = el("title", {}, group);
        title.textContent = [data.description, data.state].filter(Boolean).join(DOT);
      }
      drawRuns(group, data);
      group.__node = data;
    });
  }

  // One live update: the node's state classes, round and newest run link.
  function apply(svg, update) {
    var group = svg.querySelector('g.node[data-step="' + CSS.escape(update.step) + '"]');
    if (!group || !group.__node) { return; }
    var data = group.__node;
    if (update.state) { data.state = update.state; data.classes = update.classes || update.state; }
    if (update.round) { data.round = update.round; group.setAttribute("data-round", update.round); }
    if (update.run_id && (data.run_ids || []).indexOf(update.run_id) < 0) {
      data.run_ids = (data.run_ids || []).concat([update.run_id]);
    }
    group.setAttribute("class", nodeClass(data));
    var sub = group.querySelector("text.sub");
    if (sub) { sub.textContent = subtitle(data); }
    drawRuns(group, data);
  }

  function start() {
    var svg = document.getElementById("flowgraph");
    if (!svg) { return; }
    if (typeof dagre === "undefined") {
      svg.outerHTML = '<p class="error">The graph needs /static/vendor/dagre.min.js.</p>';
      return;
    }
    draw(svg, JSON.parse(svg.dataset.graph));
    svg.dataset.drawn = "true";
    document.addEventListener("htmx:sseOpen", function (evt) {
      var source = evt.detail && evt.detail.source;
      if (!source || source.__nexusSteps) { return; }
      source.__nexusSteps = true;
      source.addEventListener("step", function (msg) {
        try { apply(svg, JSON.parse(msg.data)); } catch (err) { console.error("step update", err); }
      });
    });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); }
  else { start(); }
})();
