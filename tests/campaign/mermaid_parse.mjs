// Parse mermaid charts (a JSON list on stdin) with mermaid itself under jsdom; print [{ok, type|error}] as JSON.
import { JSDOM } from "jsdom";
const dom = new JSDOM("<!DOCTYPE html><body></body>", { pretendToBeVisual: true });
globalThis.window = dom.window; globalThis.document = dom.window.document;
globalThis.DOMParser = dom.window.DOMParser; globalThis.Element = dom.window.Element;
Object.defineProperty(globalThis, "navigator", { value: dom.window.navigator, configurable: true });
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });
let text = "";
for await (const chunk of process.stdin) text += chunk;
const charts = JSON.parse(text);
const out = [];
for (const c of charts) {
  try { const r = await mermaid.parse(c); out.push({ ok: true, type: r.diagramType }); }
  catch (e) { out.push({ ok: false, error: String(e.message || e).slice(0, 300) }); }
}
console.log(JSON.stringify(out));
