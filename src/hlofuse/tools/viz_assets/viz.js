/* hlofuse viz: lays out the graphs of the embedded JSON with dagre (compound graphs for
 * expanded whiles, conditionals, calls and fusions) and draws them as SVG, with pan/zoom, a
 * side panel of details, and boundary edges highlighted with their reasons.
 *
 * Data (written by hlofuse/tools/viz.py): views.before / views.after, each
 *   {label, entry, comps: {name: {name, kind, root, nodes: [node]}}, kernels, boundaries, events}
 *   node: {id, op, shape, cls, in: [operand names], src, hlo, calls?, kind?, ops?, c?, param?}
 * A node with `calls` can be expanded into a cluster holding the computations it calls; edges
 * always join leaf nodes (dagre does not lay out edges to clusters): an expanded node's inputs
 * go to its computations' parameters (a fusion's hidden parameters: straight to their users)
 * and its output comes from their roots. */
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("viz-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const CHAR_W = 6.7, LINE_H = 14, PAD_X = 8, PAD_Y = 6, HEAD_H = 16;
  const AUTO_EXPAND_BUDGET = 140;   // visible nodes up to which fusions start expanded
  const MAX_VISIBLE = 450;          // dagre needs ~3 s at this size: larger expansions are refused
  const settings = { showConstants: false, showGte: false };
  const panes = {};

  function svgEl(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function htmlEl(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in (attrs || {})) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function clip(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }
  function expandable(n) { return !!n.calls; }
  function hiddenLeaf(n) {
    return (n.cls === "constant" && !settings.showConstants) ||
      (n.op === "get-tuple-element" && !settings.showGte);
  }
  function nodeClass(n) {
    if (n.cls === "fusion") return "fusion-" + (n.kind || "kLoop");
    return n.cls;
  }

  class Pane {
    constructor(key, view, section) {
      this.key = key;
      this.view = view;
      this.section = section;
      this.svg = section.querySelector("svg");
      this.expanded = new Set();
      this.nodes = new Map();     // instruction name -> {node, comp}
      this.callerOf = new Map();  // computation name -> instruction name calling it
      for (const comp of Object.values(view.comps)) {
        for (const n of comp.nodes) {
          this.nodes.set(n.id, { node: n, comp: comp.name });
          if (n.calls) {
            for (const v of Object.values(n.calls)) {
              for (const c of (Array.isArray(v) ? v : [v])) this.callerOf.set(c, n.id);
            }
          }
        }
      }
      this.boundaryOf = new Map();  // "comp|from->to" -> [boundary index]
      view.boundaries.forEach((b, i) => {
        for (let j = 1; j < b.path.length; j++) {
          for (let k = 0; k < j; k++) {
            const key = b.comp + "|" + b.path[k] + "->" + b.path[j];
            if (!this.boundaryOf.has(key)) this.boundaryOf.set(key, []);
            if (!this.boundaryOf.get(key).includes(i)) this.boundaryOf.get(key).push(i);
          }
        }
      });
      this.t = { x: 0, y: 0, k: 1 };
      this.installPanZoom();
      this.head();
      this.autoExpand(view.entry);
    }

    head() {
      const k = this.view.kernels;
      const loops = Object.entries(k.loops).map(([w, n]) => `${w}: ${n}/iter`).join(", ");
      const h = this.section.querySelector(".pane-head");
      h.textContent = "";
      h.appendChild(htmlEl("b", {}, this.view.label));
      h.appendChild(document.createTextNode(
        ` · ${this.view.instructions} instructions · kernels: entry ${k.entry}` +
        (loops ? ` · loops ${loops}` : "") +
        (this.view.boundaries.length ? ` · ${this.view.boundaries.length} boundaries` : "")));
    }

    visibleCount(compName) {
      const comp = this.view.comps[compName];
      let n = 0;
      for (const node of comp.nodes) {
        if (hiddenLeaf(node)) continue;
        if (this.expanded.has(node.id)) {
          for (const c of this.callees(node)) n += this.visibleCount(c);
        } else n += 1;
      }
      return n;
    }

    callees(n) {
      const c = n.calls || {};
      if (c.fused) return [c.fused];
      if (c.body) return [c.body, c.condition];
      if (c.branches) return c.branches;
      if (c.to_apply) return [c.to_apply];
      return [];
    }

    /* Expand the fusions of `compName` (and of computations expanded inside it), smallest
     * first, while the pane stays under the node budget. */
    autoExpand(compName) {
      const fusions = [];
      const visit = (name) => {
        for (const n of this.view.comps[name].nodes) {
          if (n.cls === "fusion" && !this.expanded.has(n.id)) fusions.push(n);
          else if (this.expanded.has(n.id)) this.callees(n).forEach(visit);
        }
      };
      visit(compName);
      fusions.sort((a, b) => a.ops.length - b.ops.length);
      let total = this.visibleCount(this.view.entry);
      for (const f of fusions) {
        const extra = this.visibleCount(f.calls.fused) - 1;
        if (total + extra > AUTO_EXPAND_BUDGET) break;
        this.expanded.add(f.id);
        total += extra;
      }
    }

    /* ----- graph construction ----- */
    build() {
      const g = new dagre.graphlib.Graph({ compound: true, multigraph: true });
      g.setGraph({ rankdir: "TB", nodesep: 16, ranksep: 2 * (HEAD_H + 5), edgesep: 8, marginx: 16, marginy: 16 });
      g.setDefaultEdgeLabel(() => ({}));
      this.g = g;
      this.meta = new Map();
      this.edgeCount = 0;
      this.addComp(this.view.entry, null, "", false);
      return g;
    }

    addLeaf(id, n, parent, lines) {
      const w = Math.max(...lines.map((l) => l.length)) * CHAR_W + 2 * PAD_X + (expandable(n) ? 14 : 0);
      const h = lines.length * LINE_H + 2 * PAD_Y;
      this.g.setNode(id, { width: w, height: h });
      if (parent) this.g.setParent(id, parent);
      this.meta.set(id, { node: n, lines, cluster: false });
    }

    addCluster(id, n, parent, title, sub) {
      this.g.setNode(id, {});
      if (parent) this.g.setParent(id, parent);
      this.meta.set(id, { node: n, title, cluster: true, sub });
    }

    leafLines(n) {
      if (n.cls === "fusion") {
        return [n.id, `${n.kind} fusion · ${n.ops.length} ops`, clip(n.shape, 34)];
      }
      if (n.op === "while") {
        const k = this.view.kernels.loops[n.id];
        return [n.id, "while" + (k !== undefined ? ` · ${k} kernels/iter` : ""), clip(n.shape, 34)];
      }
      if (n.calls) return [n.id, n.op, clip(n.shape, 34)];
      return [n.id, clip(n.op + " " + n.shape, 34)];
    }

    /* Adds computation `compName` under cluster `parent`; returns its input ports (parameter
     * number -> leaf ids) and output leaves. */
    addComp(compName, parent, prefix, hideParams) {
      const comp = this.view.comps[compName];
      const outs = new Map(), ins = new Map(), params = new Map(), alias = new Map();
      let added = 0;
      for (const n of comp.nodes) {
        const id = prefix + n.id;
        if (n.cls === "param" && hideParams) { outs.set(n.id, { param: n.param }); continue; }
        if (n.cls === "constant" && !settings.showConstants) { outs.set(n.id, null); continue; }
        if (n.op === "get-tuple-element" && !settings.showGte && outs.has(n.in[0]) && n.id !== comp.root) {
          outs.set(n.id, outs.get(n.in[0]));  // drawn as an edge from the tuple's producer
          alias.set(n.id, alias.get(n.in[0]) || n.in[0]);
          continue;
        }
        added += 1;
        if (this.expanded.has(n.id) && expandable(n)) {
          const port = this.addExpanded(id, n, parent, prefix);
          ins.set(n.id, port.input);
          outs.set(n.id, port.out);
        } else {
          this.addLeaf(id, n, parent, this.leafLines(n));
          ins.set(n.id, () => [id]);
          outs.set(n.id, [id]);
          if (n.cls === "param") params.set(n.param, [id]);
        }
      }
      if (!added && parent) {  // keep clusters non-empty
        const id = prefix + "(empty)" + compName;
        this.addLeaf(id, { id: "(no instructions shown)", op: "", shape: "", cls: "plain" }, parent,
          ["(constants only)"]);
      }
      for (const n of comp.nodes) {
        const target = ins.get(n.id);
        if (!target) continue;
        n.in.forEach((opName, i) => {
          const src = outs.get(opName);
          if (!src) return;
          if (!Array.isArray(src)) {  // a hidden fusion parameter: the caller wires it
            const list = params.get(src.param) || [];
            list.push(...target(i));
            params.set(src.param, list);
            return;
          }
          const bkey = compName + "|" + (alias.get(opName) || opName) + "->" + n.id;
          for (const s of src) for (const t of target(i)) this.addEdge(s, t, bkey, opName, n.id);
        });
      }
      const rootOut = outs.get(comp.root);
      return { params, out: Array.isArray(rootOut) ? rootOut : [] };
    }

    addExpanded(id, n, parent, prefix) {
      const c = n.calls;
      const cid = id + "#";
      if (c.fused) {
        this.addCluster(cid, n, parent, `${n.id} · ${n.kind} fusion · ${n.ops.length} ops`, false);
        const r = this.addComp(c.fused, cid, id + "/", true);
        return { input: (i) => r.params.get(i) || [], out: r.out };
      }
      const k = this.view.kernels.loops[n.id];
      this.addCluster(cid, n, parent, n.op === "while"
        ? `${n.id} · while${k !== undefined ? ` · ${k} kernels/iter` : ""}` : `${n.id} · ${n.op}`, false);
      const sub = (name, label) => {
        const sid = cid + name;
        this.addCluster(sid, n, cid, `${label} ${name}`, true);
        return this.addComp(name, sid, id + "/" + name + "/", false);
      };
      if (c.body) {
        const body = sub(c.body, "body"), cond = sub(c.condition, "condition");
        return { input: () => [...(body.params.get(0) || []), ...(cond.params.get(0) || [])],
          out: body.out };
      }
      if (c.branches) {
        const rs = c.branches.map((b, i) => sub(b, `branch ${i}:`));
        return { input: (i) => (i === 0 ? [] : (rs[i - 1] ? rs[i - 1].params.get(0) || [] : [])),
          out: rs.flatMap((r) => r.out) };
      }
      const r = sub(c.to_apply, "calls");
      return { input: (i) => r.params.get(i) || [], out: r.out };
    }

    addEdge(s, t, bkey, from, to) {
      const b = this.boundaryOf.get(bkey);
      this.g.setEdge(s, t, { boundary: b || null, from, to }, "e" + (this.edgeCount++));
    }

    /* ----- drawing ----- */
    render(keepName) {
      let anchor = null;
      if (keepName && this.g) anchor = this.screenPos(keepName);
      const g = this.build();
      dagre.layout(g);
      this.draw(g);
      if (anchor && this.fitScale() >= this.t.k) {  // still fits at this scale: keep the node still
        const now = this.graphPos(keepName);
        if (now) {
          this.t.x = anchor.x - now.x * this.t.k;
          this.t.y = anchor.y - now.y * this.t.k;
          this.apply();
        }
      } else this.fit();
    }

    findId(name) {
      for (const [id, m] of this.meta) if (m.node.id === name && (m.cluster ? !m.sub : true)) return id;
      return null;
    }
    graphPos(name) {
      const id = this.findId(name);
      if (!id) return null;
      const n = this.g.node(id);
      return { x: n.x, y: n.y - n.height / 2 };
    }
    screenPos(name) {
      const p = this.graphPos(name);
      return p ? { x: p.x * this.t.k + this.t.x, y: p.y * this.t.k + this.t.y } : null;
    }

    draw(g) {
      const svg = this.svg;
      svg.textContent = "";
      const defs = svgEl("defs", {}, svg);
      for (const [name, color] of [["arrow", "#8a8a8a"], ["arrow-fusion", "#d62728"],
        ["arrow-control-flow", "#8e44ad"], ["arrow-loop-state", "#e67e22"], ["arrow-custom-call", "#d62728"]]) {
        const m = svgEl("marker", { id: `${this.key}-${name}`, viewBox: "0 0 10 10", refX: 9, refY: 5,
          markerUnits: "userSpaceOnUse", markerWidth: 9, markerHeight: 9, orient: "auto-start-reverse" }, defs);
        svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: color }, m);
      }
      this.vp = svgEl("g", { class: "viewport" }, svg);
      const clusters = g.nodes().filter((v) => this.meta.get(v) && this.meta.get(v).cluster);
      const depth = (v) => { let d = 0; for (let p = g.parent(v); p; p = g.parent(p)) d++; return d; };
      clusters.sort((a, b) => depth(a) - depth(b));
      for (const v of clusters) this.drawCluster(v, g.node(v), this.meta.get(v));
      const edgeLayer = svgEl("g", { class: "edges" }, this.vp);
      for (const e of g.edges()) this.drawEdge(edgeLayer, g.edge(e));
      for (const v of g.nodes()) {
        const m = this.meta.get(v);
        if (m && !m.cluster) this.drawNode(v, g.node(v), m);
      }
    }

    drawCluster(v, box, m) {
      const n = m.node;
      const cls = "cluster " + (m.sub ? "sub" : nodeClass(n));
      const grp = svgEl("g", { class: cls, "data-name": n.id }, this.vp);
      const x = box.x - box.width / 2, y = box.y - box.height / 2;
      svgEl("rect", { class: "box", x, y, width: box.width, height: box.height, rx: 5 }, grp);
      const w = Math.min(box.width, m.title.length * CHAR_W + 2 * PAD_X);
      const head = svgEl("rect", { class: "head", x, y, width: w, height: HEAD_H, rx: 3 }, grp);
      svgEl("text", { class: "head-t", x: x + PAD_X, y: y + 12 }, grp).textContent =
        clip(m.title, Math.max(4, Math.floor((box.width - 2 * PAD_X) / CHAR_W)));
      svgEl("title", {}, head).textContent = m.sub ? m.title : `${m.title}\nclick to collapse`;
      if (!m.sub) {
        head.addEventListener("click", (ev) => {
          ev.stopPropagation();
          this.select(n.id);
          toggle(n.id, false);
        });
      }
    }

    drawEdge(layer, e) {
      const pts = e.points;
      let d = `M${pts[0].x},${pts[0].y}`;
      if (pts.length > 2) {  // quadratic smoothing through the layout's bend points
        for (let i = 1; i < pts.length - 1; i++) {
          const mx = (pts[i].x + pts[i + 1].x) / 2, my = (pts[i].y + pts[i + 1].y) / 2;
          d += ` Q${pts[i].x},${pts[i].y} ${i === pts.length - 2 ? pts[i + 1].x : mx},${i === pts.length - 2 ? pts[i + 1].y : my}`;
        }
      } else d += ` L${pts[1].x},${pts[1].y}`;
      const b = e.boundary;
      const cat = b ? this.view.boundaries[b[0]].category || "fusion" : "";
      const grp = svgEl("g", { class: "edge" + (b ? " boundary cat-" + cat : ""), "data-from": e.from, "data-to": e.to }, layer);
      svgEl("path", { class: "hit", d }, grp);
      svgEl("path", { class: "line", d, "marker-end": `url(#${this.key}-${b ? "arrow-" + cat : "arrow"})` }, grp);
      if (b) {
        const bs = b.map((i) => this.view.boundaries[i]);
        svgEl("title", {}, grp).textContent = bs.map((x) =>
          `${x.category || "fusion"} boundary ${x.from} → ${x.to}\n` + x.reasons.slice(0, 3).map(reasonText).join("\n")).join("\n\n");
        grp.addEventListener("click", (ev) => { ev.stopPropagation(); showBoundaries(this, b, grp); });
      }
    }

    drawNode(v, box, m) {
      const n = m.node;
      const x = box.x - box.width / 2, y = box.y - box.height / 2;
      const grp = svgEl("g", { class: "node " + nodeClass(n), "data-name": n.id }, this.vp);
      svgEl("rect", { x, y, width: box.width, height: box.height, rx: 4 }, grp);
      m.lines.forEach((line, i) => {
        svgEl("text", { class: i === 0 ? "name" : "", x: x + PAD_X, y: y + PAD_Y + 11 + i * LINE_H }, grp)
          .textContent = line;
      });
      const tip = [n.hlo || n.id];
      if (n.src) tip.push("source: " + n.src);
      svgEl("title", {}, grp).textContent = tip.join("\n");
      if (expandable(n)) {
        const bx = x + box.width - 12, by = y + 9;
        svgEl("circle", { class: "badge", cx: bx, cy: by, r: 6 }, grp);
        svgEl("text", { class: "badge-t", x: bx - 3.6, y: by + 4 }, grp).textContent = "+";
        const badge = svgEl("circle", { cx: bx, cy: by, r: 8, fill: "transparent", class: "badge-hit" }, grp);
        badge.addEventListener("click", (ev) => { ev.stopPropagation(); this.select(n.id); toggle(n.id, true); });
      }
      grp.addEventListener("click", (ev) => {
        ev.stopPropagation();
        this.select(n.id);
        if (expandable(n) && n.cls !== "fusion") toggle(n.id, true);
      });
      grp.addEventListener("dblclick", (ev) => { ev.stopPropagation(); if (expandable(n)) toggle(n.id, true); });
      if (n.id === this.selected) grp.classList.add("selected");
    }

    select(name) {
      this.selected = name;
      for (const e of this.svg.querySelectorAll(".selected")) e.classList.remove("selected");
      for (const e of this.svg.querySelectorAll(`[data-name="${CSS.escape(name)}"]`)) e.classList.add("selected");
      showNode(this, name);
    }

    /* ----- pan and zoom ----- */
    apply() { this.vp.setAttribute("transform", `translate(${this.t.x},${this.t.y}) scale(${this.t.k})`); }
    fitScale() {
      const gw = this.g.graph().width || 1, gh = this.g.graph().height || 1;
      const r = this.svg.getBoundingClientRect();
      return Math.min(1.4, Math.max(0.05, Math.min((r.width || 800) / gw, (r.height || 600) / gh) * 0.96));
    }
    fit() {
      const gw = this.g.graph().width || 1, gh = this.g.graph().height || 1;
      const r = this.svg.getBoundingClientRect();
      const W = r.width || 800, H = r.height || 600;
      const k = this.fitScale();
      this.t = { k, x: (W - gw * k) / 2, y: Math.max(4, (H - gh * k) / 2) };
      this.apply();
    }
    installPanZoom() {
      const svg = this.svg;
      let drag = null;
      svg.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const r = svg.getBoundingClientRect();
        const px = ev.clientX - r.left, py = ev.clientY - r.top;
        const f = Math.exp(-ev.deltaY * 0.0015);
        const k = Math.min(6, Math.max(0.03, this.t.k * f));
        this.t.x = px - (px - this.t.x) * (k / this.t.k);
        this.t.y = py - (py - this.t.y) * (k / this.t.k);
        this.t.k = k;
        this.apply();
      }, { passive: false });
      svg.addEventListener("mousedown", (ev) => {
        drag = { x: ev.clientX, y: ev.clientY, tx: this.t.x, ty: this.t.y };
        svg.classList.add("dragging");
      });
      window.addEventListener("mousemove", (ev) => {
        if (!drag) return;
        this.t.x = drag.tx + ev.clientX - drag.x;
        this.t.y = drag.ty + ev.clientY - drag.y;
        this.apply();
      });
      window.addEventListener("mouseup", () => { drag = null; svg.classList.remove("dragging"); });
    }

    /* Expand every collapsed ancestor of `name` (its callers' chain). */
    reveal(name) {
      const hit = this.nodes.get(name);
      if (!hit) return false;
      for (let comp = hit.comp; this.callerOf.has(comp);) {
        const caller = this.callerOf.get(comp);
        this.expanded.add(caller);
        comp = this.nodes.get(caller).comp;
      }
      return true;
    }
  }

  /* ----- expansion (linked across panes by instruction name) ----- */
  function toggle(name, open, only) {
    for (const p of Object.values(panes)) {
      if (only && p.key !== only) continue;
      const hit = p.nodes.get(name);
      if (!hit || !expandable(hit.node)) continue;
      const isOpen = p.expanded.has(name);
      if (isOpen === open) continue;
      if (open) {
        p.expanded.add(name);
        const n = p.visibleCount(p.view.entry);
        if (n > MAX_VISIBLE) {
          p.expanded.delete(name);
          tooMany(p, name, n);
          continue;
        }
        if (hit.node.cls !== "fusion") p.callees(hit.node).forEach((c) => p.autoExpand(c));
      } else p.expanded.delete(name);
      p.render(name);
    }
  }

  /* ----- side panel ----- */
  const panel = document.getElementById("panel");
  const body = document.getElementById("panel-body");
  document.getElementById("panel-close").addEventListener("click", () => { panel.hidden = true; });

  function reasonText(r) {
    let s = (r.pass ? r.pass + ": " : "") + (r.reason || "(no reason recorded)");
    if (r.setting) s += ` [setting: ${r.setting}]`;
    else if (r.rule) s += ` [rule: ${r.rule}]`;
    const figs = Object.entries(r.figures || {});
    if (figs.length) s += " {" + figs.map(([k, v]) => `${k}: ${v}`).join(", ") + "}";
    return s;
  }
  /* "dir/file.py:12 (fn)" -> "file.py:12" for the ops table (the full text is under Source lines). */
  function shortSource(src) { return (src || "").replace(/ \(.*\)$/, "").replace(/^.*\//, ""); }
  function section(title) { body.appendChild(htmlEl("h3", {}, title)); }
  function para(text, cls) { const p = htmlEl("div", cls ? { class: cls } : {}, text); body.appendChild(p); return p; }
  function pre(text) { body.appendChild(htmlEl("pre", {}, text)); }
  function link(pane, name) {
    const a = htmlEl("a", {}, name);
    a.addEventListener("click", () => focusName(pane, name));
    return a;
  }
  function table(head, rows) {
    const t = htmlEl("table");
    const tr = htmlEl("tr");
    head.forEach((h) => tr.appendChild(htmlEl("th", {}, h)));
    t.appendChild(tr);
    for (const row of rows) {
      const r = htmlEl("tr");
      row.forEach((c) => r.appendChild(htmlEl("td", {}, c)));
      t.appendChild(r);
    }
    body.appendChild(t);
  }
  function open(title, sub) {
    body.textContent = "";
    panel.hidden = false;
    body.appendChild(htmlEl("h2", {}, title));
    if (sub) para(sub, "sub");
  }

  function boundaryBlock(pane, b) {
    const d = htmlEl("div", { class: "reason cat-" + (b.category || "fusion") });
    d.appendChild(htmlEl("b", {}, (b.category || "fusion") + ": "));
    d.appendChild(pane.nodes.has(b.from) ? link(pane, b.from) : document.createTextNode(b.from));
    d.appendChild(document.createTextNode(" → "));
    d.appendChild(pane.nodes.has(b.to) ? link(pane, b.to) : document.createTextNode(b.to));
    if (b.path.length > 2) d.appendChild(document.createTextNode(` (through ${b.path.slice(1, -1).join(", ")})`));
    const facts = [];
    if (b.value) facts.push("value " + b.value);
    if (b.bytes !== undefined) facts.push(b.bytes + " bytes");
    if (b.source) facts.push("from " + b.source);
    if (b.consumer_source) facts.push("read at " + b.consumer_source);
    if (facts.length) d.appendChild(htmlEl("div", { class: "sub" }, facts.join(" · ")));
    b.reasons.forEach((r, i) => d.appendChild(htmlEl("div", i ? { class: "sub" } : {},
      (i === 1 ? "earlier: " : i ? "         " : "") + reasonText(r))));
    if (b.why) d.appendChild(htmlEl("div", {}, "why: " + b.why));
    for (const f of (b.fixes || [])) d.appendChild(htmlEl("div", { class: "fix" }, "fix: " + f));
    body.appendChild(d);
  }

  function showBoundaries(pane, idxs, grp) {
    for (const e of pane.svg.querySelectorAll(".selected")) e.classList.remove("selected");
    grp.classList.add("selected");
    open("Fusion boundary", `${pane.view.label}: the value goes through memory between two kernels`);
    for (const i of idxs) boundaryBlock(pane, pane.view.boundaries[i]);
  }

  function showNode(pane, name) {
    const hit = pane.nodes.get(name);
    if (!hit) return;
    const n = hit.node;
    open(n.id, `${n.op}${n.kind ? " (" + n.kind + ")" : ""} · ${n.shape} · in ${hit.comp} · ${pane.view.label}`);
    if (n.calls) {
      const isOpen = pane.expanded.has(n.id);
      const btn = htmlEl("button", {}, isOpen ? "Collapse" : "Expand");
      btn.addEventListener("click", () => toggle(n.id, !isOpen));
      body.appendChild(btn);
    }
    if (n.op === "while" && pane.view.kernels.loops[n.id] !== undefined) {
      para(`${pane.view.kernels.loops[n.id]} kernel(s) per iteration (body and condition)`);
    }
    section("Source");
    para(n.src || "(no source location in the metadata)", n.src ? "" : "muted");
    if (n.op_name) para("op_name: " + n.op_name, "sub");
    if (n.ops) {
      section(`Ops (${n.ops.length})`);
      table(["name", "op", "shape", "source"], n.ops.map((o) => [o[0], o[1], o[2], shortSource(o[3])]));
      const lines = new Map();
      for (const o of n.ops) if (o[3]) lines.set(o[3], (lines.get(o[3]) || 0) + 1);
      section(`Source lines (${lines.size})`);
      if (lines.size) table(["line", "ops"], [...lines.entries()].map(([l, c]) => [l, String(c)]));
      else para("(the fused ops carry no source locations)", "muted");
    }
    const bs = pane.view.boundaries.filter((b) => b.from === n.id || b.to === n.id);
    if (bs.length) {
      section(`Fusion boundaries (${bs.length})`);
      bs.forEach((b) => boundaryBlock(pane, b));
    }
    const evs = pane.view.events[n.id] || [];
    if (evs.length) {
      section("Fusion decisions (latest first)");
      for (const e of evs) {
        body.appendChild(htmlEl("div", { class: "reason" + (e.verdict === "fused" ? " ok" : "") },
          `${e.verdict} ${e.producer} → ${e.consumer}: ` + reasonText(e)));
      }
    }
    section("HLO");
    pre(n.hlo);
    if (n.c) {
      section("Generated C");
      pre(n.c);
    } else if (n.cls === "fusion" || n.cls === "kernel") {
      if (pane.key === "after") para("(no generated C: the CPU backend is not available or did not lower this kernel)", "muted");
    }
  }

  function tooMany(pane, name, n) {
    open("Not expanded: " + name, `${pane.view.label}: expanding it would draw ${n} nodes ` +
      `(the limit is ${MAX_VISIBLE}, beyond which the layout takes seconds). Collapse other ` +
      "loops or fusions first, or use “find instruction” to jump to one op.");
  }

  function focusName(pane, name) {
    if (!pane.nodes.has(name)) return false;
    const hidden = !pane.findId(name);
    if (hidden) { pane.reveal(name); pane.render(); }
    const p = pane.graphPos(name);
    if (p) {
      const r = pane.svg.getBoundingClientRect();
      pane.t.k = Math.max(pane.t.k, 0.8);
      pane.t.x = r.width / 2 - p.x * pane.t.k;
      pane.t.y = r.height / 3 - p.y * pane.t.k;
      pane.apply();
    }
    pane.select(name);
    return true;
  }

  /* ----- page ----- */
  document.getElementById("title").textContent = DATA.title;
  if (DATA.notes && DATA.notes.length) document.getElementById("title").title = DATA.notes.join("\n");
  const noteEl = document.getElementById("notes");
  if (noteEl) noteEl.textContent = (DATA.notes || []).join(" · ");
  panes.before = new Pane("before", DATA.views.before, document.getElementById("pane-before"));
  panes.after = new Pane("after", DATA.views.after, document.getElementById("pane-after"));
  const main = document.getElementById("main");
  for (const btn of document.querySelectorAll(".seg button")) {
    btn.addEventListener("click", () => {
      main.className = "mode-" + btn.dataset.mode;
      for (const b of document.querySelectorAll(".seg button")) b.classList.toggle("on", b === btn);
      for (const p of Object.values(panes)) p.fit();
    });
  }
  document.getElementById("expand-fusions").addEventListener("click", () => {
    for (const p of Object.values(panes)) {
      const shown = [...p.nodes.values()].filter((h) => h.node.cls === "fusion" && p.findId(h.node.id))
        .map((h) => h.node).sort((a, b) => a.ops.length - b.ops.length);
      let total = p.visibleCount(p.view.entry);
      for (const f of shown) {
        const extra = p.visibleCount(f.calls.fused) - 1;
        if (total + extra > MAX_VISIBLE) { tooMany(p, f.id, total + extra); break; }
        p.expanded.add(f.id);
        total += extra;
      }
      p.render();
    }
  });
  document.getElementById("collapse-all").addEventListener("click", () => {
    for (const p of Object.values(panes)) { p.expanded.clear(); p.render(); }
  });
  document.getElementById("show-constants").addEventListener("change", (ev) => {
    settings.showConstants = ev.target.checked;
    for (const p of Object.values(panes)) p.render();
  });
  document.getElementById("show-gte").addEventListener("change", (ev) => {
    settings.showGte = ev.target.checked;
    for (const p of Object.values(panes)) p.render();
  });
  document.getElementById("fit").addEventListener("click", () => { for (const p of Object.values(panes)) p.fit(); });
  const names = document.getElementById("names");
  for (const name of [...panes.after.nodes.keys()].sort()) names.appendChild(htmlEl("option", { value: name }));
  document.getElementById("find").addEventListener("change", (ev) => {
    const name = ev.target.value.trim();
    for (const key of ["after", "before"]) if (focusName(panes[key], name)) break;
  });
  window.addEventListener("resize", () => { for (const p of Object.values(panes)) p.fit(); });
  for (const p of Object.values(panes)) p.render();

  /* For scripted use and tests: hlofuseViz.expand("after", "while.74"). */
  window.hlofuseViz = {
    panes,
    expand: (key, name) => { panes[key].reveal(name); panes[key].render(); toggle(name, true, key); },
    select: (key, name) => focusName(panes[key], name),
  };
  document.body.dataset.ready = "1";
})();
