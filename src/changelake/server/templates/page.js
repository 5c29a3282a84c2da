// Draws the page's charts; every data-poll-ms milliseconds (on main) fetches the page's content
// again (?fragment=1) and swaps it in.
const main = document.getElementById("main");

function drawCharts() {
  for (const node of document.querySelectorAll("script[data-chart]")) {
    const figure = JSON.parse(node.textContent);
    Plotly.react(node.dataset.chart, figure.data, figure.layout, {displayModeBar: false});
  }
}
async function poll() {
  const url = new URL(location.href);
  url.searchParams.set("fragment", "1");
  try {
    const answer = await fetch(url, {credentials: "same-origin"});
    if (answer.ok) {
      main.innerHTML = await answer.text();
      document.getElementById("updated").textContent = " · updated " +
        new Date().toLocaleTimeString();
      drawCharts();
    }
  } catch (e) { document.getElementById("updated").textContent = " · service unreachable"; }
}
drawCharts();
setInterval(poll, Number(main.dataset.pollMs));
