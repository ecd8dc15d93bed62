// The tally dashboard: totals and a per-minute or per-hour chart of the chosen counters, refreshed while live.
// It reads the HTTP read API of the page's own origin: /counts and /counters, or /public/... where the
// page is served to anonymous visitors (the config the function writes into the page says which).
// Signed pages also read /alerts and mark the counters in alarm (alert states are never public).
// Above them, the certified top N of a prefix (/top): a click on a counter of the list charts it.
// A counter whose rules are all retired (the answers' "retired") is marked retired wherever it shows: its counts
// stay readable until they expire, and no more events will come.
// Below the chart, the calendar: the chosen counters' last 30 days (12 weeks, 2 months) in a time zone, the
// browser's own by default (/calendar), and each counter's total this month so far beside its window's
// (/counts?window=month-to-date). A zone the API cannot answer (a half-hour offset) shows its reason instead.
// Where the table keeps days and months (the config's calendarZones), the last 12 months too: closed months
// are read from their own items, past the hour retention.
import uPlot from "uplot";

const REFRESH_MS = 10_000;
// Asked of every counter; only histogram counters answer them (the API leaves them out for others).
const QUANTILES = ["0.5", "0.9", "0.99"];
const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4d7c0f"];
// Offered beside the browser's own zone; calendar reads take any IANA zone whose offsets are whole hours.
const ZONES = ["UTC", "America/New_York", "America/Chicago", "America/Los_Angeles", "Europe/London", "Europe/Paris", "Asia/Tokyo"];
// Each choice of the calendar: its period, and how many periods it shows back from today's. The first three
// stay within the hour retention (90 days by default), which any counter's calendar read can reach; 12 months
// are offered where the table keeps days and months.
const CALENDAR_CHOICES = {
  day: { period: "day", back: 29 },
  week: { period: "week", back: 11 },
  month: { period: "month", back: 1 },
  year: { period: "month", back: 11 },
};

const config = JSON.parse(document.getElementById("tally-config").textContent || "{}");
const readBase = config.readBase || "";
const elements = {
  counters: document.getElementById("counters"),
  add: document.getElementById("add-counter"),
  window: document.getElementById("window"),
  series: document.getElementById("series"),
  live: document.getElementById("live"),
  status: document.getElementById("status"),
  totals: document.getElementById("totals"),
  chart: document.getElementById("chart"),
  topPrefix: document.getElementById("top-prefix"),
  topN: document.getElementById("top-n"),
  topRising: document.getElementById("top-rising"),
  topStatus: document.getElementById("top-status"),
  top: document.getElementById("top"),
  calendarPeriod: document.getElementById("calendar-period"),
  calendarTz: document.getElementById("calendar-tz"),
  calendarStatus: document.getElementById("calendar-status"),
  calendarChart: document.getElementById("calendar-chart"),
};
let chart = null;
let calendarChart = null;
// The API's clock less the browser's, from the Date of its last answer (whole seconds): which days the calendar
// asks for follows the clock the counts are kept by, not a browser's that may be off.
let clockOffset = 0;
let timer = null;
let generation = 0;

function chosenCounters() {
  return Array.from(elements.counters.selectedOptions, (option) => option.value);
}

function addCounterOption(name, selected, retired) {
  let option = Array.from(elements.counters.options).find((existing) => existing.value === name);
  if (!option) {
    option = new Option(name, name);
    elements.counters.add(option);
  }
  if (retired) {
    option.text = `${name} (retired)`;
    option.dataset.retired = retired;
    option.title = retiredTitle(retired);
  }
  if (selected) option.selected = true;
}

function retiredTitle(retired) {
  return `its rules are retired: no more events since ${retired}`;
}

// The mark of a counter whose rules are all retired; an empty cell for one that counts.
function retiredCell(retired) {
  const shown = cell(retired ? `retired ${retired}` : "", "retired");
  if (retired) shown.title = retiredTitle(retired);
  return shown;
}

