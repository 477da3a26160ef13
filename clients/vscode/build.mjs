// Bundle the extension (and the Node-only tests) with esbuild.
import { build } from "esbuild";
import { readdirSync } from "node:fs";

const common = { bundle: true, platform: "node", format: "cjs", target: "node18", sourcemap: true, logLevel: "warning" };
await build({ ...common, entryPoints: ["src/extension.ts"], outfile: "out/extension.js", external: ["vscode"] });
const tests = readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => `test/${f}`);
await build({ ...common, entryPoints: tests, outdir: "out/test", outExtension: { ".js": ".js" } });
