// The page of plm serve: a tab per endpoint that a loaded model serves, each a form over the JSON API.
"use strict";

const TABS = [
  ["generate", "Generate"],
  ["fill-mask", "Fill mask"],
  ["translate", "Translate"],
  ["attention", "Attention"],
  ["embed", "Similarity"],
  ["classify", "Classify"],
];

const $ = (id) => document.getElementById(id);
let MODELS = [];

function element(tag, properties = {}, children = []) {
  const node = Object.assign(document.createElement(tag), properties);
  node.append(...children);
  return node;
}

const KEY = "plm-api-key";  // where the page keeps the server's API key, for this tab's session

// fetch with the API key, when the server wants one (plm serve --api-key): asked for when the server first
// answers 401, and again if it refuses the key given; cancelling the question leaves the 401 as the answer.
async function request(path, options = {}) {
  for (;;) {
    const key = sessionStorage.getItem(KEY);
    const headers = {...options.headers, ...(key ? {Authorization: `Bearer ${key}`} : {})};
    const response = await fetch(path, {...options, headers});
    if (response.status !== 401) return response;
    const given = prompt(key ? "The server refused that API key. Its API key:" : "This server needs its API key:");
    if (!given) return response;
    sessionStorage.setItem(KEY, given.trim());
  }
}

async function post(path, body) {
  const response = await request(path, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

function showError(name, error) {
  const box = $(`${name}-error`);
  box.hidden = !error;
  box.textContent = error ? error.message : "";
}

// Run a form's request with its button disabled and its errors shown beside it.
function onSubmit(name, work) {
  $(`${name}-form`).addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = $(`${name}-run`);
    button.disabled = true;
    showError(name, null);
    try {
      await work();
    } catch (error) {
      showError(name, error);
    } finally {
      button.disabled = false;
    }
  });
}

function model(name) {
  return $(`${name}-model`).value;
}

function number(id) {
  const value = $(id).value.trim();
  return value === "" ? null : Number(value);
}

// --- tabs ---------------------------------------------------------------------------------------

function showTab(name) {
  for (const [tab] of TABS) {
    const button = $(`tab-${tab}`);
    if (button) button.setAttribute("aria-selected", String(tab === name));
    $(`panel-${tab}`).hidden = tab !== name;
  }
  history.replaceState(null, "", `#${name}`);
}

async function start() {
  const response = await request("/models");
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error);
  MODELS = answer.models;
  $("models-summary").textContent = MODELS.map((m) => `${m.name} (${m.kind}, ${m.family})`).join(" · ");
  const served = TABS.filter(([tab]) => MODELS.some((m) => m.capabilities.includes(tab)));
  for (const [tab, title] of served) {
    const button = element("button", {id: `tab-${tab}`, type: "button", textContent: title});
    button.setAttribute("role", "tab");
    button.addEventListener("click", () => showTab(tab));
    $("tabs").append(button);
    const select = $(`${tab}-model`);
    for (const m of MODELS.filter((m) => m.capabilities.includes(tab))) {
      select.append(element("option", {value: m.name, textContent: m.name}));
    }
  }
  const wanted = location.hash.slice(1);
  showTab(served.some(([tab]) => tab === wanted) ? wanted : served[0][0]);
  prepareFillMask();
  prepareClassify();
  $("attention-model").addEventListener("change", () => setChoices($("attention-layer"), 1, false));
}

// --- generate: tokens coloured by the model's probability, streamed as server-sent events --------

function tokenColour(probability) {
  return `hsl(${Math.round(120 * probability)}, 80%, 85%)`;
}

async function generate() {
  const output = $("generate-output");
  const prompt = $("generate-prompt").value;
  output.replaceChildren(element("span", {className: "prompt", textContent: prompt}));
  const body = {
    model: model("generate"), prompt, max_new_tokens: number("generate-max"), temperature: number("generate-temperature"),
    top_k: number("generate-top-k"), top_p: number("generate-top-p"), seed: number("generate-seed"), stream: true,
  };
  const response = await request("/generate", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error((await response.json()).error);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event.type === "token") output.append(tokenSpan(event.data));
      if (event.type === "error") throw new Error(event.data.error);
    }
  }
}

