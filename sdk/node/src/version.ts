/** This package's version, as in package.json (a unit test keeps them equal). */
export const VERSION = '0.2.0';
