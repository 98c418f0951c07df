import { existsSync } from "node:fs";

/**
 * The package's root folder as a file URL ending in "/": the nearest folder above this module
 * holding package.json. The same from source (runtime/) and from the Node build (dist/runtime/),
 * so examples/ and functions/ are found from both.
 */
export const packageRoot: URL = (() => {
  let dir = new URL("./", import.meta.url);
  for (let i = 0; i < 6; i++) {
    if (existsSync(new URL("package.json", dir))) return dir;
    dir = new URL("../", dir);
  }
  return new URL("../", import.meta.url);
})();
