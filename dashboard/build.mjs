// Builds the dashboard: app.js with uPlot (from package-lock.json's node_modules) bundled by esbuild,
// inlined with its CSS into one self-contained page inside the function's package.
// Usage: node dashboard/build.mjs OUTPUT.html
import { build } from "esbuild";
import { readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const output = process.argv[2];
if (!output) {
  console.error("usage: node dashboard/build.mjs OUTPUT.html");
  process.exit(2);
}

const uplot = JSON.parse(await readFile(join(here, "..", "node_modules", "uplot", "package.json"), "utf8"));
// uPlot's own header is a plain comment that minifying drops; its MIT licence asks that the notice travels along.
const notice = `/*! uPlot ${uplot.version} (c) Leon Sorokin, MIT License, ${uplot.homepage || "https://github.com/leeoniya/uPlot"} */`;
const common = { bundle: true, minify: true, write: false, legalComments: "inline", logLevel: "warning" };
const [script, style] = await Promise.all([
  build({ ...common, entryPoints: [join(here, "app.js")], format: "iife", target: "es2020", banner: { js: notice } }),
  build({ ...common, entryPoints: [join(here, "style.css")], loader: { ".css": "css" } }),
]);
const text = (result) => result.outputFiles[0].text.trim();
// "</" would end the inline element early; the bundles are code, so escaping it changes nothing else.
const safe = (source) => source.replaceAll("</", "<\\/");
const page = (await readFile(join(here, "page.html"), "utf8"))
  .replace("/*__STYLE__*/", () => text(style))
  .replace("/*__SCRIPT__*/", () => safe(text(script)));
await writeFile(output, page);
console.log(`dashboard: ${output} (${Math.round(page.length / 1024)} KB, uPlot bundled)`);