async function getJson(path, parameters) {
  const query = new URLSearchParams(parameters).toString();
  const response = await fetch(`${readBase}${path}?${query}`, { headers: { Accept: "application/json" } });
  const served = Date.parse(response.headers.get("Date") || "");
  if (!Number.isNaN(served)) clockOffset = served - Date.now();
  const body = await response.json().catch(() => ({ message: `HTTP ${response.status}` }));
  if (!response.ok) throw new Error(body.message || `HTTP ${response.status}`);
  return body;
}

async function loadCounterNames() {
  const prefixes = config.prefixes && config.prefixes.length ? config.prefixes : [""];
  for (const prefix of prefixes) {
    const listing = await getJson("/counters", { prefix, window: elements.window.value });
    for (const item of listing.counters) addCounterOption(item.counter, false, item.retired);
  }
}

function showStatus(text, isError, where = elements.status) {
  where.textContent = text;
  where.classList.toggle("error", Boolean(isError));
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

// Sums and averages arrive as exact decimal strings; shown to two places, exact on hover.
function decimalCell(text) {
  if (text === undefined || text === null) return cell("");
  const shown = cell(Number(text).toLocaleString("en-US", { maximumFractionDigits: 2 }));
  shown.title = text;
  return shown;
}

// Counter -> the alerts it is in alarm for; empty where alert states cannot be read (public pages, no alerts).
async function alarmsByCounter() {
  const alarms = new Map();
  if (readBase) return alarms;
  try {
    const answer = await getJson("/alerts", { state: "ALARM" });
    for (const alert of answer.alerts) {
      if (!alarms.has(alert.counter)) alarms.set(alert.counter, []);
      alarms.get(alert.counter).push(alert);
    }
  } catch (error) {
    // Counts still show: an alert listing that fails only leaves the marks out.
  }
  return alarms;
}

function alarmCell(alerts) {
  const text = alerts.map((alert) => `${alert.alert}: ${alert.total.toLocaleString("en-US")} in ${alert.window}`);
  const shown = cell(text.join(", "), alerts.length ? "alarm" : "");
  if (alerts.length) shown.title = alerts.map((alert) => `threshold ${alert.threshold}, since ${alert.since}`).join("; ");
  return shown;
}

// Distinct values: exact while the counter's sketches are, an estimate (≈, 1.625 %) beyond.
function distinctCell(count) {
  if (count.distinct === undefined) return cell("", "distinct");
  const shown = cell(`${count.distinct_exact ? "" : "≈ "}${count.distinct.toLocaleString("en-US")}`, "distinct");
  shown.title = count.distinct_exact ? "exact" : "estimate, within 1.625 % (one standard error)";
  return shown;
}

function quantileCells(detail) {
  return QUANTILES.map((q) => {
    const value = detail && detail.quantiles ? detail.quantiles[q] : undefined;
    const shown = decimalCell(value);
    shown.classList.add("quantile");
    shown.dataset.quantile = q;
    return shown;
  });
}

// counts: the series answer; details: the same window with quantiles, by counter (histogram counters only);
// alarms: the alerts each counter is in alarm for; monthly: this month so far, by counter.
function showTotals(counts, details, alarms = new Map(), monthly = new Map()) {
  const body = elements.totals.tBodies[0];
  body.replaceChildren(
    ...counts.map((count) => {
      const row = document.createElement("tr");
      const alerts = alarms.get(count.counter) || [];
      row.dataset.counter = count.counter;
      row.classList.toggle("in-alarm", alerts.length > 0);
      row.classList.toggle("is-retired", Boolean(count.retired));
      row.append(
        cell(count.counter),
        cell(count.total.toLocaleString("en-US"), "total"),
        monthCell(monthly.get(count.counter)),
        decimalCell(count.sum),
        decimalCell(count.average),
        distinctCell(count),
        ...quantileCells(details.get(count.counter)),
        alarmCell(alerts),
        retiredCell(count.retired),
        cell(`${count.start} – ${count.end}`),
      );
      return row;
    }),
  );
  // Columns no chosen counter has stay hidden: a page of plain counters looks as it always did.
  elements.totals.classList.toggle("no-distinct", !counts.some((count) => count.distinct !== undefined));
  elements.totals.classList.toggle("no-quantiles", ![...details.values()].some((detail) => detail.quantiles));
  elements.totals.classList.toggle("no-retired", !counts.some((count) => count.retired));
  elements.totals.hidden = counts.length === 0;
}

// The quantiles of the window just answered (its end explicitly, aligned as it was: an explicit end is never
// aligned unless asked): asked apart from the series, whose every point would carry them too and could exceed
// what one answer may hold.
async function quantilesOf(counters, answered) {
  const parameters = new URLSearchParams({
    window: elements.window.value,
    at: answered.end,
    align: String(answered.aligned),
    quantiles: QUANTILES.join(","),
  });
  for (const counter of counters) parameters.append("counter", counter);
  const answer = await getJson("/counts", parameters);
  return new Map(answer.counts.map((count) => [count.counter, count]));
}

// This month so far (its start in the calendar's zone, to now), by counter; empty where the zone is refused,
// whose reason the calendar shows.
async function monthToDate(counters) {
  const parameters = new URLSearchParams({ window: "month-to-date", tz: elements.calendarTz.value });
  for (const counter of counters) parameters.append("counter", counter);
  try {
    const answer = await getJson("/counts", parameters);
    return new Map(answer.counts.map((count) => [count.counter, count]));
  } catch (error) {
    return new Map();
  }
}

function monthCell(count) {
  if (!count) return cell("", "month");
  const shown = cell(count.total.toLocaleString("en-US"), "month");
  shown.title = `since ${count.start} (the month's start in ${elements.calendarTz.value})`;
  return shown;
}

function browserZone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

function fillZones(chosen) {
  for (const zone of [browserZone(), ...ZONES, ...(config.calendarZones || []), chosen]) {
    if (zone && !Array.from(elements.calendarTz.options).some((option) => option.value === zone)) {
      elements.calendarTz.add(new Option(zone, zone));
    }
  }
  elements.calendarTz.value = chosen || browserZone();
}

// YYYY-MM-DD of a day counted from the date (year, month, day), which may overflow: Date.UTC carries it.
function dayText(year, month, day) {
  return new Date(Date.UTC(year, month - 1, day)).toISOString().slice(0, 10);
}

// The 12 months' choice, where the API's table keeps days and months (their zones are in the config).
function offerMonths() {
  if (!(config.calendarZones && config.calendarZones.length)) return;
  elements.calendarPeriod.add(new Option("last 12 months", "year"));
}

// The days the calendar asks for (to excluded): today's period in the zone and as many before it as chosen.
function calendarRange(choice, zone) {
  const parts = new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "numeric", day: "numeric" })
    .formatToParts(new Date(Date.now() + clockOffset));
  const [year, month, day] = ["year", "month", "day"].map((type) => Number(parts.find((part) => part.type === type).value));
  const { period, back } = CALENDAR_CHOICES[choice];
  if (period === "month") return { from: dayText(year, month - back, 1), to: dayText(year, month + 1, 1) };
  if (period === "week") {
    const monday = day - ((new Date(Date.UTC(year, month - 1, day)).getUTCDay() + 6) % 7);
    return { from: dayText(year, month, monday - 7 * back), to: dayText(year, month, monday + 7) };
  }
  return { from: dayText(year, month, day - back), to: dayText(year, month, day + 1) };
}

