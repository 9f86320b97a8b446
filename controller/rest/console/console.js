// The Tributary console: scopes and streams, a stream's scaling history (key ranges over epochs),
// its segments (head, tail and bytes kept), open transactions, and the scope's reader groups with their lag. It only reads
// the REST admin API (/v1, docs/rest.md); nothing is built or bundled.
"use strict";

const api = async (path) => {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(`${path}: ${body.message || response.status}`);
  return body;
};

const element = (tag, attributes = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
};

const table = (headings, rows, attributes = {}) => element("table", attributes,
  element("tr", {}, ...headings.map((heading) => element("th", {}, heading))),
  ...rows.map((cells) => element("tr", {}, ...cells.map((cell) => element("td", {}, String(cell))))));

const bytes = (count) => {
  if (count === undefined || count < 0) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = count, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
};

// The picture people draw of Pravega scaling: one column per epoch, each segment a box over its key range.
const scalingHistory = (epochs) => {
  const ns = "http://www.w3.org/2000/svg";
  const columnWidth = 56, height = 260, top = 18, left = 34;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("id", "scaling-history");
  svg.setAttribute("width", left + columnWidth * epochs.length + 10);
  svg.setAttribute("height", height + top + 10);
  const add = (tag, attributes, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
  };
  add("text", { x: 0, y: top + 4 }, "1.0");
  add("text", { x: 0, y: top + height }, "0.0");
  epochs.forEach((epoch, column) => {
    const x = left + column * columnWidth;
    add("text", { x: x + 4, y: 12 }, `epoch ${epoch.epoch}`);
    for (const segment of epoch.segments) {
      const y = top + (1 - segment.keyEnd) * height, boxHeight = (segment.keyEnd - segment.keyStart) * height;
      add("rect", { x, y, width: columnWidth - 6, height: boxHeight, fill: "#a8dadc", stroke: "#1d3557",
                    class: "segment", "data-segment": segment.segmentId });
      if (boxHeight > 12) add("text", { x: x + 4, y: y + boxHeight / 2 + 4 }, `#${segment.number}`);
    }
  });
  return svg;
};

const showStream = async (scope, stream) => {
  const detail = document.getElementById("detail");
  detail.replaceChildren(element("p", { class: "muted" }, `loading ${scope}/${stream}...`));
  try {
    const [description, history, segments, transactions, groups] = await Promise.all([
      api(`/v1/scopes/${scope}/streams/${stream}`),
      api(`/v1/scopes/${scope}/streams/${stream}/epochs?limit=30`),
      api(`/v1/scopes/${scope}/streams/${stream}/segments`),
      api(`/v1/scopes/${scope}/streams/${stream}/transactions`),
      api(`/v1/scopes/${scope}/readergroups`),
    ]);
    const groupDetails = await Promise.all(groups.readerGroups.map(
      (group) => api(`/v1/scopes/${scope}/readergroups/${group.readerGroupName}`)));
    const scaling = description.scalingPolicy, retention = description.retentionPolicy;
    const open = transactions.transactions.filter((txn) => txn.status === "OPEN" || txn.status === "COMMITTING");
    detail.replaceChildren(
      element("h2", { id: "stream-title" }, `${scope}/${stream}`),
      table(["state", "scaling", "retention", "tags", "epoch"], [[
        description.state,
        `${scaling.type} (min ${scaling.minSegments}${scaling.targetRate ? `, target ${scaling.targetRate}` : ""})`,
        retention ? `${retention.type} ${retention.value}` : "none", description.tags.join(", ") || "-",
        description.currentEpoch]]),
      element("h3", {}, "Scaling history"), scalingHistory(history.epochs),
      element("h3", {}, "Segments"),
      table(["segment", "epoch", "key range", "start", "tail", "kept", "sealed"], segments.segments.map((segment) => [
        `#${segment.number}`, segment.epoch, `${segment.keyStart.toFixed(3)} - ${segment.keyEnd.toFixed(3)}`,
        bytes(segment.startOffset), bytes(segment.tailOffset), bytes(segment.bytesKept),
        segment.sealed ? "yes" : "no"]), { id: "segments" }),
      element("h3", {}, "Reader groups"),
      groupDetails.length ? table(["group", "streams", "lag"], groupDetails.map((group) => [
        group.readerGroupName, group.streams.join(", "),
        Object.entries(group.lagBytes).map(([name, lag]) => `${name}: ${bytes(lag)}`).join("; ") || "-"]))
        : element("p", { class: "muted" }, "none"),
      element("h3", {}, "Open transactions"),
      open.length ? table(["transaction", "status", "epoch", "writer"], open.map((txn) => [
        txn.transactionId, txn.status, txn.epoch, txn.writerId || "-"]))
        : element("p", { class: "muted", id: "no-transactions" }, "none"));
  } catch (error) {
    detail.replaceChildren(element("p", { class: "error" }, error.message));
  }
};

const showScopes = async () => {
  const list = document.getElementById("scopes");
  const scopes = await api("/v1/scopes");
  list.replaceChildren();
  for (const { scopeName } of scopes.scopes) {
    const streams = await api(`/v1/scopes/${scopeName}/streams`);
    const items = streams.streams.map(({ streamName }) => {
      const link = element("a", { "data-stream": `${scopeName}/${streamName}` }, streamName);
      link.addEventListener("click", () => {
        for (const other of document.querySelectorAll("nav a")) other.classList.remove("selected");
        link.classList.add("selected");
        showStream(scopeName, streamName);
      });
      return element("li", {}, link);
    });
    list.append(element("li", {}, element("strong", {}, scopeName), element("ul", {}, ...items)));
  }
};

const showCluster = async () => {
  const cluster = await api("/v1/cluster");
  document.getElementById("cluster-summary").textContent =
    `${cluster.containerCount} containers on ${cluster.segmentStores.length} segment store(s), ` +
    `${cluster.controllers.length} controller(s)`;
};

window.addEventListener("load", async () => {
  try {
    await Promise.all([showCluster(), showScopes()]);
    const wanted = new URLSearchParams(window.location.search).get("stream");
    if (wanted) {
      const link = document.querySelector(`nav a[data-stream="${wanted}"]`);
      if (link) link.click();
    }
  } catch (error) {
    document.getElementById("detail").replaceChildren(element("p", { class: "error" }, error.message));
  }
});
