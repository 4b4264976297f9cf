// The time an answer has waited for the model's first word, where the engine says nothing
// of its reading of the prompt: "Waiting for the model: 12 s", once a second, until text
// comes (the line then goes). Not announced each second: the answer itself is.
(() => {
  "use strict";

  function tick() {
    document.querySelectorAll('[data-status="streaming"] .waited[data-since]').forEach((line) => {
      const answer = line.closest("[data-status]");
      const content = answer && answer.querySelector(".content");
      if (content && content.textContent.trim()) {
        line.remove();
        return;
      }
      const seconds = Math.max(0, Math.round((Date.now() - Date.parse(line.dataset.since)) / 1000));
      line.textContent = `Waiting for the model: ${seconds.toLocaleString()} s`;
    });
  }

  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);
})();
