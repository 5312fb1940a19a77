// wf serve: the web UI's one script (no build step, no dependencies).
// - Live pages: a server-sent event source (body[data-live]); on a change the page is fetched
//   again (at most about once a second) and each [data-fragment] whose HTML changed is swapped in (a fragment with data-key
//   only when its key changed, so a half-typed hook payload survives).
// - Times: <time datetime> shown in local time (a schedule's, data-zoned, stay in the schedule's
//   zone), with "3m ago" as a tooltip.
// - Byte streams: followed with fetch() and a reader, shown as text and as hex.
// - Hook forms: the payload is checked as JSON against the hook's schema before it is sent.
"use strict";

(function () {
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      el.title = ago(d) + " · " + el.getAttribute("datetime");
      if (el.hasAttribute("data-zoned")) return;  // a schedule's time, already in its own zone
      var pad = function (n) { return String(n).padStart(2, "0"); };
      var today = new Date().toDateString() === d.toDateString();
      var clock = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
      el.textContent = today ? clock : d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" +
        pad(d.getDate()) + " " + clock;
    });
  }

  function ago(d) {
    var s = Math.round((Date.now() - d.getTime()) / 1000);
    var future = s < 0; s = Math.abs(s);
    var text = s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" :
      s < 172800 ? Math.floor(s / 3600) + "h" : Math.floor(s / 86400) + "d";
    return future ? "in " + text : text + " ago";
  }

  // -- live updates -----------------------------------------------------------------------
  var refreshing = false, again = false, timer = null, lastStart = 0, lastTook = 0;

  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    var began = lastStart = Date.now();
    fetch(location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        doc.querySelectorAll("[data-fragment][id]").forEach(function (fresh) {
          var old = document.getElementById(fresh.id);
          if (!old) return;
          if (old.hasAttribute("data-key")) {
            if (old.getAttribute("data-key") === fresh.getAttribute("data-key")) return;
          } else if (old.innerHTML === fresh.innerHTML) {
            return;
          }
          old.replaceWith(fresh);
          init(fresh);
        });
      })
      .catch(function () {})
      .finally(function () {
        lastTook = Date.now() - began;
        refreshing = false;
        if (again) { again = false; schedule(); }
      });
  }

  // One fetch in flight, and while changes keep coming at most one a second (or one per two
  // fetch times, when the page is slow to build): a live run's page is the server's costliest,
  // and four tabs refetching it after every step held a cheap request 0.5 s.
  function schedule() {
    if (timer) return;
    var wait = Math.max(250, lastStart + Math.max(1000, 2 * lastTook) - Date.now());
    timer = setTimeout(function () { timer = null; refresh(); }, wait);
  }

  function live() {
    var src = document.body.getAttribute("data-live");
    if (!src || !window.EventSource) return;
    var first = true;
    var es = new EventSource(src);
    es.addEventListener("open", function () { document.body.classList.add("connected"); });
    es.addEventListener("error", function () { document.body.classList.remove("connected"); });
    es.addEventListener("run", function (e) {
      if (first && document.body.getAttribute("data-live").indexOf("run=") >= 0) {
        first = false;  // the run's state when we connected: the page has it, unless it
        // changed in between (a cancel's redirect races the cancel)
        var shown = document.getElementById("run-status"), now = null;
        try { now = JSON.parse(e.data); } catch (err) {}
        if (shown && now && shown.dataset.status === now.status &&
            Number(shown.dataset.updated) === now.updated_at) return;
      }
      schedule();
    });
    // A sleeping run's timeline moves with the clock.
    setInterval(function () {
      var status = document.getElementById("run-status");
      if (status && ["running", "suspended", "pending"].indexOf(status.dataset.status) >= 0) schedule();
    }, 5000);
  }

  // -- byte streams -----------------------------------------------------------------------
  function hexdump(bytes, offset) {
    var out = [];
    for (var i = 0; i < bytes.length; i += 16) {
      var row = bytes.slice(i, i + 16), hex = [], text = "";
      for (var j = 0; j < 16; j++) {
        hex.push(j < row.length ? row[j].toString(16).padStart(2, "0") : "  ");
        if (j < row.length) text += row[j] >= 32 && row[j] < 127 ? String.fromCharCode(row[j]) : ".";
      }
      out.push((offset + i).toString(16).padStart(8, "0") + "  " + hex.slice(0, 8).join(" ") +
        "  " + hex.slice(8).join(" ") + "  |" + text + "|");
    }
    return out.join("\n");
  }

  function follow(box) {
    if (box.dataset.following) return;
    box.dataset.following = "1";
    var textEl = box.querySelector(".stream-text"), hexEl = box.querySelector(".stream-hex");
    var size = box.querySelector(".stream-size");
    var decoder = new TextDecoder("utf-8");
    var all = new Uint8Array(0);
    box.querySelectorAll(".seg button").forEach(function (b) {
      b.addEventListener("click", function () {
        box.querySelectorAll(".seg button").forEach(function (o) { o.classList.toggle("on", o === b); });
        var hex = b.dataset.view === "hex";
        hexEl.hidden = !hex; textEl.hidden = hex;
        if (hex) hexEl.textContent = hexdump(all, 0);
      });
    });
    fetch(box.dataset.src + "?start=0&follow=true&abort_cut_off=false", { credentials: "same-origin" }).then(function (r) {
      if (!r.ok || !r.body) { textEl.textContent = "(cannot read this stream: " + r.status + ")"; return; }
      var reader = r.body.getReader();
      function pump() {
        return reader.read().then(function (res) {
          if (res.done) { box.classList.add("ended"); return ended(box); }
          var chunk = res.value, grown = new Uint8Array(all.length + chunk.length);
          grown.set(all); grown.set(chunk, all.length); all = grown;
          var atEnd = textEl.scrollTop + textEl.clientHeight >= textEl.scrollHeight - 4;
          textEl.textContent += decoder.decode(chunk, { stream: true });
          if (!hexEl.hidden) hexEl.textContent = hexdump(all, 0);
          size.textContent = all.length + " bytes";
          if (atEnd) textEl.scrollTop = textEl.scrollHeight;
          return pump();
        });
      }
      return pump().catch(function () { return ended(box); });  // a body cut off: why?
    }).catch(function () {});
  }

  // A stream's body ended (or was cut off): say how it stands, as wf.admin's words do.
  // Cut off: its run ended (or it closed) with a writer cut off (``cut_step`` names it).
  function cutOff(info) {
    return info.complete === false && (info.closed || !!info.cut_step);
  }

  function streamState(info) {
    if (cutOff(info)) {
      return info.cut_step ? "incomplete: step '" + info.cut_step + "' was cut off writing it" : "incomplete";
    }
    return info.closed ? "closed" : "open";
  }

  function ended(box) {
    var runUrl = box.dataset.src.replace(/\/streams\/[^/]*$/, "") + "?events=false";
    return fetch(runUrl, { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (run) {
      var info = run && run.stream_info && run.stream_info[box.dataset.name];
      if (!info) return;
      var state = box.querySelector(".stream-state");
      if (state) state.textContent = info.chunks + " chunk(s), " + streamState(info);
      box.classList.toggle("incomplete", cutOff(info));
    }).catch(function () {});
  }

  // -- hook forms -------------------------------------------------------------------------
  function typeOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "array";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    return typeof v;
  }

  function check(schema, value, where) {
    if (!schema || typeof schema !== "object") return null;
    var types = schema.type ? [].concat(schema.type) : null;
    var t = typeOf(value);
    if (types && types.indexOf(t) < 0 && !(t === "integer" && types.indexOf("number") >= 0)) {
      return where + " should be " + types.join(" or ") + ", not " + t;
    }
    if (t === "object" && schema.properties) {
      var req = schema.required || [];
      for (var i = 0; i < req.length; i++) {
        if (!(req[i] in value)) return where + " needs the field \"" + req[i] + "\"";
      }
      for (var k in value) {
        if (schema.properties[k]) {
          var e = check(schema.properties[k], value[k], where + "." + k);
          if (e) return e;
        }
      }
    }
    return null;
  }

  function hookForm(form) {
    if (form.dataset.ready) return;
    form.dataset.ready = "1";
    var error = form.querySelector(".hook-error");
    form.addEventListener("submit", function (ev) {
      var text = form.querySelector("textarea").value.trim() || "null";
      var value;
      try { value = JSON.parse(text); } catch (e) {
        ev.preventDefault(); error.textContent = "Not JSON: " + e.message; return;
      }
      var schema = {};
      try { schema = JSON.parse(form.dataset.schema || "{}"); } catch (e) { schema = {}; }
      var problem = check(schema, value, "payload");
      if (problem) { ev.preventDefault(); error.textContent = problem; }
    });
  }

  function confirmForms(root) {
    root.querySelectorAll("form[data-confirm]").forEach(function (f) {
      if (f.dataset.ready) return;
      f.dataset.ready = "1";
      f.addEventListener("submit", function (ev) {
        if (!window.confirm(f.dataset.confirm)) ev.preventDefault();
      });
    });
  }

  function init(root) {
    localTimes(root);
    root.querySelectorAll(".stream[data-src]").forEach(follow);
    root.querySelectorAll("form.hook").forEach(hookForm);
    confirmForms(root);
  }

  document.addEventListener("DOMContentLoaded", function () {
    init(document);
    live();
  });
})();
