// Which page a URL is: what a pageview reports, and what tells one page from another.

/** The parts of a URL the script reads: `location`, or a URL object. */
export interface Where {
  hostname: string;
  pathname: string;
  search: string;
  hash: string;
}

/** The page's path and query string as the visitor means them. */
export interface Page {
  path: string;
  query: string;
}

/**
 * The page of a URL. A hash route (`/#/users/5?tab=2`, what hash-mode routers write)
 * stands for the path and query, as those routers mean it; any other hash is a place on
 * the same page and is ignored. The query before the hash counts when the route has none.
 */
export function pageOf(where: Where): Page {
  const route = where.hash.startsWith('#/') ? new URL(where.hash.slice(1), 'http://h') : where;
  return { path: route.pathname, query: route.search || where.search };
}

/** Equal for two URLs of the same page, so that an SPA navigation is counted once. */
export function pageKey(where: Where): string {
  const page = pageOf(where);
  return page.path + page.query;
}
