// DOM helpers of the console's pages: every value is appended as a text node or an element,
// never parsed as HTML.

/** The first element under `root` matching `selector`, or null. */
export const $ = (selector, root = document) => root.querySelector(selector);

/** A new `tag` element with `attrs` ("class" sets className) and `children` (nodes or
 * strings; null and undefined are left out). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}
