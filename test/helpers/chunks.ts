/**
 * Seeded random chunkings of a byte stream, for the parsers that must give the same result
 * however the bytes arrive: each call returns a generator of `rounds` chunkings, chunks of 1 to
 * `max` bytes, reproducible from `seed`.
 */
export function* randomChunkings<T extends Uint8Array>(bytes: T, seed: number, max: number, rounds: number): Generator<T[]> {
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let round = 0; round < rounds; round++) {
    const chunks: T[] = [];
    for (let i = 0; i < bytes.length;) {
      const n = 1 + Math.floor(rand() * max);
      chunks.push(bytes.subarray(i, i + n) as T);
      i += n;
    }
    yield chunks;
  }
}
