// The few behaviours htmx does not cover: Enter to send, the composer's busy state while an
// answer streams, keeping the newest message in view, highlighting left-out turns, editing a
// message in place (Enter sends, Escape cancels), copying a message or a code block, and
// drawing and sending a message's own controls.
(() => {
  "use strict";

  const streaming = () => document.querySelector('[data-role="assistant"][data-status="streaming"]');

  let wasBusy = false;

  // While an answer streams the box stays usable: the next message can be written (not
  // sent) meanwhile, and the focus never drops to the page.
  function syncComposer() {
    const form = document.getElementById("composer");
    if (!form) return;
    const busy = Boolean(streaming());
    form.dataset.busy = String(busy);
    const area = form.querySelector("textarea");
    const send = form.querySelector('[data-action="send"]');
    const stop = form.querySelector('[data-action="stop"]');
    // Disabling Send, or hiding Stop, would drop the focus to the page: keep it in the box.
    if (busy && document.activeElement === send) area.focus();
    // In an embed, only while the frame has the focus: never taken from the host page.
    const here = !document.querySelector(".chat.embed") || document.hasFocus();
    const lost = here && (!document.activeElement || document.activeElement === document.body);
    if (wasBusy && !busy && (lost || document.activeElement === stop)) area.focus();
    send.disabled = busy;
    stop.hidden = !busy;
    if (!busy) clearBusyNote();
    wasBusy = busy;
  }

  // On a phone the sidebar is a drawer over the chat.
  function openDrawer() {
    const app = document.querySelector(".app");
    if (!app) return;
    app.classList.add("drawer-open");
    document.querySelectorAll('[data-action="toggle-sidebar"]').forEach((b) => b.setAttribute("aria-expanded", "true"));
    const search = document.getElementById("search-q");
    if (search) search.focus();
  }

  function closeDrawer() {
    const app = document.querySelector(".app.drawer-open");
    if (!app) return false;
    app.classList.remove("drawer-open");
    const toggle = document.querySelector('[data-action="toggle-sidebar"]');
    if (toggle) {
      toggle.setAttribute("aria-expanded", "false");
      toggle.focus();
    }
    return true;
  }

  // The header's menu on a phone (Export, Delete): a button that opens and closes it;
  // Escape or a click elsewhere closes it.
  function toggleHeaderMenu(open) {
    const header = document.querySelector(".chat-header");
    const button = document.querySelector('[data-action="toggle-header-menu"]');
    if (!header || !button) return false;
    const was = header.classList.contains("menu-open");
    const now = open === undefined ? !was : open;
    header.classList.toggle("menu-open", now);
    button.setAttribute("aria-expanded", String(now));
    return was !== now;
  }

  // Where Enter's keys are not at hand (a phone, a touch screen), the box's placeholder is
  // the short one: "Enter sends" means nothing on a touch keyboard.
  const touchLike = window.matchMedia("(max-width: 767.98px), (pointer: coarse)");
  function fitPlaceholder() {
    const area = document.querySelector("#composer textarea[data-short-placeholder]");
    if (!area) return;
    if (!area.dataset.longPlaceholder) area.dataset.longPlaceholder = area.placeholder;
    area.placeholder = touchLike.matches ? area.dataset.shortPlaceholder : area.dataset.longPlaceholder;
  }
  touchLike.addEventListener("change", fitPlaceholder);

  function stopAnswer() {
    const stop = document.querySelector('#composer [data-action="stop"]');
    if (stop && !stop.hidden) stop.click();
  }

  function nearBottom(box) {
    return box.scrollHeight - box.scrollTop - box.clientHeight < 120;
  }

  function scrollToBottom() {
    const box = document.getElementById("messages");
    if (box) box.scrollTop = box.scrollHeight;
    syncScrollButton();
  }

  // "Scroll to the newest" shows only when the reader has scrolled up.
  function syncScrollButton() {
    const box = document.getElementById("messages");
    const button = document.querySelector('[data-action="scroll-bottom"]');
    if (box && button) button.hidden = nearBottom(box);
  }

  function leftOutSpans(marker) {
    try {
      return JSON.parse(marker.dataset.leftOut || "[]");
    } catch (_) {
      return [];
    }
  }

  // A trim marker carries the spans of messages its send left out, as the server stored them
  // when it sent: light up those, except turns the server marks as never sent (a failed
  // answer lying among the left-out turns was not missed by the model), and leave the view
  // where it is (they sit right above the cut line the reader is looking at).
  function highlightLeftOut(marker) {
    document.querySelectorAll(".message.left-out").forEach((el) => el.classList.remove("left-out"));
    document.querySelectorAll('[data-action="show-left-out"]').forEach((button) => {
      const owner = document.getElementById(button.dataset.marker);
      if (owner) nameShow(button, owner, marker.open && owner === marker.closest(".message"));
    });
    if (!marker.open) return;
    const spans = leftOutSpans(marker);
    document.querySelectorAll(".message[data-seq]").forEach((el) => {
      const seq = Number(el.dataset.seq);
      if (el.hasAttribute("data-never-sent")) return;
      if (spans.some(([from, to]) => seq >= from && seq <= to)) el.classList.add("left-out");
    });
  }

  // One cut line in the history, drawn from what the meter describes: the newest send, or
  // the next one while a preview (typing, a configuration switch) is shown. It sits right
  // below the last message that send leaves out, and is gone when it carries everything.
  // Only the newest trimmed turn shows its note; the others show on demand ("All notes").
  function placeCutLine() {
    const box = document.getElementById("messages");
    if (!box) return;
    const markers = box.querySelectorAll(".message[data-dropped-turns] .trim-marker");
    const newest = markers[markers.length - 1];
    markers.forEach((m) => m.closest(".message").classList.toggle("quiet-note", m !== newest));
    const meter = document.getElementById("meter");
    const words = meter ? meter.dataset.cutWords : "";
    const spans = meter ? leftOutSpans(meter) : [];
    let line = document.getElementById("cut-line");
    if (!words || !spans.length) {
      if (line) line.remove();
      return;
    }
    const boundary = Math.max(...spans.map((span) => span[1]));
    const below = Array.from(box.querySelectorAll(".message[data-seq]"))
      .find((el) => Number(el.dataset.seq) > boundary);
    if (!below) {
      if (line) line.remove();
      return;
    }
    if (!line) {
      line = document.createElement("div");
      line.id = "cut-line";
      line.className = "cut-line";
      line.setAttribute("role", "note");
      const text = document.createElement("span");
      text.className = "cut-words";
      const show = document.createElement("button");
      show.type = "button";
      show.className = "link";
      show.dataset.action = "show-left-out";
      show.textContent = "Show which";
      const notes = document.createElement("button");
      notes.type = "button";
      notes.className = "link";
      notes.dataset.action = "show-notes";
      notes.textContent = "All notes";
      notes.setAttribute("aria-pressed", "false");
      line.append(text, show, notes);
    }
    line.querySelector(".cut-words").textContent = words;
    line.setAttribute("aria-label", words);
    const show = line.querySelector('[data-action="show-left-out"]');
    const owner = newest ? newest.closest(".message") : null;
    show.hidden = !owner || meter.dataset.preview === "true";
    if (owner) {
      show.dataset.marker = owner.id;
      nameShow(show, owner, newest.open);
    }
    const notes = line.querySelector('[data-action="show-notes"]');
    notes.hidden = markers.length < 2;
    nameNotes(notes, markers.length, owner);
    // With a summary the model reads instead of the turns above, the line opens it.
    let read = line.querySelector('[data-action="open-summary"]');
    if (!read) {
      read = document.createElement("button");
      read.type = "button";
      read.className = "link";
      read.dataset.action = "open-summary";
      read.textContent = "Read the summary";
      line.insertBefore(read, show);
    }
    read.hidden = !meter.dataset.summary || !document.getElementById("summary-dialog");
    if (line.nextElementSibling !== below) box.insertBefore(line, below);
  }

  // "Show which" is a toggle: once the turns are highlighted it says "Hide which", and
  // aria-expanded says the same to a screen reader.
  function nameShow(show, owner, open) {
    const verb = open ? "Hide" : "Show";
    show.textContent = `${verb} which`;
    show.setAttribute("aria-expanded", String(open));
    show.setAttribute("aria-label", `${verb} which turns ${owner.dataset.turnName} was sent without`);
  }

  // The cut line's buttons are named after the turn they speak of ("Show which turns turn 7
  // was sent without"), so a screen reader's list of buttons tells them from every other.
  function nameNotes(notes, count, owner) {
    const all = document.getElementById("messages").classList.contains("all-notes");
    const newest = owner ? `${owner.dataset.turnName}'s` : "the newest";
    notes.setAttribute("aria-label", all
      ? `Fewer notes: only ${newest}, not all ${count} trimmed turns`
      : `All notes of the ${count} trimmed turns, not only ${newest}`);
  }

  // Continue goes on the newest answer only (the server refuses any other): once a turn
  // follows, a continuation or any send, the older answer's Continue is gone.
  function dropStaleContinue() {
    const box = document.getElementById("messages");
    if (!box) return;
    const articles = box.querySelectorAll("article.message");
    const newest = articles[articles.length - 1];
    box.querySelectorAll('[data-action="continue"]').forEach((button) => {
      if (button.closest("article.message") !== newest) button.remove();
    });
  }

  // The first turn names the conversation with a cut of its message; once its answer is
  // done, the model may write a better title. Asked once, held by the server until the
  // title changes: the header and the sidebar then show it (not while it is being edited).
  function awaitModelTitle() {
    const form = document.getElementById("title-form");
    const actions = document.getElementById("message-actions");
    const watch = document.getElementById("title-watch");
    if (!form || !actions || !watch || watch.dataset.asked) return;
    watch.dataset.asked = "true";
    const was = form.querySelector("input[name=title]").value;
    htmx.ajax("GET", `${actions.dataset.base}/title?was=${encodeURIComponent(was)}`, {
      source: watch,
      target: "#title-form",
      swap: "outerHTML",
    });
  }

  document.addEventListener("htmx:before:swap", (event) => {
    const ctx = event.detail && event.detail.ctx;
    const path = ctx && ctx.request && String(ctx.request.action || "");
    // A name being typed is never replaced under the fingers.
    const editing = document.activeElement && document.activeElement.id === "title";
    if (editing && /\/title\?was=/.test(path)) event.preventDefault();
  });

  function messageId(element) {
    return element.closest(".message").dataset.messageId;
  }

  // A message's controls ask the server through htmx; #message-actions carries the
  // conversation's address and where errors go. Regenerate, Fork and "‹ i/n ›" get the
  // messages pane back (Fork redirects); Pin and Unpin the message, a thumb its pair.
  function act(path, options = {}) {
    const actions = document.getElementById("message-actions");
    return htmx.ajax("POST", actions.dataset.base + path, {
      source: actions,
      target: "#messages",
      swap: "innerHTML",
      ...options,
    });
  }

  function pin(button) {
    const message = button.closest(".message");
    act(`/${button.dataset.action}/${message.dataset.messageId}`, { target: message, swap: "outerHTML" });
  }

  // Morphed, the pair keeps the pressed thumb (and the focus on it).
  function rate(button, value) {
    act(`/feedback/${messageId(button)}`, {
      target: button.closest(".feedback"),
      swap: "outerMorph",
      values: { value },
    });
  }

  // A message's Copy and Fork, Pin (Unpin) and Edit on a turn, and Regenerate on an answer
  // that did not fail act only through this script: it draws them into the empty `.tools`
  // the server leaves on each message (chat/_message_tools.html), on the page and on what a
  // swap brings, named after the message ("Copy answer 3"). A pinned turn's article says so
  // (class "pinned"). Fork opens a new conversation: not in an embed.
  function tool(action, text, label, more = {}) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link";
    button.dataset.action = action;
    button.setAttribute("aria-label", label);
    for (const [name, value] of Object.entries(more)) button.setAttribute(name, value);
    button.textContent = text;
    return button;
  }

  function pinTool(message, name) {
    return message.classList.contains("pinned")
      ? tool("unpin", "Unpin", `Unpin ${name}`, { "aria-pressed": "true", title: "Stop sending this turn every time" })
      : tool("pin", "Pin", `Pin ${name}`, {
        "aria-pressed": "false",
        title: "Send this turn on every later send, even when older turns are left out",
      });
  }

  // The thumbs of a finished answer, as chat/_feedback.html draws them (what a thumb gets
  // back is morphed over these): "Rate answer 3", "Good answer 3", pressed as stored.
  function thumbs(message) {
    const name = message.dataset.turnName;
    const number = name === "answer" ? "" : name.slice("answer".length);
    const group = document.createElement("span");
    group.className = "feedback";
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", `Rate ${number ? name : "this answer"}`);
    for (const [value, label] of [["up", "Good answer"], ["down", "Bad answer"]]) {
      const thumb = tool(`feedback-${value}`, "", `${label}${number}`, {
        title: label,
        "aria-pressed": String(message.dataset.feedback === value),
      });
      thumb.className = "link thumb";
      const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
      const use = document.createElementNS("http://www.w3.org/2000/svg", "use");
      use.setAttribute("href", `#thumb-${value}`);
      svg.append(use);
      thumb.append(svg);
      group.append(thumb);
    }
    return group;
  }

  function drawTools() {
    const box = document.getElementById("messages");
    const actions = document.getElementById("message-actions");
    if (!box || !actions) return;
    const ownPage = actions.dataset.base.startsWith("/c/");  // not an embed
    box.querySelectorAll(".message .tools:empty").forEach((tools) => {
      const message = tools.closest(".message");
      const name = message.dataset.turnName;
      const status = message.dataset.status;
      if (message.dataset.role === "user") tools.append(pinTool(message, name), tool("edit", "Edit", `Edit ${name}`));
      else if (!["failed", "interrupted"].includes(status)) {
        tools.append(tool("regenerate", "Regenerate", `Regenerate ${name}`));
      }
      tools.append(tool("copy", "Copy", `Copy ${name}`));
      if (ownPage) tools.append(tool("fork", "Fork", `Fork at ${name}`));
      if (ownPage && message.dataset.role === "assistant" && ["complete", "stopped"].includes(status)) {
        tools.append(thumbs(message));
      }
      tools.setAttribute("role", "toolbar");
      tools.setAttribute("aria-label", `Actions on ${name}`);
    });
    box.querySelectorAll(".message .tools").forEach((tools) => rove(tools));
  }

  // A message's tools are one Tab stop (a toolbar), so an exchange costs two stops, not
  // nine: Tab reaches the tool used last (the first at the start), the arrow keys, Home
  // and End move among them. A tool drawn again (a thumb answered, Pin become Unpin)
  // takes the place of the one it replaced.
  function rove(tools, current) {
    const buttons = [...tools.querySelectorAll("button:not([disabled])")];
    if (!buttons.length) return;
    const chosen = current || buttons.find((b) => b.dataset.current === "true") || buttons[0];
    for (const b of buttons) {
      b.tabIndex = b === chosen ? 0 : -1;
      b.dataset.current = String(b === chosen);
    }
  }

  document.addEventListener("focusin", (event) => {
    const tools = event.target.closest && event.target.closest("#messages .tools");
    if (tools && event.target instanceof HTMLButtonElement) rove(tools, event.target);
  });

  document.addEventListener("keydown", (event) => {
    const tools = event.target.closest && event.target.closest("#messages .tools");
    if (!tools || event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const buttons = [...tools.querySelectorAll("button:not([disabled])")];
    const at = buttons.indexOf(event.target);
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: buttons.length - 1 }[event.key];
    if (at < 0 || to === undefined) return;
    event.preventDefault();
    buttons[(to + buttons.length) % buttons.length].focus();
  });

  document.addEventListener("htmx:after:swap", () => {
    document.querySelectorAll("#messages .tools").forEach((tools) => rove(tools));
  });

  function startEdit(message) {
    if (message.querySelector(".edit-form")) return;
    const actions = document.getElementById("message-actions");
    const form = document.getElementById("edit-form").content.firstElementChild.cloneNode(true);
    const area = form.querySelector("textarea");
    // A user's message is shown as escaped plain text: its text is the message itself.
    area.value = messageText(message);
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

  // A message's own text: a user's message is its element's text, less the labels drawn
  // around an attached file (data-display-only); an answer is its text as rendered.
  function messageText(message) {
    const content = message.querySelector(".content");
    if (message.dataset.role !== "user") return content.innerText.trim();
    const copy = content.cloneNode(true);
    copy.querySelectorAll("[data-display-only]").forEach((label) => label.remove());
    return copy.textContent;
  }

  async function copyMessage(button) {
    try {
      await navigator.clipboard.writeText(messageText(button.closest(".message")).trim());
      // The name follows the word shown ("Copied turn 3"), as a screen reader hears it.
      const name = button.getAttribute("aria-label");
      button.dataset.copied = "true";
      button.textContent = "Copied";
      if (name) button.setAttribute("aria-label", name.replace(/^Copy\b/, "Copied"));
      setTimeout(() => {
        delete button.dataset.copied;
        button.textContent = "Copy";
        if (name) button.setAttribute("aria-label", name);
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
    else if (action === "pin" || action === "unpin") pin(button);
    else if (action === "feedback-up") rate(button, "up");
    else if (action === "feedback-down") rate(button, "down");
    else if (action === "approve-tool" || action === "deny-tool") decidedCall = button.closest(".tool-approval").dataset.callId;
  });

  // An answer's tool calls (_tool_calls.html). A part the user opened stays open while the
  // stream re-renders its answer; a call waiting for approval is said once through the
  // polite region, like an answer; after Allow or Deny, whose prompt then goes, the focus
  // moves to that call's part rather than being lost.
  const openTools = new Set();
  const askedCalls = new Set();
  let decidedCall = null;
  document.addEventListener("toggle", (event) => {
    const part = event.target;
    if (!part.matches || !part.matches(".tool-call")) return;
    if (part.open) openTools.add(part.id);
    else openTools.delete(part.id);
  }, true);
  function drawToolCalls() {
    openTools.forEach((id) => {
      const part = document.getElementById(id);
      if (part && !part.open) part.open = true;
    });
    document.querySelectorAll("#messages .tool-approval").forEach((prompt) => {
      if (askedCalls.has(prompt.dataset.callId)) return;
      askedCalls.add(prompt.dataset.callId);
      announce(`The model wants to run ${prompt.dataset.toolName}: Allow or Deny.`);
    });
    if (decidedCall === null) return;
    const still = [...document.querySelectorAll("#messages .tool-approval")].some((p) => p.dataset.callId === decidedCall);
    if (still) return;
    const part = [...document.querySelectorAll("#messages .tool-call")].find((p) => p.dataset.callId === decidedCall);
    decidedCall = null;
    const lost = !document.activeElement || document.activeElement === document.body;
    if (part && lost) part.querySelector("summary").focus();
  }


  // Escape cancels an edit in place; elsewhere it stops the answer being written, wherever
  // the focus is (but first closes the drawer on a phone).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.defaultPrevented) return;
    const area = event.target;
    if (area instanceof HTMLTextAreaElement && area.form && area.form.classList.contains("edit-form")) {
      event.preventDefault();
      cancelEdit(area.form);
      return;
    }
    if (closeDrawer()) return;
    if (toggleHeaderMenu(false)) {
      document.querySelector('[data-action="toggle-header-menu"]').focus();
      return;
    }
    stopAnswer();
  });

  // A box with a limit (the custom instructions in Settings) shows how much of it is used,
  // counted as the server counts: characters (not UTF-16 units), surrounding space aside.
  document.addEventListener("input", (event) => {
    const box = event.target;
    const counter = box.dataset && box.dataset.counter && document.getElementById(box.dataset.counter);
    if (!counter) return;
    const used = [...box.value.trim()].length;
    const most = Number(box.dataset.max);
    counter.textContent = `${used.toLocaleString("en")} of ${most.toLocaleString("en")} characters`;
    counter.classList.toggle("over", used > most);
  });

  // Shortcuts (docs/usage.md): Ctrl+Shift+O (⌘⇧O) starts a new conversation, Ctrl+Shift+;
  // (⌘⇧;) copies the newest answer, whole, as its Copy button does.
  document.addEventListener("keydown", (event) => {
    if (!(event.ctrlKey || event.metaKey) || !event.shiftKey || event.altKey) return;
    if (event.code === "KeyO") {
      const form = document.querySelector("form.new-conversation");
      if (!form) return;
      event.preventDefault();
      form.requestSubmit();
    } else if (event.code === "Semicolon") {
      const answers = document.querySelectorAll('#messages [data-role="assistant"]');
      const newest = answers[answers.length - 1];
      const copy = newest && newest.querySelector('[data-action="copy"]');
      if (!copy) return;
      event.preventDefault();
      copy.click();
      announce(`Copied ${newest.dataset.turnName}.`);
    }
  });

  // The paperclip (a label) is the attach control's Tab stop: Enter or Space on it opens
  // the file chooser, as a click does.
  document.addEventListener("keydown", (event) => {
    const attach = event.target.closest && event.target.closest('[data-action="attach"]');
    if (!attach || (event.key !== "Enter" && event.key !== " ")) return;
    event.preventDefault();
    document.getElementById(attach.htmlFor).click();
  });

  document.addEventListener("keydown", (event) => {
    const area = event.target;
    if (!(area instanceof HTMLTextAreaElement) || area.name !== "content") return;
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (!area.value.trim() && !hasFiles(area.form)) return;
      if (area.form.dataset.busy === "true") sayBusy(area.form);
      else area.form.requestSubmit();
    }
  });

  // A text file attached to the message being written: its name and size beside the box
  // (with Remove); with one, the box may be left empty. Dropped on the composer, a file is
  // attached just the same. The server decides whether it is text, and says why not.
  function attachedFile(form) {
    const input = form && form.querySelector('input[name="attachment"]');
    return input && input.files && input.files.length ? input.files[0] : null;
  }

  function syncAttached() {
    const form = document.getElementById("composer");
    const shown = document.getElementById("attached");
    if (!form || !shown) return;
    const file = attachedFile(form);
    shown.hidden = !file;
    form.querySelector("textarea").required = !file;
    if (file) {
      const size = file.size < 1024 ? `${file.size} bytes` : `${(file.size / 1024).toFixed(1)} KB`;
      shown.querySelector(".attached-name").textContent = `Attached: ${file.name} (${size})`;
    }
  }

  document.addEventListener("change", (event) => {
    if (event.target.matches && event.target.matches('#composer input[name="attachment"]')) syncAttached();
  });

  document.addEventListener("click", (event) => {
    if (!event.target.closest || !event.target.closest('[data-action="detach"]')) return;
    const input = document.querySelector('#composer input[name="attachment"]');
    input.value = "";
    input.dispatchEvent(new Event("change", { bubbles: true }));  // the meter follows
    document.querySelector("#composer textarea").focus();
  });

  document.addEventListener("dragover", (event) => {
    const area = event.target.closest && event.target.closest(".composer-area");
    if (!area || !event.dataTransfer || !Array.from(event.dataTransfer.types).includes("Files")) return;
    event.preventDefault();
    area.classList.add("dropping");
  });
  document.addEventListener("dragleave", (event) => {
    const area = event.target.closest && event.target.closest(".composer-area");
    if (area && !area.contains(event.relatedTarget)) area.classList.remove("dropping");
  });
  document.addEventListener("drop", (event) => {
    const area = event.target.closest && event.target.closest(".composer-area");
    if (!area || !event.dataTransfer || !event.dataTransfer.files.length) return;
    const several = filesInput();
    const input = document.querySelector('#composer input[name="attachment"]');
    if (!several && !input) return;
    event.preventDefault();
    area.classList.remove("dropping");
    if (several) {
      uploadAll(event.dataTransfer.files);
      return;
    }
    const one = new DataTransfer();
    one.items.add(event.dataTransfer.files[0]);
    input.files = one.files;
    input.dispatchEvent(new Event("change", { bubbles: true }));
  });

  // Files for the message being written (a signed-in user's composer, or an embed's that
  // takes files): each one chosen, dropped or pasted is uploaded at once (POST /api/files,
  // or the embed's <base>/files: the input's data-upload-url) and shown as a chip with its
  // tokens for the conversation's model (GET <base>/files/<id>/chip); the chips' hidden
  // fields go with the send and the meter. A refusal is said beside the composer, with
  // the draft and the other chips kept. Removing a chip deletes its unused upload.
  function filesInput() {
    return document.querySelector("#composer input[data-files-input]");
  }

  function pageHeaders() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers:inherited") || "{}");
    } catch (error) {
      return {};
    }
  }

  function sayRefused(text) {
    const note = document.createElement("p");
    note.className = "inline-error";
    note.setAttribute("role", "alert");
    note.textContent = text;
    document.getElementById("composer-error").replaceChildren(note);
  }

  function filesChanged() {
    const form = document.getElementById("composer");
    const area = form.querySelector("textarea");
    syncRequired(form);
    if (window.htmx && area.hasAttribute("hx-post")) htmx.trigger(area, "files-changed");
  }

  // With a file chosen (even one still uploading: the send waits for it) the box may be
  // left empty: the files alone are the message.
  function hasFiles(form) {
    return Boolean(attachedFile(form) || (form && form.querySelector("#chips .file-chip")));
  }

  function syncRequired(form) {
    if (form) form.querySelector("textarea").required = !hasFiles(form);
  }

  async function upload(file, chips, chipUrl, uploadUrl) {
    const pending = document.createElement("li");
    pending.className = "file-chip pending";
    pending.textContent = `${file.name || "pasted picture"} · uploading…`;
    chips.append(pending);
    syncRequired(chips.closest("form"));
    try {
      const body = new FormData();
      body.append("file", file, file.name || "pasted.png");
      const stored = await fetch(uploadUrl, { method: "POST", body, headers: pageHeaders() });
      const answer = await stored.json().catch(() => ({}));
      if (!stored.ok) {
        sayRefused(answer.detail || `${file.name} could not be attached (${stored.status}).`);
        pending.remove();
        return;
      }
      const chip = await fetch(`${chipUrl}${encodeURIComponent(answer.id)}/chip`,
        { headers: { ...pageHeaders(), "HX-Request": "true" } });
      if (!chip.ok) {
        sayRefused(`${answer.name} could not be counted (${chip.status}).`);
        pending.remove();
        return;
      }
      pending.outerHTML = await chip.text();
      announce(`Attached ${answer.name}.`);
    } catch (error) {
      sayRefused(`${file.name} could not be attached: the server did not answer.`);
      pending.remove();
    }
  }

  async function uploadAll(files) {
    const input = filesInput();
    const chips = document.getElementById("chips");
    if (!input || !chips) return;
    const uploadUrl = input.dataset.uploadUrl || "/api/files";
    await Promise.all(Array.from(files).map((file) => upload(file, chips, input.dataset.chipUrl, uploadUrl)));
    filesChanged();
    const form = document.getElementById("composer");
    if (form.dataset.sendAfterUploads && !chips.querySelector(".pending")) {
      delete form.dataset.sendAfterUploads;
      form.requestSubmit();
    }
  }

  // Sent while a file is still uploading, the message waits for it (and goes once every
  // upload is answered), so a file chosen is never left behind.
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (form.id !== "composer" || !form.querySelector("#chips .pending")) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    form.dataset.sendAfterUploads = "true";
    announce("Sending once the files are uploaded.");
  }, true);

  document.addEventListener("change", (event) => {
    if (!event.target.matches || !event.target.matches("#composer input[data-files-input]")) return;
    const chosen = Array.from(event.target.files);
    event.target.value = "";  // choosing the same file again is a change again
    uploadAll(chosen);
  });

  document.addEventListener("paste", (event) => {
    if (!filesInput() || !event.target.closest || !event.target.closest("#composer")) return;
    const pictures = Array.from((event.clipboardData && event.clipboardData.files) || []);
    if (!pictures.length) return;  // text pastes as text
    event.preventDefault();
    uploadAll(pictures);
  });

  document.addEventListener("click", (event) => {
    const remove = event.target.closest && event.target.closest('[data-action="remove-file"]');
    if (!remove) return;
    removeChip(remove.closest(".file-chip"));
  });

  async function removeChip(chip) {
    if (chip.dataset.removing) return;
    chip.dataset.removing = "true";
    const input = filesInput();
    const uploadUrl = (input && input.dataset.uploadUrl) || "/api/files";
    await fetch(`${uploadUrl}/${encodeURIComponent(chip.dataset.fileId)}`,
      { method: "DELETE", headers: pageHeaders() }).catch(() => {});
    announce(`Removed ${chip.querySelector(".file-name").textContent}.`);
    chip.remove();
    filesChanged();
    document.querySelector("#composer textarea").focus();
  }

  function clearChips() {
    const chips = document.getElementById("chips");
    if (chips) chips.replaceChildren();
    syncRequired(document.getElementById("composer"));
  }

  // Enter while an answer is being written sends nothing: say why, beside the composer,
  // until that answer is done (the text typed stays in the box).
  function sayBusy(form) {
    if (form.id !== "composer") return;
    const errors = document.getElementById("composer-error");
    const note = document.createElement("p");
    note.className = "busy-note";
    note.dataset.busyNote = "";
    note.textContent = "Not sent yet: an answer is still being written. Your message stays here; " +
      "press Enter again when the answer is done, or Stop (Escape) to end it now.";
    errors.replaceChildren(note);
  }

  function clearBusyNote() {
    const note = document.querySelector("#composer-error [data-busy-note]");
    if (note) note.remove();
  }

  // The composer grows with what is typed, up to its CSS max-height, then scrolls.
  function fitComposer(area) {
    if (!area) return;
    area.style.height = "auto";
    const border = area.offsetHeight - area.clientHeight;
    area.style.height = `${area.scrollHeight + border}px`;
  }

  document.addEventListener("input", (event) => {
    if (event.target.matches && event.target.matches("#composer textarea")) fitComposer(event.target);
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
    if (!event.target.closest) return;
    const copy = event.target.closest('[data-action="copy-code"]');
    if (copy) copyCode(copy);
    if (event.target.closest('[data-action="toggle-sidebar"]')) {
      if (!closeDrawer()) openDrawer();
    }
    // Delete asks about the title as it is now (renamed, or named by the model since the
    // page was drawn): the header's heading always holds the current one.
    const deleting = event.target.closest(".delete-conversation");
    const heading = document.querySelector("#title-form h1");
    if (deleting && heading) {
      const form = deleting.form;
      form.setAttribute("hx-confirm", form.getAttribute("hx-confirm").replace(/“.*”/, `“${heading.textContent}”`));
    }
    if (event.target.closest('[data-action="toggle-header-menu"]')) toggleHeaderMenu();
    else if (!event.target.closest("#header-menu")) toggleHeaderMenu(false);
    if (event.target.closest('[data-action="close-sidebar"]')) closeDrawer();
    if (event.target.closest('[data-action="scroll-bottom"]')) {
      scrollToBottom();
      document.querySelector("#composer textarea").focus();
    }
    const more = event.target.closest('[data-action="show-more"]');
    if (more) {
      const open = more.closest(".bubble").classList.toggle("collapsed") === false;
      more.setAttribute("aria-expanded", String(open));
      more.textContent = open ? "Show less" : "Show more";
      more.setAttribute("aria-label", `${more.textContent} of ${more.closest(".message").dataset.turnName}`);
    }
    const notes = event.target.closest('[data-action="show-notes"]');
    if (notes) {
      const all = document.getElementById("messages").classList.toggle("all-notes");
      notes.setAttribute("aria-pressed", String(all));
      notes.textContent = all ? "Fewer notes" : "All notes";
      const markers = document.querySelectorAll("#messages .message[data-dropped-turns] .trim-marker");
      const newest = markers[markers.length - 1];
      nameNotes(notes, markers.length, newest ? newest.closest(".message") : null);
    }
    const read = event.target.closest('[data-action="open-summary"]');
    const dialog = read && document.getElementById("summary-dialog");
    if (dialog) dialog.showModal();
    const show = event.target.closest('[data-action="show-left-out"]');
    const marker = show && document.querySelector(`#${show.dataset.marker} .trim-marker`);
    if (marker) marker.open = !marker.open;
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
      syncAttached();
      clearChips();
      fitComposer(source.querySelector("textarea"));
      stickToBottom = true;
      document.getElementById("composer-error").replaceChildren();
      if (document.querySelectorAll("#messages article.message").length === 2) awaitModelTitle();
    }
    drawTools();
    drawToolCalls();
    placeCutLine();
    dropStaleContinue();
    const title = document.getElementById("title-form");
    if (title && title.dataset.pageTitle) document.title = title.dataset.pageTitle;
    if (stickToBottom) scrollToBottom();
    syncComposer();
    speak();
  });

  // What a screen reader is told goes through one polite region (#announcer): the message
  // list and the meter are not live regions, so streamed text and the meter's refreshes
  // are not read out piece by piece. An answer is said once, when it is done; the meter
  // only when the next send crosses into, or out of, leaving turns out.
  const watching = new Set();
  let leavingOut = null;
  function announce(text) {
    const region = document.getElementById("announcer");
    if (region && text) region.textContent = text;
  }
  function speak() {
    document.querySelectorAll('#messages [data-role="assistant"]').forEach((answer) => {
      const id = answer.dataset.messageId;
      if (answer.dataset.status === "streaming") watching.add(id);
      else if (watching.delete(id)) {
        const text = answer.querySelector(".content").textContent.trim();
        const status = answer.querySelector(".meta .status");
        announce(`${answer.getAttribute("aria-label")}: ${text}${status ? ` (${status.textContent.trim()})` : ""}`);
      }
    });
    const meter = document.getElementById("meter");
    if (!meter) return;
    const now = Boolean(meter.dataset.cutWords);
    if (leavingOut !== null && now !== leavingOut) {
      const value = meter.querySelector(".meter-value");
      announce(now ? meter.dataset.cutWords : (value ? value.textContent.replace(/\s+/g, " ").trim() : ""));
    }
    leavingOut = now;
  }

  // A streamed answer's text arrives as `content` events, each with only what changed: `r`
  // replaces the whole content (a page that connects, or the stored rendering at the end),
  // `k` keeps that many characters of the open block's HTML, `f` finishes blocks (the
  // first continues the open block's kept part), `o` is (the rest of) the new open block.
  // Finished blocks are parsed once; only the open block's nodes are replaced each time.
  // The server names each code block's copy control (webapp.web.markdown.name_code_copies).
  const openBlocks = new WeakMap();
  const appendHTML = (content, html) => {
    const template = document.createElement("template");
    template.innerHTML = html;
    const nodes = [...template.content.childNodes];
    content.append(template.content);
    return nodes;
  };
  document.addEventListener("content", (event) => {
    const content = event.target.querySelector && event.target.querySelector(".content");
    if (!content) return;
    const patch = JSON.parse(event.detail.data);
    let open = openBlocks.get(content);
    if (!open || patch.r !== undefined) {
      content.replaceChildren();
      open = { html: "", nodes: [] };
      if (patch.r) appendHTML(content, patch.r);
    }
    const kept = open.html.slice(0, patch.k);
    for (const node of open.nodes) node.remove();
    if (patch.f) {
      patch.f.forEach((html, index) => appendHTML(content, index === 0 ? kept + html : html));
      open.html = patch.o;
    } else {
      open.html = kept + patch.o;
    }
    open.nodes = appendHTML(content, open.html);
    openBlocks.set(content, open);
  });

  document.addEventListener("htmx:sse:after:message", () => {
    drawToolCalls();
    drawTools();
    placeCutLine();
    if (stickToBottom) scrollToBottom();
    syncComposer();
    speak();
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

  // A search hit links to its message (`#m<id>`): show that one, not the newest.
  function showLinkedMessage() {
    const match = /^#m\d+$/.test(location.hash) && document.querySelector(location.hash);
    if (!match || !match.classList.contains("message")) return false;
    match.classList.add("found");
    match.scrollIntoView({ block: "center" });
    stickToBottom = false;
    return true;
  }

  document.addEventListener("scroll", (event) => {
    if (event.target.id === "messages") syncScrollButton();
  }, true);

  // Deferred and loaded before htmx (base.html), this runs once the page is parsed and before
  // htmx observes anything: scrolled to the newest message (or to a search hit's) first, the
  // "load older" row at the top is never revealed by the initial position.
  drawTools();
  placeCutLine();
  dropStaleContinue();
  fitPlaceholder();
  speak();  // what the page shows on load is the baseline: nothing is said for it
  if (!showLinkedMessage()) scrollToBottom();

  document.addEventListener("DOMContentLoaded", () => {
    syncComposer();
    const area = document.querySelector('#composer textarea');
    fitComposer(area);
    // An embed takes no focus on load: the host page's visitor is reading the host page.
    if (area && !area.disabled && !document.querySelector(".chat.embed")) area.focus();
  });
})();
