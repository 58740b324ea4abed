/**
 * Waits, if need be, until at least `need` ms remain in the current minute of the clock `now`
 * reads (epoch ms), so a burst counted per clock minute (RPM) does not straddle two. `now` is the
 * clock of whatever counts: Redis's TIME for the shared counters, this process's for the degraded
 * fallback.
 */
export async function roomInMinute(need: number, now: () => number | Promise<number> = Date.now): Promise<void> {
  const into = (await now()) % 60_000;
  if (60_000 - into < need) await new Promise((r) => setTimeout(r, 60_000 - into + 50));
}
