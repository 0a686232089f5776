// Drives every tab of /playground in headless Chromium (tests/it/playground.rs runs it), with
// Chromium's fake microphone playing `wav`; first enters `key` when the server asks for one:
//   Speak: each model of `speak` in turn, with its default voice; waits until the audio plays
//     and the whole response is in, then downloads it;
//   Clone: records from the microphone for `clone.model`, drops `wav` as a file for
//     `drop.model`, speaks with the recorded voice, deletes the dropped one;
//   Transcribe: uploads `wav` as text, srt and vtt, then transcribes the microphone live with
//     server VAD until a turn is completed;
// and saves a screenshot of each tab (and of the Speak tab at phone width) under `shots`.
//   node tour.mjs '{"url": ".../playground?max_frames=8", "key": "k", "wav": "clip.wav", "shots": "dir",
//                   "speak": ["voxtral", "xtts"], "clone": {"model": "base"},
//                   "drop": {"model": "xtts"}}'
// Prints one JSON line, what the page did; exits non-zero when it did not get there.
import { open } from "./browser.mjs";
import { readFileSync, statSync } from "node:fs";
import { basename, join } from "node:path";

const options = JSON.parse(process.argv[2]);
const { page, origin, external, close } = await open(options.url, { microphone: options.wav });
const result = { speak: [], step: "start" };
const WAIT = { timeout: 60_000 };
let request = null;

const text = (selector) => page.locator(selector).textContent();
const step = (name) => { result.step = name; process.stderr.write(`[tour] ${name}\n`); };
const shot = (name) => page.screenshot({ path: join(options.shots, `${name}.png`), fullPage: true });

async function tab(name) {
  await page.click(`#tab-${name}`);
  await page.waitForSelector(`#panel-${name}:not([hidden])`);
}

// Waits for `predicate`; fails with the page's message as soon as `errorSelector` shows an
// error.
async function waitUnlessError(predicate, arg, errorSelector) {
  const ok = page.waitForFunction(predicate, arg, WAIT);
  ok.catch(() => {});
  const failed = page.waitForSelector(`${errorSelector}.error`, WAIT)
    .then((e) => e.textContent(), () => new Promise(() => {}));
  const message = await Promise.race([ok.then(() => null), failed]);
  if (message !== null) throw new Error(message);
}

// The Speak tab's state with `model` (and `voice`, else its default) picked.
async function pick(model, voice) {
  await tab("speak");
  await page.selectOption("#model", model);
  await page.waitForFunction((m) => document.querySelector("#voice").dataset.model === m, model);
  if (voice) await page.selectOption("#voice", voice);
  return page.evaluate(() => {
    const visible = (id) => !document.getElementById(id).hidden;
    const voice = document.querySelector("#voice");
    return {
      voice: voice.value,
      voiceLanguage: voice.selectedOptions[0] ? voice.selectedOptions[0].dataset.language : null,
      groups: [...voice.querySelectorAll("optgroup")].map((g) => g.label),
      sample: document.querySelector("#sample").value,
      language: visible("language-field"),
      instructions: visible("instructions-field"),
      info: document.querySelector("#model-info").textContent,
      speakable: !document.querySelector("#speak").disabled,
      stream: document.querySelector("#stream").checked,
    };
  });
}

// Clicks Speak; waits until the audio plays, the response is complete and the waveform is
// drawn; downloads the file.
async function speak() {
  request = null;
  await page.evaluate(() => {
    window.events = [];
    const audio = document.querySelector("#player");
    if (!window.listening) {
      window.listening = true;
      for (const e of ["playing", "ended", "error"]) audio.addEventListener(e, () => window.events.push(e));
    }
  });
  await page.click("#speak");
  await waitUnlessError(() => {
    const audio = document.querySelector("#player");
    return window.events.includes("playing") && audio.currentTime > 0
      && Number(document.querySelector("#wave").dataset.columns) > 0
      && document.querySelector("#status").textContent.includes(" KiB after ");
  }, null, "#status");
  const run = await page.evaluate(() => {
    const audio = document.querySelector("#player");
    return {
      events: window.events, currentTime: audio.currentTime, mode: audio.dataset.mode,
      status: document.querySelector("#status").textContent,
      columns: Number(document.querySelector("#wave").dataset.columns),
    };
  });
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#download")]);
  run.download = { name: download.suggestedFilename(), bytes: statSync(await download.path()).size };
  return { request, ...run };
}

// Creates a voice from the clip in place; returns the Clone tab's list afterwards.
async function createVoice(name, transcript) {
  await page.fill("#clone-name", name);
  if (transcript) await page.fill("#clone-transcript", transcript);
  await page.click("#clone-upload");
  await waitUnlessError((n) => document.querySelector("#clone-status").textContent.startsWith(`Created the voice ${n} `)
    && [...document.querySelectorAll("#voice-list li")].some((li) => li.textContent.startsWith(`${n} (`)), name, "#clone-status");
  return voiceList();
}
const voiceList = () => page.$$eval("#voice-list li[data-id]", (items) => items.map((li) => ({ id: li.dataset.id, text: li.firstChild.textContent })));

