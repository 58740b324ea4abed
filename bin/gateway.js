#!/usr/bin/env node
// The `gateway` command. Runs the compiled dist/; builds it first only when it is missing or its
// sources changed and TypeScript is installed (see scripts/build.mjs), so a production copy
// without dev dependencies starts without compiling.
import { ensureBuilt } from '../scripts/build.mjs';

try {
  ensureBuilt();
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
}
const { main } = await import('../dist/cli/main.js');
main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  },
);
