/**
 * A `use:` package whose "exports" lack the subpath: the reason reads as Node words it, also when
 * the error crossed from Node's hooks thread with only its code and arguments (seen on Node 20 in
 * CI: `ERR_PACKAGE_PATH_NOT_EXPORTED <package folder> <subpath> <base>`).
 */
import t from 'tap';
import { readableResolutionError } from '../../core/plugin-modules.js';

t.test('the bare code and arguments become the sentence Node writes', async (t) => {
  const e = readableResolutionError(
    new Error('ERR_PACKAGE_PATH_NOT_EXPORTED /srv/node_modules/tagger/ ./quiet /srv/conf/gateway.yaml'),
  ) as Error & {
    code?: string;
  };
  t.equal(
    e.message,
    `Package subpath './quiet' is not defined by "exports" in /srv/node_modules/tagger/package.json imported from /srv/conf/gateway.yaml`,
  );
  t.equal(e.code, 'ERR_PACKAGE_PATH_NOT_EXPORTED');
  const main = readableResolutionError(
    new Error('ERR_PACKAGE_PATH_NOT_EXPORTED /srv/node_modules/tagger/ . /srv/conf/gateway.yaml'),
  ) as Error;
  t.equal(main.message, 'No "exports" main defined in /srv/node_modules/tagger/package.json imported from /srv/conf/gateway.yaml');
});

t.test('an error that says what it is already is passed on as it is', async (t) => {
  const e = new Error(`Cannot find package 'tagr' imported from /srv/conf/gateway.yaml`);
  t.equal(readableResolutionError(e), e);
});
