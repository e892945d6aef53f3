// Live updates for a conversation page: the server renders every element;
// this script only sends messages without reloading and applies the
// server-sent events (add or replace elements by ID, append output, show
// the model's answer as it is written). It also runs the layout's controls:
// the conversations overlay, the phone tabs and the figure zoom.
(() => {
  "use strict";
  const body = document.body;
  const form = document.getElementById("composer");
  const input = form.querySelector("textarea");
  const errorBox = document.getElementById("error");
  const zoom = document.getElementById("zoom");

  const grow = () => { input.style.height = "auto"; input.style.height = Math.min(input.scrollHeight, 200) + "px"; };
  input.addEventListener("input", grow);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (input.value.trim() !== "" && !body.classList.contains("running")) form.requestSubmit();
    }
  });

  // The conversations list as an overlay (medium and small windows).
  const toggleSide = (open) => body.classList.toggle("side-open", open);
  document.querySelectorAll("#menu, .col-head .menu").forEach((b) => b.addEventListener("click", () => toggleSide()));
  document.getElementById("scrim").addEventListener("click", () => toggleSide(false));

  // Phone tabs: the chat or the trace (the composer stays below both).
  const showTab = (name) => {
    body.classList.toggle("tab-trace", name === "trace");
    document.querySelectorAll("#tabs .tab").forEach((t) => t.setAttribute("aria-pressed", String(t.dataset.tab === name)));
  };
  document.querySelectorAll("#tabs .tab").forEach((t) => t.addEventListener("click", () => showTab(t.dataset.tab)));

  // A figure thumbnail opens full size.
  document.addEventListener("click", (e) => {
    const thumb = e.target.closest(".thumb");
    if (!thumb || !zoom.showModal) return;
    e.preventDefault();
    zoom.querySelector("img").src = thumb.getAttribute("href");
    zoom.showModal();
  });
  zoom.addEventListener("click", (e) => { if (e.target === zoom || e.target.tagName === "IMG") zoom.close(); });

  const conv = body.dataset.conv;
  if (!conv) return; // new chat: the form posts normally and redirects

  const chat = document.getElementById("chat");
  const trace = document.getElementById("trace");
  const chatScroll = document.getElementById("chat-scroll");
  const draft = document.querySelector("#draft .md");
  const usage = document.getElementById("usage");
  const sandbox = document.getElementById("sandbox");
  const stopButton = document.getElementById("stop");
  const tabCount = document.getElementById("tab-count");

  const post = (url, data) => fetch(url, {
    method: "POST",
    headers: { "X-Requested-With": "fetch" },
    body: data ? new URLSearchParams(data) : undefined,
  });

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (e.submitter === stopButton) { post(`/c/${conv}/stop`); return; }
    const text = input.value.trim();
    if (!text) return;
    errorBox.textContent = "";
    body.classList.add("running");
    const r = await post(form.action, { message: text });
    if (r.ok) {
      input.value = "";
      grow();
      follow.set(chatScroll, true);
      follow.set(trace, true);
    } else {
      body.classList.remove("running");
      errorBox.textContent = (await r.text()).trim();
    }
  });

  // Autoscroll: a panel follows new content while its reader is at the
  // bottom; one who scrolled up is left alone until they scroll back down.
  const follow = new Map([[chatScroll, true], [trace, true]]);
  const atBottom = (el) => el.scrollHeight - el.scrollTop - el.clientHeight < 60;
  let programmatic = false;
  const toBottom = (el) => {
    if (!follow.get(el)) return;
    programmatic = true;
    el.scrollTop = el.scrollHeight;
    requestAnimationFrame(() => { programmatic = false; });
  };
  for (const el of follow.keys()) {
    el.addEventListener("scroll", () => { if (!programmatic) follow.set(el, atBottom(el)); }, { passive: true });
    // Images and charts change the height when they load.
    el.addEventListener("load", (e) => {
      if (e.target.tagName === "IFRAME") e.target.dataset.loaded = "";
      toBottom(el);
    }, true);
  }
  const update = (el, fn) => { fn(); toBottom(el); };

  const upsert = (panel, item) => {
    const old = document.getElementById(item.id);
    if (old && old.dataset.v === item.v) return;
    const t = document.createElement("template");
    t.innerHTML = item.html.trim();
    const el = t.content.firstElementChild;
    if (old) old.replaceWith(el);
    else if (panel === trace) trace.insertBefore(el, trace.querySelector(".trace-empty"));
    else {
      panel.appendChild(el);
      if (el.classList.contains("assistant")) draft.textContent = "";
    }
  };

  const setState = (s) => {
    body.classList.toggle("running", s.running);
    if (!s.running) draft.textContent = "";
    usage.innerHTML = s.usage;
  };
  const countRuns = () => { const n = trace.querySelectorAll(".run-wrap").length; tabCount.textContent = n ? `(${n})` : ""; };

  const events = new EventSource(`/c/${conv}/events`);
  events.addEventListener("sandbox", (e) => { sandbox.innerHTML = JSON.parse(e.data).html; });
  events.addEventListener("sync", (e) => {
    const d = JSON.parse(e.data);
    draft.textContent = "";
    update(chatScroll, () => d.chat.forEach((i) => upsert(chat, i)));
    update(trace, () => d.trace.forEach((i) => upsert(trace, i)));
    setState(d.state);
    countRuns();
  });
  events.addEventListener("item", (e) => {
    const d = JSON.parse(e.data);
    if (d.panel === "trace") { update(trace, () => upsert(trace, d)); countRuns(); }
    else update(chatScroll, () => upsert(chat, d));
  });
  events.addEventListener("delta", (e) => {
    const d = JSON.parse(e.data);
    update(chatScroll, () => draft.append(d.text));
  });
  events.addEventListener("out", (e) => {
    const d = JSON.parse(e.data);
    const run = document.getElementById(d.id);
    if (!run) return;
    const con = run.querySelector(".console");
    const stuck = atBottom(con);
    const last = con.lastElementChild;
    if (last && last.className === d.kind) last.append(d.text);
    else {
      const span = document.createElement("span");
      span.className = d.kind;
      span.textContent = d.text;
      con.appendChild(span);
    }
    if (stuck) con.scrollTop = con.scrollHeight;
    toBottom(trace);
  });
  events.addEventListener("state", (e) => setState(JSON.parse(e.data)));

  // A chip in the chat shows its call in the trace.
  chat.addEventListener("click", (e) => {
    const chip = e.target.closest(".chip");
    if (!chip) return;
    const run = document.getElementById("run-" + chip.dataset.call);
    if (!run) return;
    e.preventDefault();
    showTab("trace");
    follow.set(trace, false);
    run.scrollIntoView({ behavior: "smooth", block: "start" });
    run.classList.add("flash");
    setTimeout(() => run.classList.remove("flash"), 1200);
  });

  countRuns();
  chatScroll.scrollTop = chatScroll.scrollHeight;
  trace.scrollTop = trace.scrollHeight;
})();