function parseEvent(text) {
  let type = "message", data = "";
  for (const line of text.split("\n")) {
    if (line.startsWith("event: ")) type = line.slice(7);
    if (line.startsWith("data: ")) data += line.slice(6);
  }
  return {type, data: JSON.parse(data)};
}

function tokenSpan(token) {
  const probability = Math.exp(token.logprob);
  // A line break shows as ↵ before it, so that a token of newlines has something to colour.
  const span = element("span", {className: "token", textContent: token.text.replaceAll("\n", "↵\n")});
  span.style.background = tokenColour(probability);
  span.title = `p = ${probability.toFixed(3)} (log p = ${token.logprob.toFixed(2)}), token ${token.id}`;
  return span;
}

// --- fill-mask: each mask's guesses as bars ------------------------------------------------------

function prepareFillMask() {
  const update = () => {
    const chosen = MODELS.find((m) => m.name === model("fill-mask"));
    if (chosen) $("fill-mask-text").value = `The cat ${chosen.mask_token || "[MASK]"} the book.`;
  };
  $("fill-mask-model").addEventListener("change", update);
  update();
}

function bars(rows) {
  return rows.map(([label, value]) => element("div", {className: "bar-row"}, [
    element("span", {textContent: label}),
    element("div", {className: "bar"}, [element("span", {style: `width: ${(100 * value).toFixed(1)}%`})]),
    element("span", {className: "value", textContent: value.toFixed(3)}),
  ]));
}

async function fillMask() {
  const answer = await post("/fill-mask", {model: model("fill-mask"), text: $("fill-mask-text").value, guesses: number("fill-mask-guesses")});
  $("fill-mask-output").replaceChildren(...answer.masks.map((guesses, index) => element("div", {className: "mask"}, [
    element("h3", {textContent: `mask ${index + 1}`}),
    ...bars(guesses.map((g) => [g.token, g.probability])),
  ])));
}

// --- heatmaps: attention maps and similarity matrices as tables ----------------------------------

// Attention weights shade from 0 to the largest; similarities (shown with their numbers) from the least to the largest.
function heatmap(container, caption, rows, columns, weights, numbers = false) {
  const least = numbers ? Math.min(...weights.flat()) : 0;
  const span = Math.max(1e-9, Math.max(...weights.flat()) - least);
  const head = element("tr", {}, [element("th"), ...columns.map((c) => element("th", {}, [element("span", {textContent: c})]))]);
  const body = weights.map((row, i) => element("tr", {}, [
    element("th", {textContent: rows[i]}),
    ...row.map((w, j) => {
      const cell = element("td", {title: `${rows[i]} → ${columns[j]}: ${w.toFixed(3)}`, textContent: numbers ? w.toFixed(2) : ""});
      const strength = Math.max(0, w - least) / span;
      cell.style.background = `rgba(37, 99, 235, ${strength.toFixed(3)})`;
      cell.style.color = strength > 0.55 ? "white" : "inherit";
      return cell;
    }),
  ]));
  const table = element("table", {}, [element("thead", {}, [head]), element("tbody", {}, body)]);
  container.classList.toggle("numbers", numbers);
  container.replaceChildren(element("p", {className: "caption", textContent: caption}), table);
}

async function translate() {
  const answer = await post("/translate", {model: model("translate"), text: $("translate-text").value, beam: number("translate-beam")});
  $("translate-output").textContent = answer.translation || "(empty)";
  if (answer.attention) {
    heatmap($("translate-heatmap"), `${answer.title}: rows are the translation's tokens, columns the source's`,
            answer.target_tokens, answer.source_tokens, answer.attention);
  } else {
    $("translate-heatmap").replaceChildren(element("p", {className: "muted", textContent: "this model has no attention"}));
  }
}

function setChoices(select, count, withMean) {
  const kept = select.value;
  const options = Array.from({length: count}, (_, i) => element("option", {value: String(i), textContent: String(i)}));
  if (withMean) options.push(element("option", {value: "mean", textContent: "all (mean)"}));
  select.replaceChildren(...options);
  if ([...select.options].some((o) => o.value === kept)) select.value = kept;
}