function hideCalendar(message, isError) {
  if (calendarChart) calendarChart.destroy();
  calendarChart = null;
  elements.calendarChart.hidden = true;
  showStatus(message, isError, elements.calendarStatus);
}

function showCalendar(answer, period, zone) {
  const series = answer.series;
  const times = series[0].points.map((point) => Date.parse(point.start) / 1000);
  const data = [times, ...series.map((one) => one.points.map((point) => point.count))];
  elements.calendarChart.hidden = false;
  const options = {
    width: Math.max(elements.calendarChart.clientWidth - 16, 320),
    height: 240,
    tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), zone),
    scales: { x: { time: true } },
    series: [
      {},
      ...series.map((one, index) => ({ label: one.counter, stroke: COLORS[index % COLORS.length], width: 2 })),
    ],
    axes: [{ space: 70 }, { label: `events per ${period}` }],
  };
  if (calendarChart) calendarChart.destroy();
  calendarChart = new uPlot(options, data, elements.calendarChart);
  elements.calendarChart.dataset.points = JSON.stringify(series.map((one) => one.points.map((point) => [point.start, point.count])));
  const notes = (answer.notes || []).join(" ");
  showStatus(`${period}s in ${zone}, ${series[0].start} – ${series[0].end}${notes ? ` — ${notes}` : ""}`, false, elements.calendarStatus);
}

