// The dashboard's one script (docs/dashboard.md). Pages are rendered on the server; this
// keeps them live and sends what a person does to the JSON API, as any client does:
//
// - [data-live-src]: the parts of a page marked [data-live] are fetched again when the
//   page's event stream ([data-stream]) says something happened (and every
//   data-refresh-every ms, if set), and each is swapped in when its data-version changed
//   (a form being filled in is not redrawn otherwise);
// - [data-poll]: an element whose content is fetched again every data-poll-every ms;
// - [data-stream-log]: events of the stream are appended to a list, as text;
// - form[data-action], button[data-action]: confirmed, then POSTed as JSON (a form's
//   fields, a button's data-body or {}), same origin, with the session's CSRF header;
//   form[data-start-run] starts a run and opens its page;
// - form[data-sign-in], [data-sign-out]: the session cookie, exchanged for a token.
//
// Nothing here builds markup from text: server fragments are parsed as documents and
// their nodes moved in; event lines are set with textContent.
"use strict";

(function () {
  const csrf = () => {
    const meta = document.querySelector('meta[name="loops-csrf"]');
    return meta ? meta.content : "";
  };

  const notice = (text, failed) => {
    const box = document.getElementById("notice");
    if (!box) return;
    box.textContent = text;
    box.classList.toggle("failed", Boolean(failed));
  };

  async function send(method, url, body) {
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    const token = csrf();
    if (token) headers["X-Loops-CSRF"] = token;
    const response = await fetch(url, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let answer = null;
    const text = await response.text();
    try {
      answer = text ? JSON.parse(text) : null;
    } catch (err) {
      answer = { detail: text };
    }
    if (!response.ok) {
      const detail = answer && (answer.message || answer.detail);
      const said = typeof detail === "string" ? detail : JSON.stringify(detail);
      throw new Error(`${response.status}: ${said || response.statusText}`);
    }
    return answer;
  }

  // A form's fields as a JSON body: "a.b" names nest, numbers are numbers, [data-json]
  // fields are parsed, [data-only-changed] ones are left out unless edited, blanks are
  // left out.
  function bodyOf(form) {
    const body = {};
    for (const field of form.elements) {
      if (!field.name || field.disabled) continue;
      let value = field.value;
      if (field.hasAttribute("data-only-changed") && value === field.defaultValue) continue;
      if (value === "") continue;
      if (field.hasAttribute("data-json")) value = JSON.parse(value);
      else if (field.type === "number") value = Number(value);
      const path = field.name.split(".");
      let into = body;
      for (const key of path.slice(0, -1)) into = into[key] = into[key] || {};
      into[path[path.length - 1]] = value;
    }
    return body;
  }

  // --- live parts ------------------------------------------------------------------

  async function fetchDocument(url) {
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    return new DOMParser().parseFromString(await response.text(), "text/html");
  }

  async function refreshParts(root) {
    const fresh = await fetchDocument(root.dataset.liveSrc);
    for (const part of fresh.querySelectorAll("[data-live]")) {
      const name = part.dataset.live;
      const current = root.querySelector(`[data-live="${CSS.escape(name)}"]`);
      if (!current) continue;
      if (current.dataset.version === part.dataset.version) continue;
      const focused = current.contains(document.activeElement) ? document.activeElement.id : "";
      current.replaceWith(document.adoptNode(part));
      if (focused) {
        const again = document.getElementById(focused);
        if (again) again.focus();
      }
    }
  }

  function liveRoot(root) {
    let timer = null;
    let busy = false;
    const refresh = () => {
      if (timer) return;
      timer = setTimeout(async () => {
        timer = null;
        if (busy) return refresh();
        busy = true;
        try {
          await refreshParts(root);
        } catch (err) {
          notice(`Could not refresh: ${err.message}`, true);
        } finally {
          busy = false;
        }
      }, 250);
    };
    root.refresh = refresh;
    // What changes without an event on the stream (a graph's task loops) is read again
    // on a timer, while the page is in view.
    const every = Number(root.dataset.refreshEvery || 0);
    if (every) {
      setInterval(() => {
        if (document.visibilityState === "visible") refresh();
      }, every);
    }
    const url = root.dataset.stream;
    if (!url) return;
    const log = root.dataset.log ? document.getElementById(root.dataset.log) : null;
    let after = Number(root.dataset.after || 0);
    const source = new EventSource(`${url}&after=${after}`);
    const names = (root.dataset.streamEvents || "").split(",").filter(Boolean);
    for (const name of names) {
      source.addEventListener(name, (message) => {
        if (name === "end") {
          source.close();
          refresh();
          return;
        }
        const seq = Number(message.lastEventId || 0);
        if (seq && seq <= after) return;
        after = seq || after;
        if (log) appendEvent(log, name, message.data);
        refresh();
      });
    }
    source.addEventListener("error", () => {
      // The browser reconnects by itself (with Last-Event-ID); a closed run's stream ends.
      if (source.readyState === EventSource.CLOSED) refresh();
    });
  }

  function appendEvent(log, name, data) {
    let event = {};
    try {
      event = JSON.parse(data);
    } catch (err) {
      event = {};
    }
    const item = document.createElement("li");
    item.dataset.seq = String(event.seq || "");
    const parts = [
      ["span", "seq", String(event.seq || "")],
      ["time", "", (event.ts || "").replace("T", " ").slice(0, 19)],
      ["span", "step", event.step || ""],
      ["strong", "", name],
      ["code", "", JSON.stringify(event.payload || {}).slice(0, 300)],
    ];
    for (const [tag, cls, text] of parts) {
      const node = document.createElement(tag);
      if (cls) node.className = cls;
      node.textContent = text;
      item.append(node, " ");
    }
    log.append(item);
  }

  // The fragment holds one [data-poll-part] (inside a table, for rows: the HTML parser
  // drops rows outside one); its children replace the element's when its version changed.
  function poll(element) {
    const every = Number(element.dataset.pollEvery || 5000);
    const tick = async () => {
      if (document.visibilityState === "visible") {
        try {
          const fresh = await fetchDocument(element.dataset.poll);
          const part = fresh.querySelector("[data-poll-part]");
          if (part && part.dataset.version !== element.dataset.version) {
            element.replaceChildren(...Array.from(part.childNodes, (n) => document.adoptNode(n)));
            element.dataset.version = part.dataset.version;
          }
        } catch (err) {
          notice(`Could not refresh: ${err.message}`, true);
        }
      }
      setTimeout(tick, every);
    };
    setTimeout(tick, every);
  }

  // --- actions ---------------------------------------------------------------------

  async function act(element, body) {
    const question = element.dataset.confirm;
    if (question && !window.confirm(question)) return;
    try {
      await send("POST", element.dataset.action, body);
      notice(`Done: ${element.dataset.done || element.dataset.action.split("/").pop()}`);
      const root = element.closest("[data-live-src]");
      if (root && root.refresh) root.refresh();
      else window.location.reload();
    } catch (err) {
      notice(`Refused: ${err.message}`, true);
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (button) {
      event.preventDefault();
      act(button, button.dataset.body ? JSON.parse(button.dataset.body) : {});
      return;
    }
    if (event.target.closest("[data-sign-out]")) {
      event.preventDefault();
      send("DELETE", "/ui/session").then(() => window.location.assign("/ui/sign-in"));
    }
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (form.matches("form[data-action]")) {
      event.preventDefault();
      let body;
      try {
        body = bodyOf(form);
      } catch (err) {
        notice(`Not sent: ${err.message}`, true);
        return;
      }
      act(form, body);
    } else if (form.matches("form[data-start-run]")) {
      event.preventDefault();
      if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
      try {
        const started = await send("POST", form.dataset.startRun, bodyOf(form));
        window.location.assign(`/ui/runs/${started.run_id}`);
      } catch (err) {
        notice(`Refused: ${err.message}`, true);
      }
    } else if (form.matches("form[data-sign-in]")) {
      event.preventDefault();
      try {
        await send("POST", "/ui/session", bodyOf(form));
        window.location.assign(form.dataset.next || "/ui/runs");
      } catch (err) {
        notice(`Not signed in: ${err.message}`, true);
      }
    }
  });

  document.addEventListener("DOMContentLoaded", () => {
    for (const root of document.querySelectorAll("[data-live-src]")) liveRoot(root);
    for (const element of document.querySelectorAll("[data-poll]")) poll(element);
  });
})();
