// Keyboard and screen reader use. A swap that replaces the control in focus (Pin, Unpin,
// the branch arrows ‹ ›, "More conversations", a message's Regenerate or Fork) would drop
// the focus to the page, and a keyboard user back to its top: the focus goes to that
// control's replacement instead (or to the next thing to read). The sidebar's search
// results are reached from the search box with the arrow keys.
(() => {
  "use strict";

  function first(...selectors) {
    for (const selector of selectors) {
      const found = document.querySelector(selector);
      if (found) return found;
    }
    return null;
  }

  // Where the focus goes once a swap has replaced `active`, worked out before the swap
  // (while `active` still says what it was): a function, or null for a swap that keeps it.
  function replacementOf(active) {
    if (!active || !active.closest) return null;
    if (active.classList.contains("more-conversations")) {
      const before = document.querySelectorAll("#sidebar nav a").length;
      // The first conversation the new page added, else the next "More conversations".
      return () => document.querySelectorAll("#sidebar nav a")[before] || first("#sidebar nav .more-conversations");
    }
    const message = active.closest("#messages .message");
    if (!message) return null;
    const action = active.dataset.action;
    if (action === "pin" || action === "unpin") {
      const id = message.id;
      return () => first(`#${id} [data-action="pin"]`, `#${id} [data-action="unpin"]`);
    }
    if (action === "branch" && active.dataset.to) {
      const shown = `#m${active.dataset.to}`;
      const direction = active.dataset.direction;
      return () => first(
        `${shown} [data-action="branch"][data-direction="${direction}"]:not([disabled])`,
        `${shown} [data-action="branch"]:not([disabled])`,
        `${shown} [data-action="edit"]`,
      );
    }
    // Regenerate, Fork, an edit sent: the pane is new, the composer is what comes next.
    return () => first("#composer textarea");
  }

  function focusLost() {
    const active = document.activeElement;
    return !active || active === document.body || !active.isConnected;
  }

  let refocus = null;

  document.addEventListener("htmx:before:swap", () => {
    refocus = replacementOf(document.activeElement);
  });

  document.addEventListener("htmx:after:swap", () => {
    const find = refocus;
    refocus = null;
    if (!find || !focusLost()) return;
    const target = find();
    if (target) target.focus();
  });

  // The search box's results: ArrowDown from the box to the first, ArrowUp and ArrowDown
  // between them (ArrowUp from the first back to the box), Home and End to the ends.
  document.addEventListener("keydown", (event) => {
    if (!["ArrowDown", "ArrowUp", "Home", "End"].includes(event.key)) return;
    const box = document.getElementById("search-q");
    const hits = Array.from(document.querySelectorAll("#search-results a"));
    if (!box || !hits.length) return;
    if (event.target === box) {
      if (event.key !== "ArrowDown") return;
      event.preventDefault();
      hits[0].focus();
      return;
    }
    const at = hits.indexOf(event.target);
    if (at < 0) return;
    event.preventDefault();
    if (event.key === "ArrowDown") hits[Math.min(at + 1, hits.length - 1)].focus();
    else if (event.key === "ArrowUp") (at === 0 ? box : hits[at - 1]).focus();
    else if (event.key === "Home") hits[0].focus();
    else hits[hits.length - 1].focus();
  });
})();