// mine: the refresh this belongs to, as refreshTop's.
async function refreshCalendar(counters, mine) {
  const choice = elements.calendarPeriod.value;
  const period = CALENDAR_CHOICES[choice].period;
  const zone = elements.calendarTz.value;
  let range;
  try {
    range = calendarRange(choice, zone);
  } catch (error) {
    hideCalendar(`time zone ${zone}: ${error.message}`, true);
    return;
  }
  Object.assign(elements.calendarChart.dataset, { period, tz: zone, from: range.from, to: range.to });
  const parameters = new URLSearchParams({ period, tz: zone, from: range.from, to: range.to });
  for (const counter of counters) parameters.append("counter", counter);
  try {
    const answer = await getJson("/calendar", parameters);
    if (mine !== generation) return;
    showCalendar(answer, period, zone);
  } catch (error) {
    if (mine !== generation) return;
    hideCalendar(error.message, true);
  }
  document.body.dataset.calendarUpdates = String(Number(document.body.dataset.calendarUpdates || 0) + 1);
}

function instantSeconds(text) {
  return Date.parse(text.replace(/Z$/, ":00Z")) / 1000;
}

function showChart(counts) {
  const times = counts.length ? counts[0].series.map((point) => instantSeconds(point.start)) : [];
  const data = [times, ...counts.map((count) => count.series.map((point) => point.count))];
  const options = {
    width: Math.max(elements.chart.clientWidth - 16, 320),
    height: 320,
    scales: { x: { time: true } },
    series: [
      {},
      ...counts.map((count, index) => ({
        label: count.counter,
        stroke: COLORS[index % COLORS.length],
        width: 2,
        points: { show: times.length <= 60 },
      })),
    ],
    axes: [{ space: 70 }, { label: `events per ${elements.series.value}` }],
  };
  if (chart) chart.destroy();
  chart = new uPlot(options, data, elements.chart);
  document.body.dataset.chartPoints = String(times.length * counts.length);
}

// The top list says what it is: certified exact, or the bound no counter left out of it exceeds.
function topSummary(answer) {
  const what = `${answer.rising ? "rising " : ""}top ${elements.topN.value} of "${answer.prefix}", ${answer.start} – ${answer.end}`;
  if (!answer.top.length) return `${what}: no counter counted in the window`;
  if (answer.exact) return `${what}: exact (certified)`;
  return `${what}: not certified; every counter left out has at most ${answer.bound.toLocaleString("en-US")}`;
}

function showTop(answer) {
  const body = elements.top.tBodies[0];
  body.replaceChildren(
    ...answer.top.map((entry) => {
      const row = document.createElement("tr");
      row.dataset.counter = entry.counter;
      row.classList.toggle("is-retired", Boolean(entry.retired));
      const name = cell(entry.counter, "counter");
      name.title = "chart this counter";
      name.addEventListener("click", () => {
        addCounterOption(entry.counter, true);
        onChange();
      });
      row.append(
        cell(String(entry.rank)),
        name,
        cell(entry.total.toLocaleString("en-US"), "total"),
        cell(entry.previous === undefined ? "" : entry.previous.toLocaleString("en-US"), "rising"),
        cell(entry.increase === undefined ? "" : entry.increase.toLocaleString("en-US"), "rising"),
        retiredCell(entry.retired),
      );
      return row;
    }),
  );
  elements.top.classList.toggle("rising", Boolean(answer.rising));
  elements.top.classList.toggle("no-retired", !answer.top.some((entry) => entry.retired));
  Object.assign(elements.top.dataset, { exact: String(answer.exact), start: answer.start, end: answer.end });
  elements.top.hidden = answer.top.length === 0;
  showStatus(topSummary(answer), false, elements.topStatus);
}

