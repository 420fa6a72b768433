// Bundles src/ into the anywidget assets the Python side loads:
//   ../surgeon_widgets/static/explorer.js  (ESM, `export default { render }`)
//   ../surgeon_widgets/static/explorer.css
// `node build.mjs --watch` rebuilds on change (pair with ANYWIDGET_HMR=1, see README.md).
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(here, "../surgeon_widgets/static");
const watch = process.argv.includes("--watch");

/** @type {import("esbuild").BuildOptions} */
const options = {
  absWorkingDir: here,
  entryPoints: [
    { in: "src/index.js", out: "explorer" },
    { in: "src/styles.css", out: "explorer" },
  ],
  outdir,
  bundle: true,
  format: "esm",
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  legalComments: "none",
  logLevel: "info",
  banner: { js: "// Generated from js/src by `npm run build`. Do not edit.", css: "/* Generated from js/src by `npm run build`. Do not edit. */" },
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
