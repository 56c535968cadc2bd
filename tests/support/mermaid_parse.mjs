// Parse Mermaid files with Mermaid's own parser (mermaid.parse, in Node with jsdom for its DOM needs).
// Usage: node mermaid_parse.mjs FILE...; prints one JSON line per file: {"file", "ok", "error"}.
import fs from "fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!DOCTYPE html><body></body>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
for (const file of process.argv.slice(2)) {
  try {
    await mermaid.parse(fs.readFileSync(file, "utf8"));
    console.log(JSON.stringify({ file, ok: true }));
  } catch (e) {
    console.log(JSON.stringify({ file, ok: false, error: String((e && e.message) || e) }));
  }
}
