// Loaded with `--import` by alloc-profile.mjs: the first SIGUSR2 starts V8's sampling heap
// profiler counting every allocation (those the collector has since freed included; with
// $ALLOC_PROFILE_LIVE, only those still alive when it stops), the second writes the profile to
// $ALLOC_PROFILE_OUT.
import fs from 'node:fs';
import inspector from 'node:inspector';

const session = new inspector.Session();
session.connect();
let on = false;
process.on('SIGUSR2', () => {
  if (!on) {
    on = true;
    session.post('HeapProfiler.startSampling', {
      samplingInterval: Number(process.env.ALLOC_PROFILE_INTERVAL ?? 256),
      includeObjectsCollectedByMajorGC: !process.env.ALLOC_PROFILE_LIVE,
      includeObjectsCollectedByMinorGC: !process.env.ALLOC_PROFILE_LIVE,
    });
    return;
  }
  const stop = () =>
    session.post('HeapProfiler.stopSampling', (err, r) => {
      fs.writeFileSync(process.env.ALLOC_PROFILE_OUT, JSON.stringify(err ? { error: String(err) } : r.profile));
    });
  // alive means alive: a full collection first (what was promoted and died since is not counted)
  if (process.env.ALLOC_PROFILE_LIVE) session.post('HeapProfiler.collectGarbage', stop);
  else stop();
});
