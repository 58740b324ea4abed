/**
 * Values derived once per object: a key, user or group of the config, a frozen claim, a set of
 * secrets. The object is the cache key (a WeakMap), so what was made from it goes when it goes, and
 * an object that replaces it (a reload, an admin change) gets its own. Only for values derived from
 * what the object holds when first asked: an object changed in place keeps its first value.
 */
export function perObject<K extends object, V>(make: (k: K) => V): (k: K) => V {
  const made = new WeakMap<K, V>();
  return (k) => {
    let v = made.get(k);
    if (v === undefined) made.set(k, (v = make(k)));
    return v;
  };
}
