// Headless Chromium for the playground scripts: Debian's chromium driven by playwright-core
// (from VOXTRAL_NODE_MODULES), a throwaway profile, and a watch on requests that leave the
// server's origin (the page must make none).
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Opens `url`'s origin in a fresh browser. `microphone`: a WAV file that Chromium's fake
// capture device plays as the microphone, with the permission granted. Returns the page, the
// list that collects external requests, and close().
export async function open(url, { microphone = null } = {}) {
  const modules = process.env.VOXTRAL_NODE_MODULES;
  if (!modules) throw new Error("VOXTRAL_NODE_MODULES is not set (eval \"$(scripts/setup.sh --env)\")");
  const { chromium } = createRequire(join(modules, "noop.js"))("playwright-core");
  const profile = mkdtempSync(join(tmpdir(), "voxtral-playground-"));
  const args = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    // The network is closed: no update checks, sync or other background requests.
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    // Playback advances without a sound card either way; this keeps a desktop quiet.
    "--mute-audio",
  ];
  if (microphone) {
    args.push("--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${microphone}`,
      "--use-fake-ui-for-media-stream");
  }
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.VOXTRAL_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args,
    viewport: { width: 900, height: 640 },
    acceptDownloads: true,
  });
  const origin = new URL(url).origin;
  if (microphone) await context.grantPermissions(["microphone"], { origin });
  const page = context.pages()[0] || await context.newPage();
  const external = [];
  page.on("console", (m) => process.stderr.write(`[page ${m.type()}] ${m.text()}\n`));
  page.on("pageerror", (e) => process.stderr.write(`[page error] ${e.message}\n`));
  page.on("request", (r) => {
    const address = r.url();
    if (/^(https?|wss?):/.test(address) && new URL(address).origin !== origin
        && new URL(address).host !== new URL(origin).host) {
      external.push(address);
    }
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { page, origin, external, close };
}
