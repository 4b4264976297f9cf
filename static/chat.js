// The few behaviours htmx does not cover: Enter to send, the composer's busy state while an
// answer streams, keeping the newest message in view, highlighting left-out turns, editing a
// message in place (Enter sends, Escape cancels) and copying a message.
(() => {
  "use strict";

  const streaming = () => document.querySelector('[data-role="assistant"][data-status="streaming"]');

  let wasBusy = false;

  function syncComposer() {
    const form = document.getElementById("composer");
    if (!form) return;
    const busy = Boolean(streaming());
    form.dataset.busy = String(busy);
    form.querySelector("textarea").disabled = busy;
    form.querySelector('[data-action="send"]').disabled = busy;
    const stop = form.querySelector('[data-action="stop"]');
    stop.hidden = !busy;
    // Disabling the box (or hiding Stop) drops the focus; when the answer ends, give it back
    // to the box, unless the user has moved on to something else meanwhile.
    const lost = !document.activeElement || document.activeElement === document.body;
    if (wasBusy && !busy && (lost || document.activeElement === stop)) {
      form.querySelector("textarea").focus();
    }
    wasBusy = busy;
  }

  function nearBottom(box) {
    return box.scrollHeight - box.scrollTop - box.clientHeight < 120;
  }

  function scrollToBottom() {
    const box = document.getElementById("messages");
    if (box) box.scrollTop = box.scrollHeight;
  }

  // A trim marker carries the spans of messages its send left out, as the server stored them
  // when it sent: light up those, except turns the server marks as never sent (a failed
  // answer lying among the left-out turns was not missed by the model).
  function highlightLeftOut(marker) {
    document.querySelectorAll(".message.left-out").forEach((el) => el.classList.remove("left-out"));
    if (!marker.open) return;
    let spans = [];
    try {
      spans = JSON.parse(marker.dataset.leftOut || "[]");
    } catch (_) {
      return;
    }
    let first = null;
    document.querySelectorAll(".message[data-seq]").forEach((el) => {
      const seq = Number(el.dataset.seq);
      if (el.hasAttribute("data-never-sent")) return;
      if (!spans.some(([from, to]) => seq >= from && seq <= to)) return;
      el.classList.add("left-out");
      first = first || el;
    });
    if (first) first.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  function messageId(element) {
    return element.closest(".message").dataset.messageId;
  }

  // Regenerate, Fork and "‹ i/n ›" ask the server through htmx; #message-actions carries
  // where their errors go, and the messages pane is what comes back (Fork redirects).
  function act(path) {
    const actions = document.getElementById("message-actions");
    return htmx.ajax("POST", actions.dataset.base + path, {
      source: actions,
      target: "#messages",
      swap: "innerHTML",
    });
  }

  function startEdit(message) {
    if (message.querySelector(".edit-form")) return;
    const actions = document.getElementById("message-actions");
    const form = document.getElementById("edit-form").content.firstElementChild.cloneNode(true);
    const area = form.querySelector("textarea");
    // A user's message is shown as escaped plain text: its text is the message itself.
    area.value = message.querySelector(".content").textContent;
    form.setAttribute("hx-post", `${actions.dataset.base}/edit/${message.dataset.messageId}`);
    message.querySelector(".content").after(form);
    message.classList.add("editing");
    htmx.process(form);
    area.focus();
    area.setSelectionRange(area.value.length, area.value.length);
  }

  function cancelEdit(form) {
    const message = form.closest(".message");
    form.remove();
    message.classList.remove("editing");
    const edit = message.querySelector('[data-action="edit"]');
    if (edit) edit.focus();
  }

  async function copyMessage(button) {
    const content = button.closest(".message").querySelector(".content");
    try {
      await navigator.clipboard.writeText(content.innerText.trim());
      button.dataset.copied = "true";
      button.textContent = "Copied";
      setTimeout(() => {
        delete button.dataset.copied;
        button.textContent = "Copy";
      }, 1500);
    } catch (_) {
      button.textContent = "Copy failed";
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("button[data-action]");
    if (!button || !button.closest("#messages")) return;
    const action = button.dataset.action;
    if (action === "edit") startEdit(button.closest(".message"));
    else if (action === "cancel-edit") cancelEdit(button.closest(".edit-form"));
    else if (action === "copy") copyMessage(button);
    else if (action === "regenerate") act(`/regenerate/${messageId(button)}`);
    else if (action === "fork") act(`/fork/${messageId(button)}`);
    else if (action === "branch" && button.dataset.to) act(`/branch/${button.dataset.to}`);
  });

  document.addEventListener("keydown", (event) => {
    const area = event.target;
    if (!(area instanceof HTMLTextAreaElement) || area.name !== "content") return;
    if (event.key === "Escape" && area.form && area.form.classList.contains("edit-form")) {
      event.preventDefault();
      cancelEdit(area.form);
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (area.value.trim() && !area.disabled) area.form.requestSubmit();
    }
  });

  document.addEventListener("toggle", (event) => {
    if (event.target.matches && event.target.matches(".trim-marker")) highlightLeftOut(event.target);
  }, true);

  let stickToBottom = true;
  document.addEventListener("htmx:before:swap", () => {
    const box = document.getElementById("messages");
    stickToBottom = box ? nearBottom(box) : true;
  });

  document.addEventListener("htmx:after:swap", (event) => {
    const ctx = event.detail && event.detail.ctx;
    const source = ctx && ctx.sourceElement;
    const ok = !(ctx && ctx.response && ctx.response.status >= 400);
    if (source && source.id === "composer" && ok) {
      source.reset();
      stickToBottom = true;
      document.getElementById("composer-error").replaceChildren();
    }
    if (stickToBottom) scrollToBottom();
    syncComposer();
  });

  document.addEventListener("htmx:sse:after:message", () => {
    if (stickToBottom) scrollToBottom();
    syncComposer();
  });
  document.addEventListener("htmx:sse:close", syncComposer);

  // The final snapshot morphs an answer without its hx-sse:connect attribute; htmx then cleans
  // the element up and hx-sse would reconnect a moment later, to an answer already finished,
  // whose final snapshot would re-render the turn again (closing a trim marker just opened).
  // Only a streaming answer reconnects.
  document.addEventListener("htmx:sse:before:connection", (event) => {
    const answer = event.target;
    if (answer.dataset && answer.dataset.role === "assistant" && answer.dataset.status !== "streaming") {
      event.preventDefault();
    }
  });

  // Deferred and loaded before htmx (base.html), this runs once the page is parsed and before
  // htmx observes anything: scrolled to the newest message first, the "load older" row at the
  // top is never revealed by the initial position.
  scrollToBottom();

  document.addEventListener("DOMContentLoaded", () => {
    scrollToBottom();
    syncComposer();
    const area = document.querySelector('#composer textarea');
    if (area && !area.disabled) area.focus();
  });
})();
