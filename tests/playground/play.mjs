// Drives the /playground page in headless Chromium (tests/it/playground.rs runs it): for each
// format in turn it picks the format, clicks Speak and waits until the audio element plays
// with currentTime > 0, or, with "expect": "error", until the page shows an error.
//   node play.mjs '{"url": ".../playground?max_frames=40", "formats": ["mp3", "opus"],
//                   "key": null, "text": null, "expect": "playing"}'
// Prints one JSON line, what the page did; exits non-zero when it did not get there.
import { open } from "./browser.mjs";

const options = JSON.parse(process.argv[2]);
const { page, origin, external, close } = await open(options.url);
const result = { runs: [] };
let request = null;
try {
  page.on("request", (r) => {
    if (r.url() === `${origin}/v1/audio/speech`) request = JSON.parse(r.postData());
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
  if (external.length) result.external = external;
  console.log(JSON.stringify(result));
} catch (e) {
  result.status = await page.locator("#status").textContent().catch(() => null);
  console.log(JSON.stringify({ ...result, failure: e.message }));
  process.exitCode = 1;
} finally {
  await close();
}