async function attention() {
  const head = $("attention-head").value;
  const answer = await post("/attention", {
    model: model("attention"), text: $("attention-text").value, layer: Number($("attention-layer").value),
    head: head === "mean" ? null : Number(head),
  });
  setChoices($("attention-layer"), answer.layers, false);
  setChoices($("attention-head"), answer.heads, true);
  heatmap($("attention-heatmap"), `${answer.title}: each row's attention over the columns`,
          answer.target_tokens, answer.source_tokens, answer.attention);
}

async function embed() {
  const texts = $("embed-texts").value.split("\n").map((t) => t.trim()).filter(Boolean);
  const answer = await post("/embed", {model: model("embed"), texts});
  const labels = texts.map((t, i) => `${i + 1}. ${t.length > 40 ? t.slice(0, 39) + "…" : t}`);
  heatmap($("embed-output"), `cosine similarity (${answer.pooling})`, labels, texts.map((_, i) => String(i + 1)),
          answer.similarity, true);
}

// --- classify: the inputs the model's task reads, and its answer ---------------------------------

const EXAMPLES = {
  text: "The cat reads the book.", text_pair: "", question: "Who reads the book?",
  context: "The cat reads the book.", endings: "the book.\na value.", prefix: "",
};

function prepareClassify() {
  const update = () => {
    const chosen = MODELS.find((m) => m.name === model("classify"));
    if (!chosen) return;
    $("classify-inputs").replaceChildren(...chosen.inputs.map((name) => {
      const multi = name === "endings" || name === "context";
      const input = element(multi ? "textarea" : "input", {id: `classify-${name}`, value: EXAMPLES[name]});
      if (!multi) input.type = "text";
      const hint = name === "endings" ? " (one a line)" : name === "text_pair" ? " (optional)" : "";
      return element("label", {className: "block", textContent: name.replace("_", " ") + hint}, [input]);
    }));
  };
  $("classify-model").addEventListener("change", update);
  update();
}

async function classify() {
  const chosen = MODELS.find((m) => m.name === model("classify"));
  const body = {model: chosen.name};
  for (const name of chosen.inputs) {
    const value = $(`classify-${name}`).value;
    if (name === "endings") body.endings = value.split("\n").map((e) => e.trim()).filter(Boolean);
    else if (value !== "" || name !== "text_pair") body[name] = value;
  }
  // Every task's answer is its "prediction", as plm predict writes it; what it is depends on the task.
  const answer = await post("/classify", body);
  const output = $("classify-output");
  if (chosen.task === "classify") {
    output.replaceChildren(element("h3", {textContent: `prediction: ${answer.prediction}`}), ...bars(Object.entries(answer.probabilities)));
  } else if (chosen.task === "tag") {
    output.replaceChildren(element("div", {className: "tags"}, answer.words.map((word, i) =>
      element("span", {className: "tag"}, [word, element("small", {textContent: answer.prediction[i]})]))));
  } else if (chosen.task === "qa") {
    output.replaceChildren(element("h3", {textContent: `answer: ${answer.prediction || "(no answer)"}`}),
      ...answer.candidates.map((c) => element("div", {className: "muted", textContent: `${c.text}  (score ${c.score.toFixed(2)})`})));
  } else if (chosen.task === "choice") {
    output.replaceChildren(element("h3", {textContent: `choice: ${answer.prediction + 1}`}), ...bars(answer.probabilities.map((p, i) => [`${i + 1}. ${body.endings[i]}`, p])));
  } else {
    output.replaceChildren(element("h3", {textContent: `score: ${answer.prediction.toFixed(3)}`}));
  }
}

onSubmit("generate", generate);
onSubmit("fill-mask", fillMask);
onSubmit("translate", translate);
onSubmit("attention", attention);
onSubmit("embed", embed);
onSubmit("classify", classify);
start().catch((error) => { $("models-summary").textContent = `cannot reach the server: ${error.message}`; });
