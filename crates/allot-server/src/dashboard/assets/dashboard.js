// Allot dashboard: in-place refresh of <main>, following attempt logs, and
// confirmation of destructive forms. Plain script, no dependencies; every
// page works without it (forms post, links navigate), it only keeps pages
// current without a full reload.
"use strict";
(function () {
  const main = document.getElementById("main");

  // Refresh <main> every data-refresh seconds while the tab is visible,
  // unless the user is typing in a form, a form holds input not yet sent,
  // or text is selected in it.
  if (main) main.addEventListener("input", (ev) => { if (ev.target.form) ev.target.form.dataset.dirty = "1"; });
  function busy() {
    if (main.querySelector("form[data-dirty]")) return true;
    const a = document.activeElement;
    if (a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return true;
    const sel = window.getSelection();
    return sel && !sel.isCollapsed && main.contains(sel.anchorNode);
  }
  async function refresh() {
    if (document.visibilityState !== "visible" || busy()) return;
    let r;
    try {
      r = await fetch(location.pathname + location.search, {
        headers: { "X-Allot-Partial": "1" },
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch (e) {
      return; // the server is restarting: try again next time
    }
    if (r.status === 401) { location.reload(); return; }
    if (!r.ok) return;
    const html = await r.text();
    const focused = document.activeElement && document.activeElement.id;
    const follows = saveFollows();
    main.innerHTML = html;
    restoreFollows(follows);
    if (focused) { const el = document.getElementById(focused); if (el) el.focus({ preventScroll: true }); }
    main.dispatchEvent(new Event("allot:refreshed"));
  }
  const every = main && parseInt(main.dataset.refresh || "0", 10);
  if (every > 0) setInterval(refresh, every * 1000);

  // Logs: <pre data-follow="URL"> is filled from URL?offset=N and followed
  // while the server says the attempt runs (X-Log-Done absent).
  const followers = new Map();
  // A refresh replaces <main>: a log that follows the same URL keeps what
  // it has read and its offset; a new one (the next attempt) starts over.
  function saveFollows() {
    const out = new Map();
    main.querySelectorAll("pre[data-follow]").forEach((p) =>
      out.set(p.id, { url: p.dataset.follow, text: p.textContent, offset: p.dataset.offset, top: p.scrollTop }));
    return out;
  }
  function restoreFollows(saved) {
    main.querySelectorAll("pre[data-follow]").forEach((p) => {
      const s = saved.get(p.id);
      if (s && s.url === p.dataset.follow) {
        p.textContent = s.text;
        p.dataset.offset = s.offset;
        p.scrollTop = s.top;
      }
      follow(p);
    });
  }
  function follow(pre) {
    if (followers.has(pre.id) && followers.get(pre.id).pre === pre) return;
    const state = { pre, offset: parseInt(pre.dataset.offset || "0", 10), done: false };
    followers.set(pre.id, state);
    const step = async () => {
      if (!document.body.contains(pre)) { if (followers.get(pre.id) === state) followers.delete(pre.id); return; }
      const sep = pre.dataset.follow.includes("?") ? "&" : "?";
      try {
        const r = await fetch(pre.dataset.follow + sep + "offset=" + state.offset, { credentials: "same-origin", cache: "no-store" });
        if (r.status === 401) { location.reload(); return; }
        if (r.ok) {
          const text = await r.text();
          const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          if (text) pre.textContent += text;
          state.offset = parseInt(r.headers.get("X-Log-Offset") || String(state.offset), 10);
          pre.dataset.offset = String(state.offset);
          if (atBottom) pre.scrollTop = pre.scrollHeight;
          if (r.headers.get("X-Log-Done")) { state.done = true; const s = document.getElementById(pre.id + "-status"); if (s) s.textContent = "ended"; return; }
        }
      } catch (e) { /* try again */ }
      setTimeout(step, 2000);
    };
    step();
  }
  if (main) main.querySelectorAll("pre[data-follow]").forEach(follow);

  // Forms with data-confirm ask first.
  document.addEventListener("submit", (ev) => {
    const f = ev.target;
    if (f.dataset && f.dataset.confirm && !window.confirm(f.dataset.confirm)) ev.preventDefault();
  });
})();
