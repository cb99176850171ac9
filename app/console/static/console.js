// The Polar console's only script: a filter change submits the tasks form.
for (const select of document.querySelectorAll("form#filters select")) {
  select.addEventListener("change", () => select.form.submit());
}
