// Preload (`node --import`) for a child process that runs our TypeScript sources as they are (Node's type stripping):
// an import of `./x.js`, as the sources spell it for the build, finds `./x.ts` beside it.
import { registerHooks } from 'node:module';

registerHooks({
  resolve(specifier, context, next) {
    try {
      return next(specifier, context);
    } catch (err) {
      if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !/^\.{1,2}\/.*\.js$/.test(specifier)) throw err;
      return next(`${specifier.slice(0, -3)}.ts`, context);
    }
  },
});
