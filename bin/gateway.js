#!/usr/bin/env node
// The `gateway` command. The TypeScript sources are compiled to dist/ by `npm run build`
// (run automatically by `npm start` and `npm test`).
import { main } from '../dist/cli/main.js';
main(process.argv.slice(2)).then(
  (code) => { if (typeof code === 'number') process.exitCode = code; },
  (err) => { console.error(err instanceof Error ? err.message : err); process.exitCode = 1; },
);
