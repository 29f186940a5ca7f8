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