// mine: the refresh this belongs to; an answer that arrives after a newer choice is dropped.
async function refreshTop(mine) {
  const parameters = { prefix: elements.topPrefix.value, n: elements.topN.value, window: elements.window.value };
  if (elements.topRising.checked) parameters.rising = "1";
  try {
    const answer = await getJson("/top", parameters);
    if (mine !== generation) return;
    showTop(answer);
    document.body.dataset.topUpdates = String(Number(document.body.dataset.topUpdates || 0) + 1);
  } catch (error) {
    if (mine !== generation) return;
    elements.top.hidden = true;
    showStatus(error.message, true, elements.topStatus);
  }
}

async function refresh() {
  const counters = chosenCounters();
  const mine = ++generation;
  refreshTop(mine);
  if (!counters.length) {
    showStatus("pick one or more counters");
    showTotals([], new Map());
    hideCalendar("");
    return;
  }
  refreshCalendar(counters, mine);
  const parameters = new URLSearchParams({ window: elements.window.value, series: elements.series.value });
  for (const counter of counters) parameters.append("counter", counter);
  try {
    const [answer, alarms, monthly] = await Promise.all([
      getJson("/counts", parameters),
      alarmsByCounter(),
      monthToDate(counters),
    ]);
    const details = await quantilesOf(counters, answer.counts[0]);
    if (mine !== generation) return; // a newer choice was made meanwhile
    showTotals(answer.counts, details, alarms, monthly);
    showChart(answer.counts);
    const notes = (answer.notes || []).join(" ");
    showStatus(`updated ${new Date().toLocaleTimeString()}${notes ? ` — ${notes}` : ""}`);
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (error) {
    if (mine === generation) showStatus(error.message, true);
  }
}

function schedule() {
  clearInterval(timer);
  if (elements.live.checked) timer = setInterval(refresh, REFRESH_MS);
}

function remember() {
  const state = new URLSearchParams({ window: elements.window.value, series: elements.series.value });
  state.set("top", elements.topPrefix.value);
  state.set("n", elements.topN.value);
  if (elements.topRising.checked) state.set("rising", "1");
  state.set("calendar", elements.calendarPeriod.value);
  state.set("tz", elements.calendarTz.value);
  for (const counter of chosenCounters()) state.append("counter", counter);
  history.replaceState(null, "", `?${state}`);
}

function onChange() {
  remember();
  refresh();
}

async function start() {
  const state = new URLSearchParams(location.search);
  if (state.get("window")) elements.window.value = state.get("window");
  if (state.get("series")) elements.series.value = state.get("series");
  // The top list ranks a public prefix on a public page (where no other is answered), else what the URL says.
  elements.topPrefix.value = state.get("top") ?? (config.prefixes && config.prefixes[0]) ?? "";
  if (state.get("n")) elements.topN.value = state.get("n");
  elements.topRising.checked = state.get("rising") === "1";
  offerMonths();
  if (CALENDAR_CHOICES[state.get("calendar")] && [...elements.calendarPeriod.options].some((o) => o.value === state.get("calendar"))) {
    elements.calendarPeriod.value = state.get("calendar");
  }
  fillZones(state.get("tz"));
  try {
    await loadCounterNames();
  } catch (error) {
    showStatus(`cannot list counters: ${error.message}`, true);
  }
  for (const counter of state.getAll("counter")) addCounterOption(counter, true);
  elements.counters.addEventListener("change", onChange);
  elements.window.addEventListener("change", onChange);
  elements.series.addEventListener("change", onChange);
  elements.live.addEventListener("change", schedule);
  elements.topN.addEventListener("change", onChange);
  elements.topRising.addEventListener("change", onChange);
  elements.calendarPeriod.addEventListener("change", onChange);
  elements.calendarTz.addEventListener("change", onChange);
  document.getElementById("calendar-controls").addEventListener("submit", (event) => event.preventDefault());
  elements.topPrefix.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    onChange();
  });
  document.getElementById("top-controls").addEventListener("submit", (event) => event.preventDefault());
  elements.add.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    const name = elements.add.value.trim();
    if (name) addCounterOption(name, true);
    elements.add.value = "";
    onChange();
  });
  document.getElementById("controls").addEventListener("submit", (event) => event.preventDefault());
  schedule();
  await refresh();
}

start();
