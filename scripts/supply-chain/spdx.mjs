// SPDX licence expressions, as crates (Cargo.toml `license`) and npm packages
// (package.json `license`) write them: identifiers joined by AND / OR, `WITH` an
// exception, parentheses. Cargo's legacy `/` separator ("MIT/Apache-2.0") reads as OR.
//
// parse() gives a tree; allows() says whether a set of accepted licences satisfies it:
// OR needs one accepted branch, AND needs every branch, `A WITH E` needs the exact
// string "A WITH E" in the accepted set.

/** @typedef {{ type: 'id', id: string } | { type: 'with', id: string, exception: string } | { type: 'and' | 'or', args: Node[] }} Node */

const TOKEN = /\s*(\(|\)|\/|[A-Za-z0-9][A-Za-z0-9.+-]*)\s*/y;

function tokenize(text) {
  const tokens = [];
  TOKEN.lastIndex = 0;
  let pos = 0;
  while (pos < text.length) {
    TOKEN.lastIndex = pos;
    const m = TOKEN.exec(text);
    if (!m) throw new Error(`unexpected character ${JSON.stringify(text[pos])} at ${pos} in ${JSON.stringify(text)}`);
    tokens.push(m[1]);
    pos = TOKEN.lastIndex;
  }
  return tokens;
}

/** @returns {Node} */
export function parse(text) {
  if (typeof text !== 'string' || text.trim() === '') throw new Error('empty licence expression');
  const tokens = tokenize(text);
  let i = 0;
  const peek = () => tokens[i];
  const next = () => tokens[i++];
  const isOperator = (t) => t === 'AND' || t === 'OR' || t === 'WITH' || t === '/' || t === '(' || t === ')';

  const atom = () => {
    const t = next();
    if (t === undefined) throw new Error(`licence expression ends too early: ${JSON.stringify(text)}`);
    if (t === '(') {
      const inner = or();
      if (next() !== ')') throw new Error(`missing ")" in ${JSON.stringify(text)}`);
      return inner;
    }
    if (isOperator(t)) throw new Error(`unexpected ${JSON.stringify(t)} in ${JSON.stringify(text)}`);
    if (peek() === 'WITH') {
      next();
      const exception = next();
      if (exception === undefined || isOperator(exception)) throw new Error(`WITH needs an exception in ${JSON.stringify(text)}`);
      return { type: 'with', id: t, exception };
    }
    return { type: 'id', id: t };
  };
  const and = () => {
    const args = [atom()];
    while (peek() === 'AND') { next(); args.push(atom()); }
    return args.length === 1 ? args[0] : { type: 'and', args };
  };
  const or = () => {
    const args = [and()];
    while (peek() === 'OR' || peek() === '/') { next(); args.push(and()); }
    return args.length === 1 ? args[0] : { type: 'or', args };
  };

  const tree = or();
  if (i !== tokens.length) throw new Error(`unexpected ${JSON.stringify(tokens[i])} in ${JSON.stringify(text)}`);
  return tree;
}

/** Every licence (and "licence WITH exception") the expression names. */
export function names(node) {
  switch (node.type) {
    case 'id': return [node.id];
    case 'with': return [`${node.id} WITH ${node.exception}`];
    default: return node.args.flatMap(names);
  }
}

/** Whether the accepted set satisfies the expression (a string or a parsed tree). */
export function allows(accepted, expression) {
  const node = typeof expression === 'string' ? parse(expression) : expression;
  switch (node.type) {
    case 'id': return accepted.has(node.id);
    case 'with': return accepted.has(`${node.id} WITH ${node.exception}`);
    case 'and': return node.args.every((a) => allows(accepted, a));
    case 'or': return node.args.some((a) => allows(accepted, a));
    default: throw new Error(`unknown node ${JSON.stringify(node)}`);
  }
}
