// Rivulet dashboard: the only script. Pages work without it; it adds the copy button
// and the "are you sure?" of destructive buttons (data-confirm).
document.addEventListener("click", (ev) => {
  const button = ev.target.closest("[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  if (!field) return;
  field.select();
  const done = () => { button.textContent = "Copied"; };
  if (navigator.clipboard) {
    navigator.clipboard.writeText(field.value).then(done, () => document.execCommand("copy") && done());
  } else if (document.execCommand("copy")) {
    done();
  }
});
document.addEventListener("submit", (ev) => {
  const message = ev.target.dataset.confirm;
  if (message && !window.confirm(message)) ev.preventDefault();
});
// The Overview: the current visitors refresh every 30 s without reloading the page, and
// Plausible's keys choose the period (d, e, w, t, m, y, a), unless typing in a field.
const live = document.getElementById("live-visitors");
if (live && live.dataset.liveUrl) {
  setInterval(() => {
    fetch(live.dataset.liveUrl, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : null))
      .then((d) => { if (d && d.visitors !== null && d.visitors !== undefined) live.textContent = String(d.visitors); })
      .catch(() => {});
  }, 30000);
}
document.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey || /^(INPUT|TEXTAREA|SELECT)$/.test(ev.target.tagName)) return;
  const link = document.querySelector(`nav.periods a[data-key="${ev.key.toLowerCase()}"]`);
  if (link) window.location.href = link.href;
});
