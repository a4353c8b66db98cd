// Live search and facet filters for the catalog table (progressive enhancement).
// Without JavaScript the form stays hidden and the "Browse by" links lead to one
// server-rendered page per facet value. No framework, no inline code (the pages
// carry a Content-Security-Policy that forbids it). State lives in the query string
// (?q=llama&precision=fp32), so a filtered view can be bookmarked and shared.
// Each option's count follows the other filters: it says how many recipes choosing
// it would show. The facet selects fold behind one <details> (issue 44: on a phone
// they filled the first screen); it opens on a wide screen or when a shared link
// sets a facet, and its summary counts the facets set.
"use strict";

(function () {
  const form = document.getElementById("filters");
  const table = document.getElementById("catalog");
  if (!form || !table) return;
  const rows = Array.from(table.tBodies[0].rows);
  const count = document.getElementById("count");
  const empty = document.getElementById("empty");
  const selects = Array.from(form.querySelectorAll("select"));
  const search = form.elements.namedItem("q");
  const fold = document.getElementById("facet-filters");
  const active = document.getElementById("active");

  function matches(row, query, except) {
    if (query && !row.dataset.search.includes(query)) return false;
    return selects.every((s) => s === except || !s.value || row.dataset[s.name] === s.value);
  }

  function recount(query) {
    for (const select of selects) {
      const counts = new Map();
      for (const row of rows) {
        if (!matches(row, query, select)) continue;
        const value = row.dataset[select.name];
        counts.set(value, (counts.get(value) || 0) + 1);
      }
      for (const option of select.options) {
        if (!option.value) continue;
        option.textContent = option.value + " (" + (counts.get(option.value) || 0) + ")";
      }
    }
  }

  function remember() {
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(form)) if (value) params.set(key, value);
    const query = params.toString();
    history.replaceState(null, "", query ? "?" + query : location.pathname);
  }

  function apply() {
    const query = search.value.trim().toLowerCase();
    let shown = 0;
    for (const row of rows) {
      row.hidden = !matches(row, query);
      if (!row.hidden) shown += 1;
    }
    count.textContent =
      shown === rows.length
        ? "Showing all " + rows.length + " recipes."
        : "Showing " + shown + " of " + rows.length + " recipes.";
    empty.hidden = shown > 0;
    const set = selects.filter((s) => s.value).length;
    active.textContent = set ? "(" + set + " set)" : "";
    recount(query);
    remember();
  }

  for (const [key, value] of new URLSearchParams(location.search)) {
    const field = form.elements.namedItem(key);
    if (field) field.value = value;
  }
  fold.open = window.matchMedia("(min-width: 52rem)").matches || selects.some((s) => s.value);
  form.hidden = false;
  form.addEventListener("input", apply);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply();
  });
  form.addEventListener("reset", () => setTimeout(apply));
  apply();
})();