try {
  page.on("request", (r) => {
    if (r.url() === `${origin}/v1/audio/speech`) request = JSON.parse(r.postData());
  });
  step("load");
  await page.goto(options.url);
  if (options.key) {
    await page.locator("#key").waitFor({ state: "visible" });
    await page.fill("#key", options.key);
    await page.press("#key", "Enter");
  }
  await page.waitForFunction(() => document.querySelector("#voice").dataset.model);
  result.keyField = await page.isVisible("#key-field");
  result.tabs = await page.evaluate(() => Object.fromEntries(["speak", "clone", "transcribe"]
    .map((t) => [t, !document.getElementById(`tab-${t}`).hidden])));
  result.models = await page.$$eval("#model option", (o) => o.map((x) => x.value));
  result.cloneModels = await page.$$eval("#clone-model option", (o) => o.map((x) => x.value));
  result.sttModels = await page.$$eval("#stt-model option", (o) => o.map((x) => x.value));

  // Keyboard: the arrow keys move between the tabs.
  await page.focus("#tab-speak");
  await page.keyboard.press("ArrowRight");
  result.keyboard = await page.evaluate(() => [document.activeElement.id,
    document.querySelector("#panel-clone").hidden ? "hidden" : "shown"]);
  await page.keyboard.press("ArrowLeft");

  for (const model of options.speak) {
    step(`speak ${model}`);
    const state = await pick(model);
    result.speak.push({ model, ...state, ...(await speak()) });
    if (result.speak.length === 1) {
      // The whole waveform in the picture.
      await page.waitForFunction(() => window.events.includes("ended"), null, WAIT);
      await shot("speak");
    }
  }
  result.beforeClone = await pick(options.clone.model);

  step("record");
  await tab("clone");
  await page.selectOption("#clone-model", options.clone.model);
  await page.waitForSelector("#voice-list li");
  await page.click("#record");
  await page.waitForFunction(() => document.querySelector("#record").textContent === "Stop");
  await page.waitForTimeout(1500);
  await page.click("#record");
  await page.waitForFunction(() => !document.querySelector("#clone-preview").hidden);
  result.recorded = await text("#clip-info");
  result.cloned = await createVoice("Mic voice", "Hello there, this is my voice.");
  await shot("clone");

  step("drop");
  await page.selectOption("#clone-model", options.drop.model);
  await page.waitForFunction(() => !document.querySelector("#voice-list li[data-id]"));
  await page.evaluate(([b64, name]) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const data = new DataTransfer();
    data.items.add(new File([bytes], name, { type: "audio/wav" }));
    document.querySelector("#drop").dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
  }, [readFileSync(options.wav).toString("base64"), basename(options.wav)]);
  result.dropped = await createVoice("Dropped voice");
  result.droppedPicker = (await pick(options.drop.model)).groups;

  step("speak with the recorded voice");
  const recorded = result.cloned.find((v) => v.text.startsWith("Mic voice ("));
  const withVoice = await pick(options.clone.model, recorded.id);
  result.clonedSpeak = { ...withVoice, ...(await speak()) };

  step("delete");
  await tab("clone");
  await page.selectOption("#clone-model", options.drop.model);
  await page.waitForSelector("#voice-list li[data-id]");
  await page.click("#voice-list li[data-id] button");
  await page.waitForFunction(() => !document.querySelector("#voice-list li[data-id]"));
  result.deleted = await text("#clone-status");

  step("transcribe a file");
  await tab("transcribe");
  await page.setInputFiles("#stt-file", options.wav);
  result.file = {};
  for (const format of ["text", "srt", "vtt"]) {
    await page.selectOption("#stt-format", format);
    await page.click("#stt-upload");
    await waitUnlessError(() => document.querySelector("#stt-status").textContent.startsWith("Transcribed in"), null, "#stt-status");
    result.file[format] = await text("#stt-result");
  }

  step("transcribe live");
  await page.click("#live");
  await waitUnlessError(() => {
    const t = document.querySelector("#live-transcript").dataset;
    return Number(t.completed) >= 1 && Number(t.deltas) >= 1;
  }, null, "#live-status");
  await shot("transcribe");
  await page.click("#live");
  await page.waitForFunction(() => document.querySelector("#live").textContent === "Start", null, WAIT);
  result.live = await page.evaluate(() => {
    const t = document.querySelector("#live-transcript");
    return {
      turns: Number(t.dataset.turns), deltas: Number(t.dataset.deltas), completed: Number(t.dataset.completed),
      items: [...t.querySelectorAll("p")].map((p) => ({ text: p.textContent, open: p.className === "open" })),
      status: document.querySelector("#live-status").textContent,
    };
  });

  step("phone");
  await page.setViewportSize({ width: 390, height: 844 });
  await tab("speak");
  result.phone = await page.evaluate(() => ({ scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth }));
  await shot("phone");
  step("done");
  if (external.length) result.external = external;
  console.log(JSON.stringify(result));
} catch (e) {
  result.statuses = await page.$$eval(".status", (s) => s.map((x) => `${x.id}: ${x.textContent}`)).catch(() => null);
  if (external.length) result.external = external;
  console.log(JSON.stringify({ ...result, failure: e.message }));
  process.exitCode = 1;
} finally {
  await close();
}
