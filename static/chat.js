// The few behaviours htmx does not cover: Enter to send, the composer's busy state while an
// answer streams, keeping the newest message in view, and highlighting left-out turns.
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
  // when it sent: light up exactly those, whatever their status.
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
      if (!spans.some(([from, to]) => seq >= from && seq <= to)) return;
      el.classList.add("left-out");
      first = first || el;
    });
    if (first) first.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  document.addEventListener("keydown", (event) => {
    const area = event.target;
    if (!(area instanceof HTMLTextAreaElement) || area.name !== "content") return;
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (area.value.trim() && !area.disabled) area.form.requestSubmit();
    }
  });

  // The copy control the server puts on every code block: copy the code as text.
  async function copyCode(button) {
    const code = button.closest(".code-block").querySelector("pre").innerText;
    try {
      await navigator.clipboard.writeText(code);
      button.textContent = "Copied";
    } catch (_) {
      button.textContent = "Copy failed";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest('[data-action="copy-code"]');
    if (button) copyCode(button);
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

  document.addEventListener("DOMContentLoaded", () => {
    scrollToBottom();
    syncComposer();
    const area = document.querySelector('#composer textarea');
    if (area && !area.disabled) area.focus();
  });
})();
