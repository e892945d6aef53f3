// Live updates for a conversation page: the server renders every element;
// this script only sends messages without reloading and applies the
// server-sent events (add or replace elements by ID, append output).
(() => {
  "use strict";
  const body = document.body;
  const form = document.getElementById("composer");
  const input = form.querySelector("textarea");
  const errorBox = document.getElementById("error");

  const grow = () => { input.style.height = "auto"; input.style.height = Math.min(input.scrollHeight, 200) + "px"; };
  input.addEventListener("input", grow);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (input.value.trim() !== "" && !body.classList.contains("running")) form.requestSubmit();
    }
  });

  const conv = body.dataset.conv;
  if (!conv) return; // new chat: the form posts normally and redirects

  const chat = document.getElementById("chat");
  const trace = document.getElementById("trace");
  const chatScroll = document.getElementById("chat-scroll");
  const usage = document.getElementById("usage");
  const stopButton = document.getElementById("stop");

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
    } else {
      body.classList.remove("running");
      errorBox.textContent = (await r.text()).trim();
    }
  });

  // Keep a panel scrolled to the bottom if it was there.
  const stick = (el, fn) => {
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
    fn();
    if (atBottom) el.scrollTop = el.scrollHeight;
  };

  const upsert = (panel, item) => {
    const old = document.getElementById(item.id);
    if (old && old.dataset.v === item.v) return;
    const t = document.createElement("template");
    t.innerHTML = item.html.trim();
    const el = t.content.firstElementChild;
    if (old) old.replaceWith(el);
    else if (panel === trace) trace.insertBefore(el, trace.querySelector(".trace-empty"));
    else panel.appendChild(el);
  };

  const setState = (s) => {
    body.classList.toggle("running", s.running);
    usage.innerHTML = s.usage;
  };

  const events = new EventSource(`/c/${conv}/events`);
  events.addEventListener("sync", (e) => {
    const d = JSON.parse(e.data);
    stick(chatScroll, () => d.chat.forEach((i) => upsert(chat, i)));
    stick(trace, () => d.trace.forEach((i) => upsert(trace, i)));
    setState(d.state);
  });
  events.addEventListener("item", (e) => {
    const d = JSON.parse(e.data);
    if (d.panel === "trace") stick(trace, () => upsert(trace, d));
    else stick(chatScroll, () => upsert(chat, d));
  });
  events.addEventListener("out", (e) => {
    const d = JSON.parse(e.data);
    const run = document.getElementById(d.id);
    if (!run) return;
    const con = run.querySelector(".console");
    stick(con, () => {
      const last = con.lastElementChild;
      if (last && last.className === d.kind) last.append(d.text);
      else {
        const span = document.createElement("span");
        span.className = d.kind;
        span.textContent = d.text;
        con.appendChild(span);
      }
    });
  });
  events.addEventListener("state", (e) => setState(JSON.parse(e.data)));

  // A chip in the chat shows its call in the trace.
  chat.addEventListener("click", (e) => {
    const chip = e.target.closest(".chip");
    if (!chip) return;
    const run = document.getElementById("run-" + chip.dataset.call);
    if (!run) return;
    e.preventDefault();
    run.scrollIntoView({ behavior: "smooth", block: "start" });
    run.classList.add("flash");
    setTimeout(() => run.classList.remove("flash"), 1200);
  });

  chatScroll.scrollTop = chatScroll.scrollHeight;
  trace.scrollTop = trace.scrollHeight;
})();
