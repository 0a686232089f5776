// Drives the /playground page in headless Chromium (tests/it/playground.rs runs it): for each
// format in turn it picks the format, clicks Speak and waits until the audio element plays
// with currentTime > 0, or, with "expect": "error", until the page shows an error.
//   node play.mjs '{"url": ".../playground?max_frames=40", "formats": ["mp3", "opus"],
//                   "key": null, "text": null, "expect": "playing"}'
// Prints one JSON line, what the page did; exits non-zero when it did not get there.
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const options = JSON.parse(process.argv[2]);
const modules = process.env.VOXTRAL_NODE_MODULES;
if (!modules) throw new Error("VOXTRAL_NODE_MODULES is not set (eval \"$(scripts/setup.sh --env)\")");
const { chromium } = createRequire(join(modules, "noop.js"))("playwright-core");

const profile = mkdtempSync(join(tmpdir(), "voxtral-playground-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.VOXTRAL_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    // The network is closed: no update checks, sync or other background requests.
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    // Playback advances without a sound card either way; this keeps a desktop quiet.
    "--mute-audio",
  ],
});
const origin = new URL(options.url).origin;
const result = { runs: [] };
let request = null;
const page = context.pages()[0] || await context.newPage();
try {
  page.on("console", (m) => process.stderr.write(`[page ${m.type()}] ${m.text()}\n`));
  page.on("pageerror", (e) => process.stderr.write(`[page error] ${e.message}\n`));
  page.on("request", (r) => {
    const url = r.url();
    if (url === `${origin}/v1/audio/speech`) request = JSON.parse(r.postData());
    else if (/^(https?|wss?):/.test(url) && new URL(url).origin !== origin) {
      (result.external ||= []).push(url);
    }
  });
  await page.goto(options.url);
  if (options.key) {
    await page.locator("#key").waitFor({ state: "visible" });
    await page.fill("#key", options.key);
    await page.press("#key", "Enter");
  }
  await page.waitForFunction(() => document.querySelector("#voice").options.length > 0);
  result.voices = await page.locator("#voice option").count();
  if (options.text !== null && options.text !== undefined) await page.fill("#text", options.text);
  for (const format of options.formats) {
    await page.selectOption("#format", format);
    request = null;
    await page.evaluate(() => {
      window.events = [];
      window.statusAtPlaying = null;
      const audio = document.querySelector("#player");
      if (!window.listening) {
        window.listening = true;
        for (const e of ["playing", "ended", "error"]) {
          audio.addEventListener(e, () => {
            if (e === "playing" && window.statusAtPlaying === null) {
              window.statusAtPlaying = document.querySelector("#status").textContent;
            }
            window.events.push(e);
          });
        }
      }
    });
    // A real click: the user gesture lets the page start playback.
    await page.click("#speak");
    if (options.expect === "error") {
      await page.waitForSelector("#status.error", { timeout: 60_000 });
    } else {
      await page.waitForFunction(() => {
        const audio = document.querySelector("#player");
        return window.events.includes("playing") && audio.currentTime > 0;
      }, null, { timeout: 60_000 });
    }
    const run = await page.evaluate(() => {
      const audio = document.querySelector("#player");
      return {
        events: window.events, currentTime: audio.currentTime, paused: audio.paused,
        mode: audio.dataset.mode, statusAtPlaying: window.statusAtPlaying,
        status: document.querySelector("#status").textContent,
      };
    });
    result.runs.push({ format, request, ...run });
  }
  console.log(JSON.stringify(result));
} catch (e) {
  result.status = await page.locator("#status").textContent().catch(() => null);
  console.log(JSON.stringify({ ...result, failure: e.message }));
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
